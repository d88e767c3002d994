"""``torch.tpu.pallas``: custom kernels from JAX / Pallas (see torch_tpu.kernels); importing it
does not import JAX."""

from ..kernels import jax_op, stablehlo_op

custom_jax_kernel = jax_op

__all__ = ["custom_jax_kernel", "jax_op", "stablehlo_op"]
