"""``optimization_barrier(tensors)``: ``stablehlo.optimization_barrier`` over the tensors.

The values pass through unchanged, but XLA moves no computation across the barrier and does not
fuse or deduplicate work on its two sides: every op producing the inputs runs before it, every
op using its outputs after it (e.g. to keep an activation-checkpointing recomputation where it
is). A custom kernel (torch_tpu.kernels), so it is one op in Strict mode, part of the surrounding
graph in Fused Eager and torch.compile. Differentiable: the gradients pass through a barrier
too. On CPU tensors it returns copies."""

import torch

from ..kernels._kernel_op import KernelOp
from ..kernels._mlir_text import tensor_type

class _BarrierSource:
    platform = None

    def out_types(self, spec, sig):
        return [s for s, _ in sig], [d for _, d in sig]

    def lower(self, spec, sig, platform):
        types = [tensor_type(s, d, "optimization_barrier") for s, d in sig]
        args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
        operands = ", ".join(f"%a{i}" for i in range(len(types)))
        results = ", ".join(f"%r#{i}" for i in range(len(types)))
        joined = ", ".join(types)
        return (f"func.func public @main({args}) -> ({joined}) {{\n"
                f'  %r:{len(types)} = "stablehlo.optimization_barrier"({operands}) : ({joined}) -> ({joined})\n'
                f"  return {results} : {joined}\n}}\n")

    def run_cpu(self, spec, tensors):
        return [t.clone() for t in tensors]


_kernel = KernelOp("tpu::optimization_barrier", _BarrierSource())


def _setup(ctx, inputs, output):
    pass


def _backward(ctx, grads):
    grads = list(grads)
    present = [i for i, g in enumerate(grads) if g is not None]
    if present:
        passed = _kernel([grads[i].contiguous() for i in present], "")
        for i, g in zip(present, passed):
            grads[i] = g
    return grads, None


_kernel.op.register_autograd(_backward, setup_context=_setup)


def optimization_barrier(tensors):
    """The tensors' values after a barrier (a list in the same order); use them instead of the
    inputs so later work is ordered after the barrier."""
    tensors = list(tensors)
    if not tensors:
        return []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"optimization_barrier expects tensors, got {type(t).__name__}")
    return list(_kernel(tensors, ""))
