"""Shape (Meta) kernels for the aten ops our device implements that the oldest supported torch
lacks. Fake tensors (torch.compile, FSDP2's meta init) run an op's Meta kernel to learn its
outputs; without one they fall through to the op's default body, which for the ``*_overrideable``
ops only raises "please use TORCH_LIBRARY_IMPL". Each entry is registered only where the
installed torch has no Meta kernel of its own."""

import torch

_libs = {}  # namespace -> the torch.library.Library our kernels are registered through


def _sdpa_overrideable_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                                cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                                philox_offset, *, scale=None):
    # The gradients have their inputs' shapes (torch >= 2.12 registers the same rule).
    grad_bias = torch.empty_like(attn_bias) if attn_bias is not None else None
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value), grad_bias


# op name -> Meta kernel
_KERNELS = {
    "_scaled_dot_product_fused_attention_overrideable_backward": _sdpa_overrideable_backward,
}


def missing(kernels=None, namespace="aten") -> list:
    """The ops of ``kernels`` (default: the table) with no Meta kernel in the installed torch."""
    return [name for name in (_KERNELS if kernels is None else kernels)
            if not torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::{name}", "Meta")]


def install(kernels=None, namespace="aten") -> list:
    """Registers the kernels (default: the table) the installed torch lacks; returns their
    names. Calling it again registers nothing twice."""
    kernels = _KERNELS if kernels is None else kernels
    names = missing(kernels, namespace)
    if names and namespace not in _libs:
        _libs[namespace] = torch.library.Library(namespace, "IMPL")
    for name in names:
        _libs[namespace].impl(name, kernels[name], "Meta")
    return names
