"""The torch side of a custom kernel: one torch.library.custom_op
``ns::name(Tensor[] tensors, str spec) -> Tensor[]`` whose tpu implementation runs a registered
StableHLO function through the "custom_kernel" lowering (so Strict, Fused and torch.compile all
compile it through the one compilation cache), with a fake implementation for tracing.

``spec`` names how the flat tensors map to the user's call (pytrees, static arguments); a
``KernelSource`` turns (spec, input types) into StableHLO text, output types and a CPU runner."""

import torch

from .. import _C
from . import _mlir_text, _platform


class KernelTraceError(RuntimeError):
    """The kernel could not be traced or lowered for the given inputs."""


class Lowered:
    def __init__(self, symbol, out_shapes, out_dtypes):
        self.symbol = symbol
        self.out_shapes = out_shapes
        self.out_dtypes = out_dtypes


def signature(tensors):
    return tuple((tuple(t.shape), t.dtype) for t in tensors)


def register_text(label, text):
    """Registers a module's functions with the runtime; returns the entry symbol."""
    _platform.check_custom_calls(label, text, _platform.device_platform())
    prefix = "tpuk_" + _mlir_text.text_hash(text)
    symbol, functions = _mlir_text.prepare(text, prefix)
    if not _C._has_custom_kernel(symbol):
        _C._register_custom_kernel(symbol, functions, label)
    return symbol


class KernelOp:
    """A custom op backed by `source` (an object with out_types(spec, sig), lower(spec, sig,
    platform) -> text and run_cpu(spec, tensors) -> tensors)."""

    def __init__(self, qualname, source):
        if not isinstance(qualname, str) or qualname.count("::") != 1:
            raise ValueError(f"a kernel name must look like 'mylib::name', got {qualname!r}")
        self.qualname = qualname
        self.source = source
        self._lowered = {}
        self._types = {}
        self.lowerings = 0  # how many signatures were lowered (tests, benchmarks)

        def impl(tensors: list[torch.Tensor], spec: str) -> list[torch.Tensor]:
            return self._run(tensors, spec)

        self.op = torch.library.custom_op(qualname, impl, mutates_args=())

        def fake(tensors, spec):
            shapes, dtypes = self.out_types(spec, tensors)
            device = tensors[0].device if tensors else torch.device("tpu")
            return [torch.empty(s, dtype=d, device=device) for s, d in zip(shapes, dtypes)]

        self.op.register_fake(fake)

    def out_types(self, spec, tensors):
        key = (spec, signature(tensors))
        types = self._types.get(key)
        if types is None:
            types = self.source.out_types(spec, key[1])
            self._types[key] = types
        return types

    def lowered(self, spec, tensors):
        key = (spec, signature(tensors))
        low = self._lowered.get(key)
        if low is None:
            platform = self.source.platform or _platform.device_platform()
            text = self.source.lower(spec, key[1], platform)
            symbol = register_text(self.qualname, text)
            shapes, dtypes = self.out_types(spec, tensors)
            low = Lowered(symbol, [list(s) for s in shapes], list(dtypes))
            self._lowered[key] = low
            self.lowerings += 1
        return low

    def _run(self, tensors, spec):
        devices = {t.device.type for t in tensors}
        if devices == {"cpu"}:
            return self.source.run_cpu(spec, tensors)
        if devices != {"tpu"}:
            raise RuntimeError(f"{self.qualname}: inputs must all be tpu tensors or all CPU tensors, "
                               f"got {sorted(devices)}")
        low = self.lowered(spec, tensors)
        return _C._run_custom_kernel(low.symbol, list(tensors), low.out_shapes, low.out_dtypes)

    def __call__(self, tensors, spec):
        return self.op(list(tensors), spec)

    def run_direct(self, tensors, spec, sig):
        """The tpu implementation without the custom-op dispatch (callers check it may be
        skipped: no autograd, tracing or dispatch modes involved)."""
        low = self._lowered.get((spec, sig))
        if low is None:
            low = self.lowered(spec, tensors)
        return _C._run_custom_kernel(low.symbol, tensors, low.out_shapes, low.out_dtypes)


def may_skip_dispatch(tensors):
    """Whether a call on `tensors` can go straight to the tpu implementation: plain tpu tensors,
    no gradient to record, no torch.compile tracing, no Python dispatch or function modes."""
    if torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled():
        return False
    if torch._C._len_torch_dispatch_stack() > 0:
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if type(t) is not torch.Tensor or t.device.type != "tpu" or (grad and t.requires_grad):
            return False
    return bool(tensors)
