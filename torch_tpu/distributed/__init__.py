"""Distributed training on ``tpu``: the ``tpu_dist`` c10d backend.

``import torch_tpu`` registers it, so ``init_process_group("tpu_dist")``,
``init_process_group("cpu:gloo,tpu:tpu_dist")`` and ``init_process_group()`` (tpu is the
accelerator) work, and DDP, FSDP2, DTensor, DeviceMesh and torchrun use it like NCCL on CUDA.

Two transports behind one backend (``transport_of(group)``; ``TORCH_TPU_DIST_TRANSPORT``):

* ``device``: collectives are XLA programs over the group's devices, launched by each rank on its
  own device - how TPUs and GPUs run them. On the XLA CPU plugin this needs every rank in this
  process (threads, one device each; see ``run_in_threads``).
* ``host``: device -> host -> Gloo -> device, for ranks in separate processes.

See docs/design.md ("Distributed") for how a rank maps to a device and what a collective does in
Fused Eager and under torch.compile.
"""

from ._backend import CHECK_ENV, TRANSPORT_ENV, register, transport_of
from ._threads import run_in_threads

register()

__all__ = ["CHECK_ENV", "TRANSPORT_ENV", "register", "run_in_threads", "transport_of"]
