"""``donate_argnums`` for jax_op: when a donated input's buffer may be reused.

JAX invalidates a donated array. A PyTorch caller can still read its tensor, so here donation
is a hint honoured only when no one can observe it: the argument is a tensor that only the call
holds (a temporary such as ``f(a @ b)`` or ``f(x.clone())``, not a variable the caller keeps),
whose storage no other tensor or view shares, that records no gradient and that is one whole
contiguous buffer. Then an output of the same shape and dtype is written into that buffer (the
program aliases it and PJRT donates it: no new allocation) and the output tensor *is* that
input tensor. Otherwise the input is left alone and the output is a new tensor."""

import sys

import torch


def _refs(args, i):
    return sys.getrefcount(args[i])


def _probe(*args):
    return _refs(args, 0)


def held_only_by_call(args, i):
    """Whether positional argument i of a `call(*args, **kwargs)` frame is a temporary.

    A temporary has the references of the argument tuple and getrefcount's own; any other holder
    (a caller's variable, a list, a frame) adds to it. The count is compared with a probe made
    now, through the same kind of call, never with a number fixed at import: the interpreter's
    call path can change at run time (after a failed `torch.compile(fullgraph=True)`, Dynamo's
    frame hook holds one more reference to every argument of every call), which must make
    neither a temporary look held nor a held tensor look temporary."""
    return _refs(args, i) <= _probe(object())


def consumable(t):
    """Whether tensor `t` (known to be held only by the call) may have its buffer reused."""
    if type(t) is not torch.Tensor or t.device.type != "tpu":
        return False
    if t.requires_grad and torch.is_grad_enabled():
        return False
    if t._base is not None or not t.is_contiguous() or t.storage_offset() != 0:
        return False
    storage = t.untyped_storage()
    if storage.nbytes() != t.numel() * t.element_size():
        return False
    # The storage object asked for here and `t` itself: any view adds a reference.
    return torch._C._storage_Use_Count(storage._cdata) <= 2


def pair_outputs(donated, tensors, out_shapes, out_dtypes, taken):
    """{input index: output index} for donated inputs (flat indices), each matched, as JAX does,
    to the first unclaimed output of its shape and dtype; unmatched donations are ignored."""
    pairs = {}
    claimed = set(taken)
    for i in donated:
        t = tensors[i]
        for j, (shape, dtype) in enumerate(zip(out_shapes, out_dtypes)):
            if j not in claimed and tuple(shape) == tuple(t.shape) and dtype == t.dtype:
                pairs[i] = j
                claimed.add(j)
                break
    return pairs
