"""Reference models written as plain PyTorch modules (small configurations).

Each module builds a model and a batch of synthetic inputs so tests, examples and benchmarks
can run it on any device: Llama-style and Qwen3-style decoders, ResNet-18, DLRM, minGPT and
UNet.
"""

from .dlrm import DLRM, DLRMConfig
from .llama import Llama, LlamaConfig
from .mingpt import GPT, GPTConfig
from .qwen3 import Qwen3, Qwen3Config
from .resnet import resnet18
from .unet import UNet, UNetConfig

__all__ = ["DLRM", "DLRMConfig", "GPT", "GPTConfig", "Llama", "LlamaConfig", "Qwen3", "Qwen3Config",
           "UNet", "UNetConfig", "resnet18"]
