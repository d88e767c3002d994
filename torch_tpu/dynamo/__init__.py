"""torch.compile(backend="tpu"): Dynamo captures the model's graphs, AOTAutograd splits training
graphs into forward and backward, and each graph is compiled into one XLA program built with
the same op lowerings and compilation cache as eager mode.

The backend is found by name through the ``torch_dynamo_backends`` entry point (loading it
imports this package); ``import torch_tpu.dynamo`` registers it explicitly.

    model = torch.compile(model, backend="tpu")
"""

from .backend import tpu_backend
from .device_interface import TpuInterface, register

register()

__all__ = ["TpuInterface", "tpu_backend"]
