"""tpu tensors through torch.multiprocessing queues and pipes.

PyTorch shares CPU tensors through shared memory and CUDA tensors through CUDA IPC handles; a PJRT
buffer has no handle another process can open, so a tpu tensor travels as its values (a CPU copy,
itself sent through shared memory) and is rebuilt on the same tpu device index by the receiver.
The receiver gets equal values, not shared storage: in-place changes on either side are not seen
by the other. A receiver forked after its parent used the device gets the fork RuntimeError when
the tensor is rebuilt; start workers with 'spawn'.
"""

from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions


def _rebuild_on_device(values: torch.Tensor, device: str, requires_grad: bool, parameter: bool):
    tensor = values.to(device)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)


def _reduce(tensor: torch.Tensor):
    if tensor.device.type != "tpu":
        return reductions.reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        # PyTorch's own rule for every device (autograd history cannot cross processes).
        return reductions.reduce_tensor(tensor)
    parameter = isinstance(tensor, torch.nn.Parameter)
    return (_rebuild_on_device, (tensor.detach().cpu(), str(tensor.device), tensor.requires_grad, parameter))


def install() -> None:
    """Routes tensors (and Parameters) through ``_reduce``, after torch.multiprocessing's own
    registrations (made when torch is imported)."""
    for cls in (torch.Tensor, torch.nn.Parameter):
        ForkingPickler.register(cls, _reduce)
