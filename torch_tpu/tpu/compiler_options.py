"""``torch.tpu.compiler``: XLA compiler options for the programs compiled in a block.

    with torch.tpu.compiler.custom_compiler_options({"xla_optimization_level": "O1",
                                                     "xla_cpu_enable_fast_math": False}):
        y = model(x)

Every program compiled inside the block (per-op programs, Fused Eager graphs, torch.compile
captures) is compiled with the merged options of all enclosing blocks (the inner value of a name
wins); the options are part of the program's cache key in memory and on disk. Names are XLA's
debug-option flags without the leading ``--`` (the plugin decides which exist), with Python
values of the flag's type (bool, int, float or str), plus two build options:
``xla_optimization_level`` and ``xla_memory_fitting_level`` (``"O0"`` .. ``"O3"``). An option
the plugin rejects raises ValueError at the ``with`` line, with the plugin's words. Work
recorded by Fused Eager runs at the block's edges, so it compiles with the options it was
recorded under. The options are process-wide (the backward ops autograd runs on its own thread
compile with them too). Not allowed inside a compiled function.
"""

import contextlib

from .. import _C, execution_mode
from .._compile_guard import forbidden_in_compile


@forbidden_in_compile("a compiled graph is one program with one set of compiler options.")
@contextlib.contextmanager
def custom_compiler_options(options: dict):
    """Compiles the block's programs with ``options`` merged into the enclosing ones."""
    if not isinstance(options, dict):
        raise TypeError(f"custom_compiler_options expects a dict of option names to values, got "
                        f"{type(options).__name__}")
    execution_mode.flush()  # what was recorded before compiles without these options
    _C._push_compiler_options(options)
    try:
        _C._check_compile_settings()
    except RuntimeError as e:
        _C._pop_compiler_options()
        raise ValueError(f"custom_compiler_options({options!r}): the plugin rejected the options: "
                         f"{str(e).split(': ', 1)[-1]}. Fix: use XLA flag names without '--' with "
                         "values of the flag's type (e.g. True, not 'true').") from None
    try:
        yield
    finally:
        execution_mode.flush()
        _C._pop_compiler_options()


def current_compiler_options() -> dict:
    """This thread's merged options (empty outside any block)."""
    return _C._compiler_options()


__all__ = ["custom_compiler_options"]
