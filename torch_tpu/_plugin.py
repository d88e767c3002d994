"""Finding the default PJRT plugin: the XLA CPU plugin shipped by the installed
``fastatomstruct-xla-cpu`` package (PJRT API 0.106), else the one of ``xla-cpu-pjrt``.
``TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so`` overrides it (read by the C++ runtime).

Why not xla-cpu-pjrt first: its older XLA build (PJRT API 0.81) sometimes lets an execution read
an input before the execution producing it has finished, so asynchronous (Strict) eager work
can silently compute wrong values; the newer build does not (docs/design.md, "Plugin choice").
"""

import importlib.util
import os


def _package_file(module, filename):
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], filename)
    return path if os.path.exists(path) else None


# (module, file) of each package that ships an XLA CPU plugin, in order of preference.
_CPU_PLUGINS = (("fastatomstruct_xla_cpu", "libpjrt_cpu.so"),
                ("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so"))


def default_plugin_module():
    """The module whose package ships the default plugin (the first installed), or None."""
    return next((m for m, f in _CPU_PLUGINS if _package_file(m, f)), None)


def default_plugin_path():
    """Path of the default XLA CPU plugin shared library, or None when no package has one."""
    module = default_plugin_module()
    return _package_file(module, dict(_CPU_PLUGINS)[module]) if module else None
