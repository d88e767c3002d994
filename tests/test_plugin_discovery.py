"""Finding the PJRT plugin of a platform (TORCH_TPU_PLATFORM=cpu|cuda|tpu) among installed
packages, TORCH_TPU_PJRT_PLUGIN overriding it, and the clear error - a Python exception at the
first device use, never a crash - when the platform's plugin is not installed.

Package directories are faked in tmp_path: discovery only checks that the plugin file exists."""

import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from torch_tpu import _plugin

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_VARS = ("TORCH_TPU_PLATFORM", "TORCH_TPU_PJRT_PLUGIN")


def fake_package(root, candidate):
    """Creates `root/<module dirs>/<plugin file>` (a dummy file, never loaded); returns its path."""
    directory = os.path.join(root, *candidate.module.split("."))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, candidate.filename)
    with open(path, "w") as f:
        f.write("not a shared library\n")
    return path


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """sys.path holding only tmp_path and no platform variables: nothing installed is found."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    return tmp_path


def run_probe(code, timeout=120, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    full_env.update(env, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, cwd=REPO, timeout=timeout)


PROBE = """
import torch, torch_tpu
print("available", torch.tpu.is_available(), torch.tpu.device_count())
try:
    x = torch.arange(4.0, device="tpu") * 2
    print("RESULT", x.cpu().tolist(), torch.tpu.get_device_properties().plugin)
except RuntimeError as e:
    print("ERROR", e)
"""


@pytest.mark.parametrize("platform", ["cpu", "cuda", "tpu"])
def test_lookup_order_per_platform(isolated, platform):
    """With every package of a platform installed the first row wins; removing it, the next."""
    rows = _plugin.candidates(platform)
    paths = [fake_package(str(isolated), c) for c in rows]
    for i, row in enumerate(rows):
        found = _plugin.find_plugin(platform)
        assert found == (row, paths[i])
        os.remove(paths[i])
    assert _plugin.find_plugin(platform) is None


def test_cuda_prefers_jax_then_xla_wheels_cuda13_first():
    packages = [c.package for c in _plugin.candidates("cuda")]
    assert packages == ["jax-cuda13-pjrt", "jax-cuda12-pjrt", "xla-cuda13-pjrt", "xla-cuda12-pjrt"]
    assert _plugin.candidates("gpu") == _plugin.candidates("cuda")


def test_platform_variable_picks_the_row(isolated, monkeypatch):
    cpu = fake_package(str(isolated), _plugin.candidates("cpu")[1])
    cuda = fake_package(str(isolated), _plugin.candidates("cuda")[2])
    tpu = fake_package(str(isolated), _plugin.candidates("tpu")[0])
    assert _plugin.default_plugin_path() == cpu  # no variable: cpu
    for value, expected in (("cuda", cuda), ("GPU", cuda), (" tpu ", tpu), ("cpu", cpu)):
        monkeypatch.setenv("TORCH_TPU_PLATFORM", value)
        assert _plugin.default_plugin_path() == expected, value
        assert _plugin.plugin_search_error() is None


def test_a_package_dir_without_the_plugin_file_is_skipped(isolated, monkeypatch):
    first, second = _plugin.candidates("cuda")[:2]
    os.makedirs(os.path.join(str(isolated), *first.module.split(".")))
    path = fake_package(str(isolated), second)
    monkeypatch.setenv("TORCH_TPU_PLATFORM", "cuda")
    assert _plugin.default_plugin_module() == second.module
    assert _plugin.default_plugin_path() == path


@pytest.mark.parametrize("platform", ["cpu", "cuda", "tpu"])
def test_error_names_every_package_module_path_and_the_fix(isolated, monkeypatch, platform):
    monkeypatch.setenv("TORCH_TPU_PLATFORM", platform)
    assert _plugin.default_plugin_path() is None
    message = _plugin.plugin_search_error()
    assert message == _plugin.not_found_message(platform)
    assert f"platform '{platform}'" in message
    for c in _plugin.candidates(platform):
        assert c.package in message
        assert f"{c.module.replace('.', '/')}/{c.filename}" in message
    assert str(isolated) in message  # where it looked
    assert "Fix: pip install" in message and "TORCH_TPU_PJRT_PLUGIN" in message


def test_unknown_platform_is_a_clear_error(isolated, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_PLATFORM", "metal")
    with pytest.raises(_plugin.PlatformError, match="cpu, cuda, tpu"):
        _plugin.requested_platform()
    assert _plugin.default_plugin_path() is None  # never raises: import must not fail
    assert "TORCH_TPU_PLATFORM='metal'" in _plugin.plugin_search_error()


def test_explicit_plugin_silences_the_search(isolated, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_PLATFORM", "tpu")
    assert _plugin.plugin_search_error() is not None
    monkeypatch.setenv("TORCH_TPU_PJRT_PLUGIN", "/somewhere/plugin.so")
    assert _plugin.plugin_search_error() is None


def test_default_without_variables_is_the_installed_cpu_plugin(monkeypatch):
    started_plain = not any(os.environ.get(var) for var in ENV_VARS)
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    import fastatomstruct_xla_cpu
    assert _plugin.default_plugin_module() == "fastatomstruct_xla_cpu"
    assert _plugin.default_plugin_path() == fastatomstruct_xla_cpu.library_path()
    assert _plugin.default_plugin_path("cpu") == fastatomstruct_xla_cpu.library_path()
    if started_plain:  # then this process runs on it
        assert torch.tpu.get_device_properties().plugin == fastatomstruct_xla_cpu.library_path()
        x = torch.arange(3.0)
        torch.testing.assert_close((x.to("tpu") + 1).cpu(), x + 1)


def test_cuda_without_a_cuda_plugin_fails_clearly():
    if _plugin.find_plugin("cuda"):
        pytest.skip("a CUDA PJRT plugin is installed here, so it would be found")
    r = run_probe(PROBE, TORCH_TPU_PLATFORM="cuda")
    assert r.returncode == 0, r.stderr[-3000:]  # import works; the error is an exception
    assert "available False 0" in r.stdout
    error = [line for line in r.stdout.splitlines() if line.startswith("ERROR")]
    assert error, r.stdout
    for package in ("jax-cuda13-pjrt", "jax-cuda12-pjrt", "xla-cuda13-pjrt", "xla-cuda12-pjrt",
                    "jax-cuda13-plugin[with-cuda]", "TORCH_TPU_PJRT_PLUGIN"):
        assert package in error[0]
    # Uncaught it is an ordinary Python traceback, not a signal.
    r = run_probe("import torch, torch_tpu\ntorch.ones(1, device='tpu')", TORCH_TPU_PLATFORM="cuda")
    assert r.returncode == 1 and "RuntimeError" in r.stderr and "jax-cuda13-pjrt" in r.stderr


def test_unknown_platform_fails_at_first_use_not_import():
    r = run_probe(PROBE, TORCH_TPU_PLATFORM="metal")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERROR TORCH_TPU_PLATFORM='metal' is not a platform" in r.stdout


def test_found_plugin_that_is_not_a_library_fails_clearly(tmp_path):
    """Discovery hands a found file to the runtime, which refuses it with an exception."""
    fake = fake_package(str(tmp_path), _plugin.candidates("cuda")[0])
    r = run_probe(PROBE, TORCH_TPU_PLATFORM="cuda", PYTHONPATH=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"ERROR torch_tpu could not load the PJRT plugin '{fake}'" in r.stdout
    assert "dlopen failed" in r.stdout


def test_explicit_plugin_wins_over_the_platform_search():
    """TORCH_TPU_PJRT_PLUGIN is loaded although TORCH_TPU_PLATFORM=cuda has no plugin here; the
    GPU client options (a float and an int64 list among them) reach PJRT_Client_Create intact
    (the XLA CPU plugin ignores options it does not know)."""
    cpu = _plugin.default_plugin_path("cpu")
    r = run_probe(PROBE, TORCH_TPU_PLATFORM="cuda", TORCH_TPU_PJRT_PLUGIN=cpu,
                  TORCH_TPU_GPU_MEMORY_FRACTION="0.5", TORCH_TPU_VISIBLE_DEVICES="0,1",
                  TORCH_TPU_GPU_ALLOCATOR="bfc", TORCH_TPU_GPU_PREALLOCATE="0")
    assert r.returncode == 0, r.stderr[-3000:]
    expected = (torch.arange(4.0) * 2).tolist()
    assert f"RESULT {expected} {cpu}" in r.stdout, r.stdout + r.stderr[-2000:]


def test_malformed_gpu_setting_is_a_clear_error():
    cpu = _plugin.default_plugin_path("cpu")
    r = run_probe(PROBE, TORCH_TPU_PLATFORM="cuda", TORCH_TPU_PJRT_PLUGIN=cpu,
                  TORCH_TPU_GPU_MEMORY_FRACTION="2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERROR" in r.stdout and "TORCH_TPU_GPU_MEMORY_FRACTION='2' is not valid" in r.stdout

