"""The reference models with their loss functions and example batches, for tests and benchmarks."""

import torch
import torch.nn.functional as F

import models


def _resnet_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def _call_loss(model, *batch):
    return model(*batch)


def cases():
    """name -> (make_model, make_batch(generator), loss(model, *batch))"""
    return {
        "llama": (lambda: models.Llama(), lambda g: models.Llama.example_batch(generator=g), _call_loss),
        "qwen3": (lambda: models.Qwen3(), lambda g: models.Qwen3.example_batch(generator=g), _call_loss),
        "resnet18": (lambda: models.resnet18(), lambda g: models.resnet.ResNet.example_batch(batch=8, generator=g),
                     _resnet_loss),
        "dlrm": (lambda: models.DLRM(), lambda g: models.DLRM.example_batch(generator=g), _call_loss),
        "mingpt": (lambda: models.GPT(models.GPTConfig(dropout=0.0)), lambda g: models.GPT.example_batch(generator=g),
                   _call_loss),
        "unet": (lambda: models.UNet(), lambda g: models.UNet.example_batch(generator=g), _call_loss),
    }


def to_device(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x
