"""Finding the default PJRT plugin: the XLA CPU plugin of the installed ``xla-cpu-pjrt``
package. ``TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so`` overrides it (read by the C++ runtime)."""

import importlib.util
import os


def default_plugin_path():
    """Path of the XLA CPU plugin shared library, or None when the package is missing."""
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "xla_cpu_pjrt.so")
    return path if os.path.exists(path) else None
