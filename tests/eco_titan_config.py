"""torchtitan config_registry functions for the `tpu` device (``--module eco_titan_config
--config qwen3_debugmodel_tpu``): torchtitan's Qwen3 debug model with SDPA attention.

Why SDPA: torchtitan 0.3 builds language models with FlexAttention (torch.compile'd through
Inductor; torch 2.13's flex_attention also rejects devices other than cuda/cpu/xpu/hpu/mps) or
Varlen attention (CUDA flash kernels in bfloat16). Its trainer also accepts a maskless inner
attention - F.scaled_dot_product_attention with ``is_causal`` - which gets positions for RoPE but
no document mask, so it is exact when every training sample holds one document (as in the
tests' datasets), and otherwise lets tokens attend across packed-document boundaries."""

from torchtitan.models import llama3, qwen3
from torchtitan.models.common.attention import ScaledDotProductAttention
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.models.qwen3.config_registry import qwen3_debugmodel


def _with_sdpa(model_spec):
    for layer in model_spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return model_spec


def _for_tpu(config, model_spec):
    """SDPA attention; no activation checkpointing (recomputation buys nothing at debug sizes);
    and FSDP2 over a plain DeviceMesh ("partial_dtensor"): torchtitan 0.3's default "spmd_types"
    backend fails under torch 2.13 on every device ("When dp_mesh_dims is provided, all parameters
    must be DTensors on the full SPMD mesh"). The optimizer stays torchtitan's default, the fused
    AdamW (``_fused_adamw_`` has a tpu kernel)."""
    config.model_spec = _with_sdpa(model_spec)
    config.activation_checkpoint = None
    config.parallelism.spmd_backend = "partial_dtensor"
    return config


def qwen3_debugmodel_tpu():
    """torchtitan's Qwen3 debug model (cos/sin RoPE) for the tpu device."""
    return _for_tpu(qwen3_debugmodel(), qwen3.model_registry("debugmodel"))


def llama3_debugmodel_tpu():
    """torchtitan's Llama 3 debug model for the tpu device; its RoPE multiplies complex
    tensors, which the tpu device does not support yet."""
    return _for_tpu(llama3_debugmodel(), llama3.model_registry("debugmodel"))
