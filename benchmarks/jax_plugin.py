"""The PJRT plugin torch_tpu drives, loaded into JAX as a plugin: JAX programs compiled and run by
the same build of XLA's CPU compiler and runtime as ours (`xla_builds.py` runs our programs on it
and on jaxlib's own CPU client; `compile_step.py`'s `jax_jit_plugin` runs JAX's Llama step on it).
"""

import functools
import logging

NAME = "torch_tpu_plugin"


def torch_tpu_plugin_path():
    """The XLA CPU plugin our runtime would load (TORCH_TPU_PJRT_PLUGIN, else the default one),
    found without starting the runtime: it sets the process's malloc policy (runtime/host_pages.h),
    which would then time every program of the process under ours."""
    import os

    from torch_tpu._plugin import PLUGIN_ENV, default_plugin_path

    path = os.environ.get(PLUGIN_ENV) or default_plugin_path("cpu")
    if path is None:
        raise SystemExit("no XLA CPU plugin found (pip install -r requirements.txt)")
    return path


@functools.lru_cache(maxsize=None)
def device(library_path):
    """JAX's device on the plugin at `library_path` (registered with JAX on the first call: one
    device, asynchronous dispatch, as torch_tpu's own client of the CPU plugin). Call it before
    anything else in the process uses JAX, which reads its plugins when it starts its backends."""
    import jax
    from jax._src import xla_bridge

    logging.getLogger(xla_bridge.__name__).setLevel(logging.ERROR)  # "platform is experimental"
    xla_bridge.register_plugin(NAME, library_path=library_path,
                               options={"cpu_device_count": 1, "asynchronous": True})
    try:
        return jax.devices(NAME)[0]
    except RuntimeError as e:  # JAX's backends started before the registration
        raise RuntimeError(f"jax_plugin.device() must be called before JAX is first used in the process ({e})") from None
