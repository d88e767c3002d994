"""SGLang's torchvision guard (torch_tpu/sglang/torchvision_guard.py): SGLang's own modules get a
placeholder package where no torchvision is installed, everyone else still gets
ModuleNotFoundError, and using the placeholder fails with a clear ImportError."""

import importlib.util
import sys
import types

import pytest

from torch_tpu.sglang import torchvision_guard


@pytest.fixture
def guard():
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("a real torchvision is installed: the guard never shadows it")
    saved_path, saved_modules = list(sys.meta_path), dict(sys.modules)
    assert torchvision_guard.install()
    yield
    sys.meta_path[:] = saved_path
    for name in list(sys.modules):
        if name not in saved_modules:
            del sys.modules[name]
    torchvision_guard._installed = None


def _import_from(module_name, statement):
    module = types.ModuleType(module_name)
    exec(statement, module.__dict__)
    return module


def test_sglang_modules_get_a_placeholder(guard):
    m = _import_from("sglang.srt.configs.fake_vl", "import torchvision.transforms as T\n"
                                                     "from torchvision.transforms.functional import InterpolationMode")
    assert m.InterpolationMode.BICUBIC.value == "bicubic"  # read at import by SGLang's configs
    transform = m.T.Compose  # attribute access is fine ...
    with pytest.raises(ImportError, match="torchvision is not installed.*torchvision.transforms.Compose"):
        transform([])  # ... using it is a clear error


def test_other_importers_still_see_no_torchvision(guard):
    with pytest.raises(ModuleNotFoundError):
        _import_from("my_app", "import torchvision")


def test_install_is_idempotent(guard):
    count = sum(isinstance(f, torchvision_guard._Finder) for f in sys.meta_path)
    assert torchvision_guard.install() and count == 1
    assert sum(isinstance(f, torchvision_guard._Finder) for f in sys.meta_path) == 1
