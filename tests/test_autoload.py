"""`import torch` alone loads the backend (PyTorch's device-backend autoload), libraries that
detect devices at import time see `tpu`, and the package declares what it needs at run time."""

import importlib.metadata
import os
import subprocess
import sys
import tomllib

import torch_tpu
from torch_tpu import _loader, _plugin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, autoload=True):
    """Runs `code` in a fresh interpreter (so nothing is imported yet) and returns its stdout."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_entry_point_declared():
    points = importlib.metadata.entry_points(group="torch.backends")
    ours = [p for p in points if p.value == "torch_tpu._loader:load"]
    assert ours, f"no torch.backends entry point for torch_tpu among {list(points)}"
    assert ours[0].load() is _loader.load


def test_import_torch_alone_loads_the_backend():
    line = run_python(
        "import sys, torch\n"
        "print('torch_tpu' in sys.modules, torch.accelerator.current_accelerator().type,"
        " torch.backends.tpu.is_available(), torch.ones(2, device='tpu').add(1).cpu().tolist())")
    assert line == "True tpu True [2.0, 2.0]"


def test_autoload_off():
    line = run_python("import sys, torch\nprint('torch_tpu' in sys.modules, hasattr(torch, 'tpu'))",
                      autoload=False)
    assert line == "False False"


def test_load_is_idempotent():
    _loader.load()
    _loader.load()
    assert torch_tpu.tpu.is_available()
    import torch.distributed as dist
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"


def test_libraries_imported_first_see_tpu():
    """Transformers and Diffusers cache their device detection when imported: with autoload they
    see `tpu` although torch_tpu is never imported by the user."""
    line = run_python(
        "import transformers, diffusers, sys\n"
        "from transformers.utils import is_torch_tpu_available\n"
        "from diffusers.pipelines.pipeline_utils import SUPPORTED_DEVICE_MAP\n"
        "print(is_torch_tpu_available(), 'tpu' in SUPPORTED_DEVICE_MAP)")
    assert line == "True True"


def test_runtime_dependencies_name_the_default_plugin():
    """The distribution that ships the default PJRT plugin is a declared dependency (in
    pyproject.toml and in the installed metadata), so `pip install .` brings a working device."""
    plugin_module = _plugin.default_plugin_module()
    owners = importlib.metadata.packages_distributions()[plugin_module.split(".")[0]]
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        declared = tomllib.load(f)["project"]["dependencies"]
    installed = importlib.metadata.requires("torch_tpu") or []

    def names(reqs):
        return {r.split(";")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
                .replace("_", "-") for r in reqs}

    for owner in owners:
        owner = owner.lower().replace("_", "-")
        assert owner in names(declared), f"{owner} missing from pyproject dependencies {declared}"
        assert owner in names(installed), f"{owner} missing from installed metadata {installed}"
    assert "torch" in names(declared)


def test_readme_documents_autoload_switch():
    with open(os.path.join(ROOT, "README.md")) as f:
        assert "TORCH_DEVICE_BACKEND_AUTOLOAD" in f.read()
