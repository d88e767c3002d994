"""Hugging Face `kernels` on the tpu device: variant resolution picks `torch-tpu` builds, and
`kernelize(model, device="tpu")` swaps in a kernel repository's layers. The kernel repositories
are written into tmp_path at test time; kernelized outputs are compared with the CPU reference."""


# Offline: tests/conftest.py sets HF_HUB_OFFLINE and friends for every test and subprocess.

import copy  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import textwrap  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import torch_tpu  # noqa: E402  (sets torch.backends.tpu, which kernels reads to pick TPU builds)

from kernels import (  # noqa: E402
    KernelizeFallback,
    LocalLayerRepository,
    Mode,
    get_local_kernel,
    kernelize,
    use_kernel_forward_from_hub,
    use_kernel_mapping,
)
from kernels.backends import TPU, _backend, _supported_backends  # noqa: E402
from kernels.variants import VariantAccepted, parse_variant, resolve_variant  # noqa: E402
from helpers import assert_close  # noqa: E402
from torch_tpu.dynamo import graph_runner  # noqa: E402

_TORCH_MM = "{}{}".format(*torch.__version__.split(".")[:2])
_CUDA_ARCH_VARIANT = f"torch{_TORCH_MM}-cxx11-cu126-{platform.machine()}-linux"

# The kernel's layers, written with torch ops. CALLS records (layer, variant, device type) for
# every call so a test can tell which build ran; the layer classes themselves must stay
# stateless (kernels rejects layers with their own members).
_LAYERS_SOURCE = '''
import torch
from torch import nn

VARIANT = {variant!r}
CALLS = []


class SiluAndMul(nn.Module):
    can_torch_compile = True

    def forward(self, x):
        CALLS.append(("SiluAndMul", VARIANT, x.device.type))
        half = x.shape[-1] // 2
        return torch.sigmoid(x[..., :half]) * x[..., :half] * x[..., half:]


class RMSNorm(nn.Module):
    can_torch_compile = True

    def forward(self, hidden_states):
        CALLS.append(("RMSNorm", VARIANT, hidden_states.device.type))
        squares = hidden_states.float().pow(2).mean(-1, keepdim=True)
        normed = hidden_states.float() * torch.rsqrt(squares + self.variance_epsilon)
        return self.weight * normed.to(hidden_states.dtype)
'''


def _write_kernel_repo(root, variants, name="tiny-act"):
    """A kernel repository as the Hub lays it out: build/<variant>/{metadata.json,<pkg>/}."""
    package = name.replace("-", "_")
    for variant in variants:
        variant_dir = root / "build" / variant
        (variant_dir / package).mkdir(parents=True)
        backend = parse_variant(variant).arch
        backend_name = backend.backend_name if hasattr(backend, "backend_name") else backend.backend.name
        metadata = {
            "id": f"{package}_{variant.replace('-', '_')}",
            "name": name,
            "version": 1,
            "license": "Apache-2.0",
            "backend": {"type": backend_name},
            "python-depends": [],
        }
        (variant_dir / "metadata.json").write_text(json.dumps(metadata))
        (variant_dir / package / "__init__.py").write_text(
            textwrap.dedent(
                """
                from . import layers
                from .layers import VARIANT


                def silu_and_mul(x):
                    return layers.SiluAndMul.forward(None, x)
                """
            )
        )
        (variant_dir / package / "layers.py").write_text(_LAYERS_SOURCE.format(variant=variant))
    return root


@use_kernel_forward_from_hub("SiluAndMul")
class SiluAndMul(nn.Module):
    def forward(self, x):
        half = x.shape[-1] // 2
        return F.silu(x[..., :half]) * x[..., half:]


@use_kernel_forward_from_hub("RMSNorm")
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        rms = hidden_states.pow(2).mean(-1, keepdim=True).add(self.variance_epsilon).sqrt()
        return self.weight * (hidden_states / rms)


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 64)
        self.act = SiluAndMul()
        self.norm = RMSNorm(32)
        self.down = nn.Linear(32, 16)

    def forward(self, x):
        return self.down(self.norm(self.act(self.up(x))))


def _mapping(repo, device="tpu"):
    return {
        layer: {device: LocalLayerRepository(repo_path=repo, layer_name=layer)}
        for layer in ("SiluAndMul", "RMSNorm")
    }


def _models():
    torch.manual_seed(0)
    reference = TinyMLP()
    return reference, copy.deepcopy(reference).to("tpu")


# --- backend and variant selection --------------------------------------------------------------


def test_kernels_detects_tpu_backend():
    backend = _backend()
    assert backend == TPU()
    assert backend.name == backend.variant_str == "tpu"
    assert set(_supported_backends()) == {"cpu", "tpu"}


def test_variant_resolution_prefers_tpu_builds():
    names = ["torch-cpu", "torch-universal", "torch-cuda", "torch-tpu", _CUDA_ARCH_VARIANT]
    best, trace = resolve_variant([parse_variant(n) for n in names])
    assert best.variant_str == "torch-tpu"
    accepted = {d.variant.variant_str for d in trace if isinstance(d, VariantAccepted)}
    assert accepted == {"torch-tpu", "torch-universal"}

    # An arch build for this torch and machine beats the noarch one; a CUDA build never qualifies.
    tpu_arch = f"torch{_TORCH_MM}-tpu-{platform.machine()}-{platform.system().lower()}"
    best, _ = resolve_variant([parse_variant(n) for n in names + [tpu_arch]])
    assert best.variant_str == tpu_arch

    best, _ = resolve_variant([parse_variant(n) for n in names], backend="cpu")
    assert best.variant_str == "torch-cpu"


def test_get_local_kernel_picks_torch_tpu_variant(tmp_path):
    repo = _write_kernel_repo(tmp_path, ["torch-cpu", "torch-tpu", "torch-cuda", _CUDA_ARCH_VARIANT])
    kernel = get_local_kernel(repo)
    assert kernel.VARIANT == "torch-tpu"
    assert get_local_kernel(repo, backend="cpu").VARIANT == "torch-cpu"
    # A path that points straight at one variant loads that variant.
    assert get_local_kernel(repo / "build" / "torch-tpu").VARIANT == "torch-tpu"

    x = torch.randn(4, 10)
    torch_tpu.reset_fallback_counts()
    out = kernel.silu_and_mul(x.to("tpu"))
    assert torch_tpu.fallback_counts() == {}
    assert_close(out, F.silu(x[:, :5]) * x[:, 5:])
    assert kernel.layers.CALLS == [("SiluAndMul", "torch-tpu", "tpu")]


def test_get_local_kernel_without_tpu_build_raises(tmp_path):
    repo = _write_kernel_repo(tmp_path, ["torch-cuda", _CUDA_ARCH_VARIANT])
    with pytest.raises(FileNotFoundError, match="Cannot find a build variant"):
        get_local_kernel(repo)


# --- kernelize ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [Mode.INFERENCE, Mode.TRAINING], ids=["inference", "training"])
def test_kernelize_swaps_in_tpu_kernel_layers(tmp_path, mode, no_fallback):
    repo = _write_kernel_repo(tmp_path, ["torch-cpu", "torch-tpu"])
    reference, model = _models()
    with use_kernel_mapping(_mapping(repo)):
        kernelize(model, device="tpu", mode=mode)
    calls = get_local_kernel(repo).layers.CALLS
    calls.clear()

    x = torch.randn(3, 16)
    out = model(x.to("tpu"))
    expected = reference(x)
    assert calls == [("SiluAndMul", "torch-tpu", "tpu"), ("RMSNorm", "torch-tpu", "tpu")]
    assert_close(out, expected.detach())

    if Mode.TRAINING in mode:
        out.square().sum().backward()
        expected.square().sum().backward()
        grads = dict(model.named_parameters())
        for name, param in reference.named_parameters():
            assert_close(grads[name].grad, param.grad)


def test_kernelize_infers_tpu_from_parameters(tmp_path):
    repo = _write_kernel_repo(tmp_path, ["torch-tpu"])
    reference, model = _models()
    with use_kernel_mapping(_mapping(repo)):
        kernelize(model, mode=Mode.INFERENCE)
    calls = get_local_kernel(repo).layers.CALLS
    calls.clear()
    x = torch.randn(2, 16)
    assert_close(model(x.to("tpu")), reference(x).detach())
    assert [c[0] for c in calls] == ["SiluAndMul", "RMSNorm"]


def test_kernelize_falls_back_without_tpu_kernel(tmp_path):
    repo = _write_kernel_repo(tmp_path, ["torch-cuda"])
    reference, model = _models()
    x = torch.randn(2, 16)

    # A mapping for another device only: the original forwards stay.
    with use_kernel_mapping(_mapping(repo, device="cuda")):
        kernelize(model, device="tpu", mode=Mode.INFERENCE)
    assert_close(model(x.to("tpu")), reference(x).detach())

    # A tpu mapping whose repository has no tpu build: an error by default, the original forward
    # when the caller allows every fallback.
    with use_kernel_mapping(_mapping(repo)):
        with pytest.raises(FileNotFoundError, match="Cannot find a build variant"):
            kernelize(model, device="tpu", mode=Mode.INFERENCE)
        kernelize(model, device="tpu", mode=Mode.INFERENCE, use_fallback=KernelizeFallback.ALL)
    assert_close(model(x.to("tpu")), reference(x).detach())


def test_kernelize_rejects_unknown_device():
    with pytest.raises(ValueError, match="Unsupported device type"):
        kernelize(TinyMLP(), device="tpux", mode=Mode.INFERENCE)


def test_kernelized_model_compiles_with_tpu_backend(tmp_path, fresh_dynamo, no_fallback):
    repo = _write_kernel_repo(tmp_path, ["torch-tpu"])
    reference, model = _models()
    with use_kernel_mapping(_mapping(repo)):
        kernelize(model, device="tpu", mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
    calls = get_local_kernel(repo).layers.CALLS
    calls.clear()
    compiled = torch.compile(model, backend="tpu")
    x = torch.randn(2, 16)
    with torch.no_grad():
        out = compiled(x.to("tpu"))
    assert_close(out, reference(x).detach())
    # Dynamo traced the kernel layers (their bookkeeping replays as a side effect) into one
    # graph that ran as a single tpu program.
    assert [c[0] for c in calls] == ["SiluAndMul", "RMSNorm"]
    assert graph_runner.stats["captures"] == 1 and graph_runner.stats["op_by_op_calls"] == 0
