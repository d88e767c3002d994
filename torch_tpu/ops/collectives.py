"""Collectives by dimension and point-to-point transfers on ``tpu_dist`` (the original
TorchTPU's ``torch.tpu.ops`` spelling).

``all_gather_dim`` / ``reduce_scatter_dim`` are PyTorch's functional collectives (so they trace
under torch.compile like DTensor's) gathering or scattering along any dimension; no autograd, as
in the original (use DTensor or ``torch.distributed.nn.functional`` for differentiable ones).
``send`` / ``recv`` move a list of tensors to / from one rank of the default group, matched by
``tag``, and return a work whose ``wait()`` completes them. ``ragged_all_to_all`` exchanges ragged
row slices (expert parallelism): an uneven ``all_to_all_single`` of the slices, placed at the
offsets their senders give, with autograd (the reverse exchange)."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

_REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor")
# The newer names of the same functional collectives where this PyTorch has them.
_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
_scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor


def _group(group):
    if not dist.is_initialized():
        raise RuntimeError("torch.tpu.ops collectives need an initialised process group: call "
                           "torch.distributed.init_process_group() first")
    return dist.group.WORLD if group is None else group


def all_gather_dim(input, dim, group=None):
    """Every rank's ``input`` concatenated along ``dim`` (its size times the group size)."""
    group = _group(group)
    if input.dim() == 0:
        raise ValueError("all_gather_dim: the input must have at least one dimension")
    dim = dim % input.dim()
    return funcol.wait_tensor(_gather(input.contiguous(), dim, group))


def reduce_scatter_dim(input, dim, group=None, reduce_op="sum"):
    """The reduction over ranks of ``input``, split along ``dim``: this rank's chunk."""
    group = _group(group)
    if reduce_op not in _REDUCE_OPS:
        raise ValueError(f"reduce_scatter_dim: reduce_op must be one of {_REDUCE_OPS}, got {reduce_op!r}")
    if reduce_op in ("band", "bor", "bxor") and (input.is_floating_point() or input.is_complex()):
        raise TypeError(f"reduce_scatter_dim: reduce_op={reduce_op!r} needs an integer or bool tensor, "
                        f"got {input.dtype}")
    if input.dim() == 0:
        raise ValueError("reduce_scatter_dim: the input must have at least one dimension")
    dim = dim % input.dim()
    size = dist.get_world_size(group)
    if input.size(dim) % size:
        raise ValueError(f"reduce_scatter_dim: dimension {dim} has size {input.size(dim)}, not divisible "
                         f"by the group size {size}")
    return funcol.wait_tensor(_scatter(input.contiguous(), reduce_op, dim, group))


class _Works:
    """The works of one send or recv of several tensors, waited together."""

    def __init__(self, works):
        self.works = works

    def wait(self, timeout=None):
        for w in self.works:
            w.wait() if timeout is None else w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self.works)


def _p2p(kind, tensors, peer, tag):
    _group(None)
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{kind.__name__}: no tensors given")
    ops = [dist.P2POp(kind, t, peer, tag=tag) for t in tensors]
    return _Works(dist.batch_isend_irecv(ops))


def send(tensors, dst, tag):
    """Sends ``tensors`` to rank ``dst``; ``wait()`` on the result before reusing them."""
    return _p2p(dist.isend, tensors, dst, tag)


def recv(tensors, src, tag):
    """Receives into ``tensors`` (shapes and dtypes as sent) from rank ``src``; ``wait()`` on the
    result before reading them."""
    return _p2p(dist.irecv, tensors, src, tag)


def _ints(t):
    return [int(v) for v in (t.tolist() if isinstance(t, torch.Tensor) else t)]


def _all_to_all(group, received, sent, recv_splits=None, send_splits=None):
    # The group's own method, not torch.distributed's: the backward runs on autograd's device
    # thread, which may not see the calling thread's c10d state (ranks as threads).
    group.alltoall_base(received, sent, recv_splits or [], send_splits or []).wait()


def _exchange(operand, output, starts, sends, recvs, group, targets=None, placed=None):
    """The ragged all-to-all: ``output`` with the received slices written in. ``targets`` (per
    receiver, where it puts this rank's slice: the senders' view, exchanged first) or ``placed``
    (per sender, where this rank puts its slice) says where. Returns (result, placed)."""
    size = group.size()
    for name, values in (("input_offsets", starts), ("send_sizes", sends), ("recv_sizes", recvs),
                         ("output_offsets", targets if placed is None else placed)):
        if len(values) != size:
            raise ValueError(f"ragged_all_to_all: {name} has {len(values)} entries for a group of {size} ranks")
    for j in range(size):
        if starts[j] < 0 or sends[j] < 0 or starts[j] + sends[j] > operand.shape[0]:
            raise ValueError(f"ragged_all_to_all: the slice for rank {j} (rows {starts[j]}:{starts[j] + sends[j]}) "
                             f"is outside the operand's {operand.shape[0]} rows")
    if placed is None:
        here = torch.empty(size, dtype=torch.int64, device=operand.device)
        _all_to_all(group, here, torch.tensor(targets, dtype=torch.int64, device=operand.device))
        placed = _ints(here)
    payload = torch.cat([operand[s:s + n] for s, n in zip(starts, sends)]) if sum(sends) else operand[:0]
    received = operand.new_empty((sum(recvs), *operand.shape[1:]))
    _all_to_all(group, received, payload.contiguous(), recvs, sends)
    result = output.clone()
    at = 0
    for j, n in enumerate(recvs):
        if n:
            if placed[j] < 0 or placed[j] + n > result.shape[0]:
                raise ValueError(f"ragged_all_to_all: rank {j} writes rows {placed[j]}:{placed[j] + n}, outside "
                                 f"the output's {result.shape[0]} rows")
            result[placed[j]:placed[j] + n] = received[at:at + n]
        at += n
    return result, placed


class _RaggedAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, operand, output, starts, sends, targets, recvs, group):
        result, placed = _exchange(operand, output, starts, sends, recvs, group, targets=targets)
        ctx.group, ctx.shape, ctx.layout = group, operand.shape, (starts, sends, placed, recvs)
        return result

    @staticmethod
    def backward(ctx, grad):
        starts, sends, placed, recvs = ctx.layout
        # The reverse exchange: each received slice's gradient goes back to the rows it came from.
        back, _ = _exchange(grad, grad.new_zeros(ctx.shape), placed, recvs, sends, ctx.group, placed=starts)
        return back, None, None, None, None, None, None


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, process_group_name,
                      *, out=None):
    """Sends ``operand[input_offsets[j] : input_offsets[j] + send_sizes[j]]`` to rank ``j`` of the
    group, which writes it into its copy of ``output`` at row ``output_offsets[j]`` (the sender's
    offsets); ``recv_sizes[j]`` rows come from rank ``j``. Rows nobody writes keep ``output``'s
    values. Differentiable with respect to ``operand`` when ``out`` is not given. The sizes and
    offsets are read on the host (they size the exchange)."""
    group = dist.distributed_c10d._resolve_process_group(process_group_name)
    if operand.shape[1:] != output.shape[1:] or operand.dtype != output.dtype:
        raise ValueError(f"ragged_all_to_all: operand {tuple(operand.shape)} {operand.dtype} and output "
                         f"{tuple(output.shape)} {output.dtype} must share dtype and row shape")
    layout = [_ints(t) for t in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    if out is None:
        return _RaggedAllToAll.apply(operand, output, *layout, group)
    with torch.no_grad():
        starts, sends, targets, recvs = layout
        result, _ = _exchange(operand, output, starts, sends, recvs, group, targets=targets)
        return out.copy_(result)
