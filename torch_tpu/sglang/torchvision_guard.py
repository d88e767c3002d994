"""Lets SGLang 0.5.21 start for text models where no torchvision loads.

SGLang imports torchvision at module level on its text-only start-up path (its configs package
imports InternVL and DeepSeek-OCR helpers), and PyPI's only torchvision for torch 2.13.0 is a CUDA
build that does not load beside the CPU torch. When - and only when - no torchvision can be
imported, ``install()`` adds an import finder that hands *SGLang's own modules* a placeholder
package: attributes are objects that raise a clear ``ImportError`` when used (vision models fail
at their first transform, with a message naming the missing package), and
``InterpolationMode`` is a real enum (those modules read its members at import). Any other
importer still gets ``ModuleNotFoundError``; Transformers' cached "is torchvision available"
answers are fixed to False first, because a placeholder in ``sys.modules`` would otherwise
change them. The platform's entry point (``torch_tpu.sglang.activate``) installs it: SGLang calls
it during ``import sglang`` in every one of its processes, before any torchvision import.
"""

import enum
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

_MESSAGE = ("torchvision is not installed (no build of it loads beside this torch); '{}' is unavailable. "
            "Vision models need a torchvision that matches the installed torch.")


class InterpolationMode(enum.Enum):
    """The member names SGLang reads at import (torchvision.transforms.InterpolationMode)."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class _Missing:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise ImportError(_MESSAGE.format(self._name))

    def __repr__(self):
        return f"<missing {self._name}>"


class _Placeholder(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.__name__}.{attr}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return _Placeholder(spec.name)

    def exec_module(self, module):
        module.__path__ = []  # a package: any submodule imports
        if module.__name__.startswith("torchvision.transforms"):
            module.InterpolationMode = InterpolationMode


def _importer():
    """The module name of the code running the import statement."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("importlib") or name.startswith("_frozen_importlib") or name == __name__):
            return name
        frame = frame.f_back
    return ""


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision" and not fullname.startswith("torchvision."):
            return None
        importer = _importer()
        if importer != "sglang" and not importer.startswith("sglang."):
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


_installed = None


def _fix_transformers_answers():
    try:
        from transformers.utils import import_utils
    except Exception:
        return
    for name, args in (("is_torchvision_available", ()), ("is_torchvision_v2_available", ()),
                       ("is_torchvision_greater_or_equal", ("0.27",))):
        fn = getattr(import_utils, name, None)
        if fn is not None:
            try:
                fn(*args)  # cached now, while the answer is the true one (False)
            except Exception:
                pass


def install() -> bool:
    """Installs the finder when torchvision cannot be imported; idempotent. True if active."""
    global _installed
    if _installed is not None:
        return True
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return False  # an installed torchvision is never shadowed
    _fix_transformers_answers()
    _installed = _Finder()
    sys.meta_path.append(_installed)  # after the real finders
    return True
