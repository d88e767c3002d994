"""The Dynamo backend ``"tpu"``.

Dynamo hands each captured FX graph to :func:`tpu_backend`; AOTAutograd traces it into ATen
graphs - one for inference, or a forward and a backward for training - and each of those is
compiled by :class:`~torch_tpu.dynamo.graph_runner.CompiledFxGraph`. Forward and backward are
split by the min-cut rematerialization partitioner, as Inductor splits them. Input mutations
(parameters, buffers and optimizer state updated in place) stay inside the graphs, so their
buffers are donated to the new values.
"""

import functools
import warnings

from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition

from .asserts import keep_asserts_without_message
from .graph_runner import CompiledFxGraph
from .scatter_sums import fold_scatter_sums

# torch.compile's `mode=` values and `options=` keys are Inductor's. They are accepted and
# do not change what this backend does; each distinct one is noted once.
_noted = set()


def _note_unused(what: str) -> None:
    if what not in _noted:
        _noted.add(what)
        warnings.warn(
            f'torch.compile(backend="tpu"): {what} is an Inductor setting and has no effect on the '
            "tpu backend (every graph is compiled whole by XLA); it is accepted and ignored.",
            stacklevel=3,
        )


def _compile_graph(gm, example_inputs, kind):
    fold_scatter_sums(gm)
    return CompiledFxGraph(gm, kind)


_aot_backend = aot_autograd(
    fw_compiler=functools.partial(_compile_graph, kind="forward"),
    bw_compiler=functools.partial(_compile_graph, kind="backward"),
    inference_compiler=functools.partial(_compile_graph, kind="inference"),
    keep_inference_input_mutations=True,
    # As Inductor: the forward saves what the backward cannot cheaply recompute, and the
    # backward program recomputes the rest inside its own fusions. Fewer saved activations
    # mean fewer forward outputs to materialize and hand over (issue 16: the dim-64 Llama
    # training step takes 0.84-0.88x the time of AOTAutograd's default partition).
    partition_fn=min_cut_rematerialization_partition,
)


def tpu_backend(gm, example_inputs, mode=None, options=None):
    """Compiles a Dynamo graph for the ``tpu`` device (``torch.compile(m, backend="tpu")``)."""
    if mode not in (None, "default"):
        _note_unused(f"mode={mode!r}")
    for key in sorted(options or {}):
        _note_unused(f"option {key!r}")
    keep_asserts_without_message(gm)
    return _aot_backend(gm, example_inputs)
