"""Linear layers with weights packed once, for serving on the XLA CPU plugin.

A decode step multiplies a few rows by every weight of the model once, most of a 100M model's
step on two cores. XLA's CPU dot takes each weight as a plain operand and lays it out for its
micro-kernel on every call, as its times suggest (``docs/design.md``, CPU-plugin layout). Where the plugin runs the
host kernel ``torch_tpu_packed_matmul`` (C++, ``csrc/host_kernels/packed_matmul.cc``), an engine
packs each weight once, at load time, into column panels ``[ceil(N / 32), K, 32]`` (``pack``),
and its linear layers call ``linear``: one custom call per product that streams the panels with
every row's product in registers (AVX-512 where the CPU has it).

``packed_matmul`` is a custom op (``tpu::packed_matmul``) lowered to the custom call, so it is
one op in Strict mode and part of the step program in Fused Eager and torch.compile, cached like
every other program. On CPU tensors, and on plugins without the kernel, ``linear`` is the same
product written with a plain matmul (what the tests compare against).
"""

import functools

import torch

from .. import _C
from ..kernels._kernel_op import KernelOp
from ..kernels._mlir_text import tensor_type

TARGET = "torch_tpu_packed_matmul"
PANEL = 32  # the columns of one panel (the kernel's constant)


@torch.compiler.assume_constant_result  # a constant to torch.compile, not a graph break
def available() -> bool:
    """Whether the tpu device's plugin runs the packed matmul kernel."""
    return _registered()


@functools.lru_cache(maxsize=None)
def _registered() -> bool:
    return TARGET in _C._host_kernels()


def pack(weight: torch.Tensor) -> torch.Tensor:
    """An F.linear weight [N, K] as column panels [ceil(N / 32), K, 32] (zero-padded), on its
    device: panel p, row k holds weight[32 p : 32 p + 32, k]."""
    n, k = weight.shape
    panels = -(-n // PANEL)
    padded = torch.nn.functional.pad(weight, (0, 0, 0, panels * PANEL - n))
    return padded.reshape(panels, PANEL, k).transpose(1, 2).contiguous()


def reference(x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
    """x [M, K] times the packed weight, as a plain matmul: [M, n]."""
    panels, k, _ = packed.shape
    return (x @ packed.transpose(0, 1).reshape(k, panels * PANEL))[:, :n]


class _PackedMatmulSource:
    platform = None
    symbolic_shapes = True  # out_types copies the rows and takes N from the spec

    def out_types(self, spec, sig):
        (m, _), _ = sig[0]
        return [(m, int(spec))], [torch.float32]

    def lower(self, spec, sig, platform):
        name = "packed_matmul"
        x, w = (tensor_type(s, d, name) for s, d in sig)
        out = tensor_type(self.out_types(spec, sig)[0][0], torch.float32, name)
        return (f"func.func public @main(%x: {x}, %w: {w}) -> {out} {{\n"
                f'  %r = "stablehlo.custom_call"(%x, %w) {{call_target_name = "{TARGET}", '
                f"api_version = 4 : i32}} : ({x}, {w}) -> {out}\n"
                f"  return %r : {out}\n}}\n")

    def run_cpu(self, spec, tensors):
        x, w = tensors
        return [reference(x, w, int(spec))]


_kernel = KernelOp("tpu::packed_matmul", _PackedMatmulSource())


def packed_matmul(x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
    """x [M, K] float32 times a weight ``pack``ed from [n, K]: [M, n] (the kernel's custom call)."""
    return _kernel([x, packed], str(int(n)))[0]


def linear(x: torch.Tensor, packed: torch.Tensor, n: int, bias=None) -> torch.Tensor:
    """F.linear(x, weight, bias) for ``packed = pack(weight)``, ``n = weight.shape[0]``: x [..., K]
    -> [..., n]. The kernel where the plugin has it and x is float32 on the device, the plain
    product elsewhere."""
    rows = x.reshape(-1, x.shape[-1])
    if available() and x.device.type == "tpu" and x.dtype == torch.float32 and packed.dtype == torch.float32:
        out = packed_matmul(rows.contiguous(), packed, n)
    else:
        out = reference(rows, packed.to(x.dtype), n)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], n)
