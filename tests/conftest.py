"""Test configuration: two CPU-plugin devices (so tpu:1 exists), set before torch_tpu starts."""

import os
import sys

os.environ.setdefault("TORCH_TPU_CPU_DEVICE_COUNT", "2")
# No test reaches the network: Hugging Face libraries use local files only (models, tokenizers and
# kernels are built from configs into tmp_path). Subprocesses inherit this.
for _offline in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_offline] = "1"
# The reference models live in the repository's `models` package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: E402,F401


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "timing: asserts on wall-clock times or CPU shares; scripts/run_tests.sh runs these after the "
        "parallel pass, alone on the machine")


@pytest.fixture
def no_fallback():
    """Fails the test if any op fell back to the CPU while it ran."""
    torch_tpu.reset_fallback_counts()
    yield
    assert torch_tpu.fallback_counts() == {}, f"ops fell back to the CPU: {torch_tpu.fallback_counts()}"


@pytest.fixture
def strict_no_fallback():
    """Strict mode (an op without a tpu kernel raises instead of running on the CPU), and no op
    may have fallen back while the test ran."""
    previous = torch_tpu.get_fallback_mode()
    torch_tpu.set_fallback_mode("error")
    torch_tpu.reset_fallback_counts()
    yield
    torch_tpu.set_fallback_mode(previous)
    assert torch_tpu.fallback_counts() == {}, f"ops fell back to the CPU: {torch_tpu.fallback_counts()}"


@pytest.fixture
def fresh_dynamo():
    """torch.compile tests: Dynamo's caches and the tpu graph runner's counters start empty."""
    import torch._dynamo

    from torch_tpu.dynamo import graph_runner

    torch._dynamo.reset()
    graph_runner.reset_stats()
    yield
    torch._dynamo.reset()
