"""``stablehlo_op``: a kernel written directly in StableHLO text, as a custom op on tpu tensors.
The text's @main fixes the input and output types; calls are checked against it."""

import re

import torch

from ._kernel_op import KernelOp

_MLIR_DTYPES = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "ui8": torch.uint8, "i1": torch.bool,
}
_TENSOR = re.compile(r"tensor<([^>]*)>")
_MAIN = re.compile(r"func\.func\s+(?:public\s+|private\s+)?@main\s*\((.*?)\)\s*->\s*(.*?)\s*\{\s*$", re.M)


def _parse_type(t):
    parts = t.split("x")
    dtype = _MLIR_DTYPES.get(parts[-1])
    if dtype is None:
        raise ValueError(f"unsupported element type '{parts[-1]}' in tensor<{t}>")
    return tuple(int(d) for d in parts[:-1]), dtype


def main_signature(text):
    """([(shape, dtype)] of @main's parameters, [(shape, dtype)] of its results)."""
    m = _MAIN.search(text)
    if m is None:
        raise ValueError("the StableHLO text has no 'func.func @main(...) -> ... {' line")
    args = [_parse_type(t) for t in _TENSOR.findall(m.group(1))]
    results = [_parse_type(t) for t in _TENSOR.findall(m.group(2))]
    return args, results


class _TextSource:
    def __init__(self, name, text, out_specs):
        self.name = name
        self.text = text
        self.platform = None
        self.in_types, results = main_signature(text)
        if out_specs is not None:
            given = [(tuple(s), d) for s, d in out_specs]
            if given != results:
                raise ValueError(f"{name}: out_specs {given} differ from @main's results {results}")
        self.out = results

    def out_types(self, spec, sig):
        if list(sig) != self.in_types:
            raise TypeError(f"{self.name}: the kernel takes {self.in_types}, got {list(sig)}")
        return [s for s, _ in self.out], [d for _, d in self.out]

    def lower(self, spec, sig, platform):
        self.out_types(spec, sig)
        return self.text

    def run_cpu(self, spec, tensors):
        raise RuntimeError(f"{self.name}: a StableHLO text kernel runs only on tpu tensors; "
                           "move the inputs with .to('tpu')")


def stablehlo_op(name, mlir_text, out_specs=None):
    """The custom op ``name`` running ``mlir_text`` (a module with a @main, or bare functions
    with a @main). ``out_specs``: optional [(shape, dtype)] checked against @main's results.
    Call it with the input tensors; it returns a tensor (one result) or a tuple."""
    source = _TextSource(name, mlir_text, out_specs)
    kernel = KernelOp(name, source)

    def call(*tensors):
        outs = kernel(list(tensors), "")
        return outs[0] if len(outs) == 1 else tuple(outs)

    call.custom_op = kernel.op
    call.kernel = kernel
    call.__name__ = name.split("::")[-1]
    torch._dynamo.allow_in_graph(call)
    return call
