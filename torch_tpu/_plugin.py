"""Finding the PJRT plugin of a platform among the installed packages.

``TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so`` always wins (read by the C++ runtime). Otherwise
``TORCH_TPU_PLATFORM`` (``cpu`` - the default -, ``cuda``, ``tpu``) picks the platform and the
first installed package of its row in ``_PLUGINS`` supplies the plugin. Discovery only checks
that the file is there: nothing is imported or loaded, so a missing or broken plugin surfaces as a
Python exception at the first device use (``plugin_search_error()``), never at ``import``.

CPU: the plugin of ``fastatomstruct-xla-cpu`` (PJRT API 0.106) before the one of
``xla-cpu-pjrt``, whose older XLA build (PJRT API 0.81) sometimes lets an execution read an
input before the execution producing it has finished (docs/design.md, "Plugin choice").
CUDA: JAX's plugin packages (recent XLA; CUDA libraries opened lazily, so a missing one is an
error at client creation) before the ``xla-cudaNN-pjrt`` wheels (PJRT API 0.81, linked against
the CUDA libraries at load time); CUDA 13 builds before CUDA 12 ones.
"""

import os
import sys
from typing import NamedTuple

PLUGIN_ENV = "TORCH_TPU_PJRT_PLUGIN"
PLATFORM_ENV = "TORCH_TPU_PLATFORM"
DEFAULT_PLATFORM = "cpu"


class Candidate(NamedTuple):
    package: str   # the distribution to pip install
    module: str    # the (possibly namespace) package directory holding the plugin
    filename: str  # the plugin shared library inside it


# Per platform, the packages that ship a PJRT plugin, in order of preference.
_PLUGINS = {
    "cpu": (Candidate("fastatomstruct-xla-cpu", "fastatomstruct_xla_cpu", "libpjrt_cpu.so"),
            Candidate("xla-cpu-pjrt", "xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so")),
    "cuda": (Candidate("jax-cuda13-pjrt", "jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
             Candidate("jax-cuda12-pjrt", "jax_plugins.xla_cuda12", "xla_cuda_plugin.so"),
             Candidate("xla-cuda13-pjrt", "xla_plugins.xla_cuda13_pjrt", "xla_gpu_pjrt.so"),
             Candidate("xla-cuda12-pjrt", "xla_plugins.xla_cuda12_pjrt", "xla_gpu_pjrt.so")),
    "tpu": (Candidate("libtpu", "libtpu", "libtpu.so"),),
}
_ALIASES = {"gpu": "cuda"}

# What to install when a platform has no plugin (the packages above need their runtimes too).
_INSTALL_HINTS = {
    "cpu": "pip install fastatomstruct-xla-cpu (or xla-cpu-pjrt)",
    "cuda": ("pip install 'jax-cuda13-plugin[with-cuda]' (brings JAX's CUDA 13 plugin "
             "jax-cuda13-pjrt and the NVIDIA libraries, not JAX itself; "
             "'jax-cuda12-plugin[with-cuda]' for CUDA 12), or pip install xla-cuda13-pjrt "
             "(xla-cuda12-pjrt) plus the NVIDIA CUDA/cuDNN libraries it links against"),
    "tpu": "pip install libtpu (on a Cloud TPU VM)",
}


class PlatformError(ValueError):
    """TORCH_TPU_PLATFORM names no known platform."""


def platforms():
    """The platform names TORCH_TPU_PLATFORM accepts (aliases excluded)."""
    return tuple(_PLUGINS)


def requested_platform():
    """The platform asked for by TORCH_TPU_PLATFORM (default ``cpu``); raises PlatformError."""
    raw = os.environ.get(PLATFORM_ENV, "").strip()
    name = _ALIASES.get(raw.lower(), raw.lower()) or DEFAULT_PLATFORM
    if name not in _PLUGINS:
        raise PlatformError(
            f"{PLATFORM_ENV}='{raw}' is not a platform torch_tpu knows. Fix: set it to one of "
            f"{', '.join(_PLUGINS)}, or unset it (default {DEFAULT_PLATFORM}); or point "
            f"{PLUGIN_ENV} at a PJRT plugin shared library")
    return name


def candidates(platform):
    """The (package, module, file) rows searched for `platform`, in order."""
    return _PLUGINS[_ALIASES.get(platform, platform)]


def _search_dirs():
    dirs = [os.path.abspath(p or os.curdir) for p in sys.path if os.path.isdir(p or os.curdir)]
    return list(dict.fromkeys(dirs))  # sys.path may repeat an entry


def _package_file(module, filename):
    """The plugin file of `module` on sys.path, found without importing anything."""
    parts = module.split(".")
    for entry in _search_dirs():
        path = os.path.join(entry, *parts, filename)
        if os.path.isfile(path):
            return path
    return None


def find_plugin(platform):
    """(Candidate, path) of the first installed plugin of `platform`, or None."""
    for c in candidates(platform):
        path = _package_file(c.module, c.filename)
        if path:
            return c, path
    return None


def not_found_message(platform):
    """The error for a platform none of whose packages is installed: what was searched, where,
    and what to install."""
    searched = "; ".join(f"package {c.package} (file {c.module.replace('.', '/')}/{c.filename})"
                         for c in candidates(platform))
    return (f"torch_tpu found no PJRT plugin for platform '{platform}' ({PLATFORM_ENV}="
            f"{os.environ.get(PLATFORM_ENV) or '<unset>'}): searched {searched} in the Python "
            f"path ({os.pathsep.join(_search_dirs())}). Fix: {_INSTALL_HINTS[platform]}; or set "
            f"{PLUGIN_ENV}=/path/to/plugin.so")


def _find_default(platform):
    if platform is None:
        try:
            platform = requested_platform()
        except PlatformError:
            return None  # reported by plugin_search_error() at the first device use
    return find_plugin(platform)


def default_plugin_module(platform=None):
    """The module whose package ships the plugin used when TORCH_TPU_PJRT_PLUGIN is unset (for
    `platform`, default: TORCH_TPU_PLATFORM, else cpu), or None when none is installed."""
    found = _find_default(platform)
    return found[0].module if found else None


def default_plugin_path(platform=None):
    """Path of that plugin's shared library, or None when no package has one."""
    found = _find_default(platform)
    return found[1] if found else None


def plugin_search_error():
    """Why there is no default plugin (a message for the first device use), or None when one was
    found or TORCH_TPU_PJRT_PLUGIN names the plugin."""
    if os.environ.get(PLUGIN_ENV):
        return None
    try:
        platform = requested_platform()
    except PlatformError as e:
        return str(e)
    return None if find_plugin(platform) else not_found_message(platform)
