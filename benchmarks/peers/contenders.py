"""The contenders of benchmarks/peers.py: which interpreter runs each, and how each one, inside
its worker process, sets up its framework.

`ENVIRONMENTS` names the virtual environments (built by benchmarks/peers/setup_envs.sh; "main"
is the project's own .venv). `setup(name)` runs in the worker before anything else touches torch
and returns a `Setup`: the device, how to wait for queued work, and the compile wrapper.
"""

import os
from typing import Callable, NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENVIRONMENTS = {
    "main": os.path.join(ROOT, ".venv"),
    "torchtpu": os.path.join(ROOT, ".venv-peers-torchtpu"),
    "xla": os.path.join(ROOT, ".venv-peers-xla"),
}

# name -> (environment, label for the table, optional: a failure is reported, not fatal)
CONTENDERS = {
    "ours_strict": ("main", "torch_tpu (ours) Strict eager", False),
    "ours_fused": ("main", "torch_tpu (ours) Fused eager", False),
    "ours_compile": ("main", "torch_tpu (ours) torch.compile(backend=\"tpu\")", False),
    "torchtpu_defer_never": ("torchtpu", "TorchTPU 0.2.0 eager DEFER_NEVER", True),
    "torchtpu_defer_never_blocking": ("torchtpu", "TorchTPU 0.2.0 eager DEFER_NEVER_AND_LAUNCH_BLOCKING", True),
    "torchtpu_defer_and_fuse": ("torchtpu", "TorchTPU 0.2.0 eager DEFER_AND_FUSE", True),
    "torchtpu_compile": ("torchtpu", "TorchTPU 0.2.0 torch.compile(backend=\"tpu\")", True),
    "xla_eager": ("xla", "PyTorch/XLA 2.9 eager mode (PJRT_DEVICE=CPU)", True),
    "xla_lazy": ("xla", "PyTorch/XLA 2.9 lazy tensors + sync per step (PJRT_DEVICE=CPU)", True),
    "cpu_eager": ("main", "PyTorch CPU eager", False),
    "cpu_inductor": ("main", "PyTorch CPU Inductor (torch.compile)", False),
}


class Setup(NamedTuple):
    device: str
    finish: Callable[[], None]  # waits until every queued op has run
    compile_fn: Optional[Callable] = None
    capturable: bool = False  # AdamW keeps its step count on the device (needed under compile)
    after_step: Optional[Callable[[], None]] = None
    versions: dict = {}
    sdpa_math: bool = False  # scaled_dot_product_attention through PyTorch's math decomposition


def _version(dist):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _ours(name):
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch
    import torch_tpu
    from torch_tpu.execution_mode import EagerMode, set_mode

    set_mode(EagerMode.FUSED if name == "ours_fused" else EagerMode.STRICT)
    compiled = name == "ours_compile"
    return Setup("tpu", torch.tpu.synchronize,
                 (lambda f: torch.compile(f, backend="tpu")) if compiled else None, compiled,
                 versions={"torch_tpu (ours)": getattr(torch_tpu, "__version__", "source tree")})


def _torchtpu_plugin():
    # TorchTPU 0.2.0 loads the PJRT plugin named by TPU_LIBRARY_PATH (libtpu is never installed
    # here): the XLA CPU plugin installed in its environment.
    import importlib.util

    spec = importlib.util.find_spec("fastatomstruct_xla_cpu")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("fastatomstruct-xla-cpu is missing from the TorchTPU environment: "
                           "run benchmarks/peers/setup_envs.sh")
    return os.path.join(list(spec.submodule_search_locations)[0], "libpjrt_cpu.so")


def _torchtpu(name):
    # Before torch is imported: its backend autoload starts TorchTPU, which aborts without a
    # plugin path, and would ask a cloud metadata server for the TPU topology.
    os.environ.setdefault("TPU_LIBRARY_PATH", _torchtpu_plugin())
    os.environ["TPU_SKIP_MDS_QUERY"] = "1"
    import torch
    import torch_tpu._loader as loader

    loader._init_device("tpu")  # autoload skips it when it finds no TPU hardware
    modes = {"torchtpu_defer_never": "DEFER_NEVER",
             "torchtpu_defer_never_blocking": "DEFER_NEVER_AND_LAUNCH_BLOCKING",
             "torchtpu_defer_and_fuse": "DEFER_AND_FUSE"}
    if name in modes:
        torch.tpu.eager_mode = getattr(torch.tpu.EagerMode, modes[name])
    compiled = name == "torchtpu_compile"
    # Its scaled_dot_product_attention runs a Pallas TPU kernel (a `tpu_custom_call` the CPU
    # plugin cannot compile), so attention takes PyTorch's math decomposition there.
    return Setup("tpu", torch.accelerator.synchronize,
                 (lambda f: torch.compile(f, backend="tpu")) if compiled else None, compiled,
                 versions={"torch-tpu": _version("torch-tpu"),
                           "eager_mode": str(torch.tpu.eager_mode)}, sdpa_math=True)


def _xla(name):
    os.environ["PJRT_DEVICE"] = "CPU"
    import torch_xla
    import torch_xla.core.xla_model as xm

    lazy = name == "xla_lazy"
    if not lazy:
        torch_xla.experimental.eager_mode(True)

    def finish():
        if lazy:
            torch_xla.sync()
        xm.wait_device_ops()

    return Setup(str(torch_xla.device()), finish, after_step=torch_xla.sync if lazy else None,
                 versions={"torch-xla": _version("torch-xla")})


def _cpu(name):
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # no tpu backend in this process
    import torch

    return Setup("cpu", lambda: None, torch.compile if name == "cpu_inductor" else None)


def setup(name):
    env = CONTENDERS[name][0]
    if env == "torchtpu":
        return _torchtpu(name)
    if env == "xla":
        return _xla(name)
    if name.startswith("ours_"):
        return _ours(name)
    return _cpu(name)
