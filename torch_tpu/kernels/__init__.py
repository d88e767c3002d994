"""Custom kernels on the tpu device, from JAX / Pallas functions or StableHLO text.

``jax_op("mylib::name")`` turns a JAX function into a PyTorch custom op whose program is a
func.call inside whatever torch_tpu compiles (Strict, Fused, torch.compile), cached in the one
compilation cache. JAX is imported only when a kernel is first traced.
See docs/custom_kernels.md."""

from ._jax_bridge import JaxNotInstalledError
from ._kernel_op import KernelTraceError
from ._platform import KernelPlatformError
from .jax_op import JaxOp, jax_op
from .stablehlo_op import stablehlo_op

__all__ = ["JaxNotInstalledError", "JaxOp", "KernelPlatformError", "KernelTraceError", "jax_op",
           "stablehlo_op"]
