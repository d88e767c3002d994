"""Max pooling without indices (the original TorchTPU's ``torch.tpu.ops.max_pool{1,2,3}d`` and
their ``_backward``): the forward returns only the pooled values; the backward recomputes where
the maxima are from the input, so no index tensor is kept between them. Arguments are lists, as
in ATen (``kernel_size``, ``stride``, ``padding``, ``dilation``; one entry per spatial dim) and
``ceil_mode``; inputs are batched (N, C, ...) or not (C, ...)."""

import torch
import torch.nn.functional as F

_FORWARD = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def _check(name, n, input, kernel_size, stride, padding, dilation):
    if input.dim() not in (n + 1, n + 2):
        raise ValueError(f"{name}: expected a {n + 1}D or {n + 2}D input, got {input.dim()}D")
    for arg, value in (("kernel_size", kernel_size), ("stride", stride), ("padding", padding),
                       ("dilation", dilation)):
        if len(value) != n:
            raise ValueError(f"{name}: {arg} must have {n} entries, got {list(value)}")


def _pool(n, input, kernel_size, stride, padding, dilation, ceil_mode):
    _check(f"max_pool{n}d", n, input, kernel_size, stride, padding, dilation)
    return _FORWARD[n](input, list(kernel_size), list(stride), list(padding), list(dilation), ceil_mode)


def _pool_backward(n, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    """The gradient with respect to ``input``: the pooling's vector-Jacobian product, taken at
    ``input`` (its maxima found again)."""
    _check(f"max_pool{n}d_backward", n, input, kernel_size, stride, padding, dilation)
    with torch.enable_grad():
        x = input.detach().requires_grad_()
        y = _FORWARD[n](x, list(kernel_size), list(stride), list(padding), list(dilation), ceil_mode)
        (grad,) = torch.autograd.grad(y, x, grad_output)
    return grad


def max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode):
    return _pool(1, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode):
    return _pool(2, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode):
    return _pool(3, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    return _pool_backward(1, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    return _pool_backward(2, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    return _pool_backward(3, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)
