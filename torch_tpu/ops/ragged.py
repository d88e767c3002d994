"""``ragged_dot`` and ``ragged_dot_weight_grad``: the grouped matrix products of Mixture-of-Experts
layers, at the cost of the ragged product and with no host read.

``ragged_dot(lhs [m, k], rhs [g, k, n], group_sizes [g])``: rows of ``lhs`` form ``g`` consecutive
groups (``group_sizes[i]`` rows each) and group ``i`` is multiplied by ``rhs[i]``; rows past the
groups' total are zero. ``ragged_dot_weight_grad(lhs, grad [m, n], group_sizes)`` is its gradient
with respect to ``rhs``: ``lhs[group i].T @ grad[group i]`` per group.

On tpu tensors both are ``torch._grouped_mm`` (2D x 3D and 2D x 2D) with the offsets made from the
sizes on the device - one lowering for both (csrc/lowering/grouped_mm.cc: sorted tiles, one
program for every split of the rows, the work of the ragged product) and PyTorch's autograd
formula for ``_grouped_mm``. On CPU tensors they are per-group products.
"""

import torch


def _check(lhs, other, group_sizes, name, other_rank):
    if lhs.dim() != 2 or other.dim() != other_rank or group_sizes.dim() != 1:
        raise ValueError(f"{name}: expected lhs (m, k), {'rhs (g, k, n)' if other_rank == 3 else 'grad (m, n)'} and "
                         f"group_sizes (g,), got {tuple(lhs.shape)}, {tuple(other.shape)}, {tuple(group_sizes.shape)}")
    if group_sizes.is_floating_point() or group_sizes.is_complex():
        raise TypeError(f"{name}: group_sizes must be an integer tensor, got {group_sizes.dtype}")
    if group_sizes.device != lhs.device:
        raise ValueError(f"{name}: group_sizes must be on {lhs.device} (no host read), got {group_sizes.device}")
    if lhs.dtype != other.dtype:
        raise TypeError(f"{name}: the two operands must have one dtype, got {lhs.dtype} and {other.dtype}")


def _offsets(group_sizes):
    return torch.cumsum(group_sizes.clamp(min=0), 0).to(torch.int32)


def _cpu_groups(group_sizes, m):
    start = 0
    for count in group_sizes.tolist():
        count = max(0, min(count, m - start))
        yield start, start + count
        start += count


def ragged_dot(lhs, rhs, group_sizes, *, out=None):
    """``out[rows of group i] = lhs[rows of group i] @ rhs[i]`` (see the module docstring);
    differentiable in ``lhs`` and ``rhs`` when ``out`` is not given."""
    _check(lhs, rhs, group_sizes, "ragged_dot", 3)
    if lhs.shape[1] != rhs.shape[1] or rhs.shape[0] != group_sizes.shape[0]:
        raise ValueError(f"ragged_dot: lhs {tuple(lhs.shape)}, rhs {tuple(rhs.shape)} and group_sizes "
                         f"{tuple(group_sizes.shape)} do not fit (lhs (m, k), rhs (g, k, n), group_sizes (g,))")
    if out is not None and out.shape != (lhs.shape[0], rhs.shape[2]):
        raise ValueError(f"ragged_dot: out must have shape {(lhs.shape[0], rhs.shape[2])}, got {tuple(out.shape)}")
    if lhs.device.type == "cpu":
        result = lhs.new_zeros(lhs.shape[0], rhs.shape[2])
        for i, (s, e) in enumerate(_cpu_groups(group_sizes, lhs.shape[0])):
            result[s:e] = lhs[s:e] @ rhs[i]
    else:
        result = torch._grouped_mm(lhs, rhs, offs=_offsets(group_sizes))
    if out is None:
        return result
    with torch.no_grad():
        return out.copy_(result)


def ragged_dot_weight_grad(lhs, grad_output, group_sizes):
    """``result[i] = lhs[rows of group i].T @ grad_output[rows of group i]``: [g, k, n]."""
    _check(lhs, grad_output, group_sizes, "ragged_dot_weight_grad", 2)
    if grad_output.shape[0] != lhs.shape[0]:
        raise ValueError(f"ragged_dot_weight_grad: lhs has {lhs.shape[0]} rows, grad_output {grad_output.shape[0]}")
    if lhs.device.type == "cpu":
        result = lhs.new_zeros(group_sizes.shape[0], lhs.shape[1], grad_output.shape[1])
        for i, (s, e) in enumerate(_cpu_groups(group_sizes, lhs.shape[0])):
            result[i] = lhs[s:e].T @ grad_output[s:e]
        return result
    return torch._grouped_mm(lhs.t(), grad_output, offs=_offsets(group_sizes))
