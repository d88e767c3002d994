"""Collectives by dimension and point-to-point transfers on ``tpu_dist`` (the original
TorchTPU's ``torch.tpu.ops`` spelling).

``all_gather_dim`` / ``reduce_scatter_dim`` are PyTorch's functional collectives (so they trace
under torch.compile like DTensor's) gathering or scattering along any dimension; no autograd, as
in the original (use DTensor or ``torch.distributed.nn.functional`` for differentiable ones).
``send`` / ``recv`` move a list of tensors to / from one rank of the default group, matched by
``tag``, and return a work whose ``wait()`` completes them."""

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
