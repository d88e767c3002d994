"""``ragged_dot`` and ``ragged_dot_weight_grad``: the grouped matrix products of Mixture-of-Experts
layers, at the cost of the ragged product and with no host read.

``ragged_dot(lhs [m, k], rhs [g, k, n], group_sizes [g])``: rows of ``lhs`` form ``g`` consecutive
groups (``group_sizes[i]`` rows each) and group ``i`` is multiplied by ``rhs[i]``; rows past the
groups' total are zero. ``ragged_dot_weight_grad(lhs, grad [m, n], group_sizes)`` is its gradient
with respect to ``rhs``: ``lhs[group i].T @ grad[group i]`` per group.

Sorted tiles: each group's rows are cut into tiles of ``T`` rows (the last one padded); the tiles
are laid out group after group - at most ``ceil(m / T) + g`` of them, a static count - and each is
one row block of a batched matrix product with its group's matrix. The work is that of the ragged
product plus at most one padded tile per group (``T`` is chosen from ``m / g``), not ``g`` times
the dense product; the tile layout is computed on the device from ``group_sizes``, so one program
serves every split of the rows. Built from ATen ops (each through its lowering), so Strict, Fused
Eager and torch.compile run it alike; autograd uses the two functions for each other's gradients.
"""

import torch


def _tile_rows(m, g):
    per_group = max(1, -(-m // (2 * max(g, 1))))
    return min(128, max(8, 1 << (per_group - 1).bit_length()))


def _layout(group_sizes, m, tile):
    """Per tile: its group (clamped), and per tile row: whether it holds a row of the group and
    which row of ``lhs`` that is."""
    g = group_sizes.numel()
    sizes = group_sizes.to(torch.int64).clamp(min=0)
    starts = torch.cumsum(sizes, 0) - sizes
    tiles = (sizes + tile - 1) // tile
    tile_end = torch.cumsum(tiles, 0)
    count = -(-m // tile) + g
    t = torch.arange(count, device=group_sizes.device)
    group = torch.searchsorted(tile_end, t, right=True)
    used = group < g
    group = group.clamp(max=g - 1)
    row = (t - (tile_end[group] - tiles[group])).unsqueeze(1) * tile + torch.arange(tile, device=t.device)
    source = starts[group].unsqueeze(1) + row
    valid = used.unsqueeze(1) & (row < sizes[group].unsqueeze(1)) & (source < m)
    return group, valid, source.clamp(0, max(m - 1, 0))


def _gather_rows(x, source, valid):
    rows = x[source.reshape(-1)].reshape(*source.shape, x.shape[-1])
    return rows * valid.unsqueeze(-1).to(rows.dtype)


def _check(lhs, rhs_or_grad, group_sizes, name, rhs_rank):
    if lhs.dim() != 2 or rhs_or_grad.dim() != rhs_rank or group_sizes.dim() != 1:
        raise ValueError(f"{name}: expected lhs (m, k), {'rhs (g, k, n)' if rhs_rank == 3 else 'grad (m, n)'} and "
                         f"group_sizes (g,), got {tuple(lhs.shape)}, {tuple(rhs_or_grad.shape)}, "
                         f"{tuple(group_sizes.shape)}")
    if group_sizes.is_floating_point() or group_sizes.is_complex():
        raise TypeError(f"{name}: group_sizes must be an integer tensor, got {group_sizes.dtype}")
    if group_sizes.device != lhs.device:
        raise ValueError(f"{name}: group_sizes must be on {lhs.device} (no host read), got {group_sizes.device}")


def _forward(lhs, rhs, group_sizes):
    m, g, n = lhs.shape[0], rhs.shape[0], rhs.shape[2]
    tile = _tile_rows(m, g)
    group, valid, source = _layout(group_sizes, m, tile)
    x = _gather_rows(lhs, source, valid)                     # [tiles, T, k]
    y = torch.bmm(x, rhs[group])                             # [tiles, T, n]
    target = torch.where(valid, source, m).reshape(-1)       # padding rows land in a spare row
    out = lhs.new_zeros(m + 1, n).index_add_(0, target, y.reshape(-1, n))
    return out[:m]


def _weight_grad(lhs, grad, group_sizes, groups):
    m, k, n = lhs.shape[0], lhs.shape[1], grad.shape[1]
    tile = _tile_rows(m, groups)
    group, valid, source = _layout(group_sizes, m, tile)
    x = _gather_rows(lhs, source, valid)                     # [tiles, T, k]
    dy = _gather_rows(grad, source, valid)                   # [tiles, T, n]
    per_tile = torch.bmm(x.transpose(1, 2), dy)              # [tiles, k, n]
    return lhs.new_zeros(groups, k, n).index_add_(0, group, per_tile)


class _RaggedDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lhs, rhs, group_sizes):
        ctx.save_for_backward(lhs, rhs, group_sizes)
        return _forward(lhs, rhs, group_sizes)

    @staticmethod
    def backward(ctx, grad):
        lhs, rhs, group_sizes = ctx.saved_tensors
        d_lhs = _forward(grad, rhs.transpose(1, 2), group_sizes) if ctx.needs_input_grad[0] else None
        d_rhs = _weight_grad(lhs, grad, group_sizes, rhs.shape[0]) if ctx.needs_input_grad[1] else None
        return d_lhs, d_rhs, None


def ragged_dot(lhs, rhs, group_sizes, *, out=None):
    """``out[rows of group i] = lhs[rows of group i] @ rhs[i]`` (see the module docstring);
    differentiable in ``lhs`` and ``rhs`` when ``out`` is not given."""
    _check(lhs, rhs, group_sizes, "ragged_dot", 3)
    if lhs.shape[1] != rhs.shape[1] or rhs.shape[0] != group_sizes.shape[0]:
        raise ValueError(f"ragged_dot: lhs {tuple(lhs.shape)}, rhs {tuple(rhs.shape)} and group_sizes "
                         f"{tuple(group_sizes.shape)} do not fit (lhs (m, k), rhs (g, k, n), group_sizes (g,))")
    if lhs.dtype != rhs.dtype:
        raise TypeError(f"ragged_dot: lhs and rhs must have one dtype, got {lhs.dtype} and {rhs.dtype}")
    if out is None:
        return _RaggedDot.apply(lhs, rhs, group_sizes)
    if out.shape != (lhs.shape[0], rhs.shape[2]):
        raise ValueError(f"ragged_dot: out must have shape {(lhs.shape[0], rhs.shape[2])}, got {tuple(out.shape)}")
    with torch.no_grad():
        return out.copy_(_forward(lhs, rhs, group_sizes))


def ragged_dot_weight_grad(lhs, grad_output, group_sizes):
    """``result[i] = lhs[rows of group i].T @ grad_output[rows of group i]``: [g, k, n]."""
    _check(lhs, grad_output, group_sizes, "ragged_dot_weight_grad", 2)
    if grad_output.shape[0] != lhs.shape[0]:
        raise ValueError(f"ragged_dot_weight_grad: lhs has {lhs.shape[0]} rows, grad_output {grad_output.shape[0]}")
    return _weight_grad(lhs, grad_output, group_sizes, group_sizes.shape[0])
