"""How much memory a serving engine may give its KV cache on ``tpu``.

On an accelerator plugin (memory figures from PJRT's device statistics) the budget is the
engine's memory fraction (vLLM's ``gpu_memory_utilization``, SGLang's ``mem_fraction_static``)
of the device's memory, minus what is already in use - the CUDA rule.

On the XLA CPU plugin "device memory" is the host's RAM, shared with the weights, the compiled
programs, the Python process and everything else on the machine; a fraction of total RAM would
take most of the machine (and the OOM killer ends the process). There the budget follows vLLM's
CPU convention: ``VLLM_CPU_KVCACHE_SPACE`` (GiB; ``TORCH_TPU_KVCACHE_SPACE`` for SGLang) when set,
else ``DEFAULT_HOST_KV_BYTES`` - both capped by the memory actually available (MemAvailable).

An explicit size (``kv_cache_memory_bytes`` / ``--kv-cache-memory-bytes``) is taken as given.
Whatever the source, a budget that does not fit what is available (minus headroom for the
programs' working memory) is a ``KVCacheBudgetError`` naming the figures and the setting to
change - raised before anything is allocated.
"""

import os

import torch

GiB = 1 << 30
DEFAULT_HOST_KV_BYTES = 4 * GiB
# Left free beside the KV cache for activations, compiled programs and the host process.
HOST_HEADROOM_BYTES = 1 * GiB
DEVICE_HEADROOM_FRACTION = 0.0  # the utilization fraction already leaves the rest


class KVCacheBudgetError(ValueError):
    """The KV cache budget cannot fit in the memory available."""


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def kv_cache_budget(device, utilization: float, explicit: int | None = None, env=None,
                    utilization_setting: str = "gpu_memory_utilization",
                    explicit_setting: str = "kv_cache_memory_bytes",
                    space_env: str = "VLLM_CPU_KVCACHE_SPACE"):
    """(bytes for the KV cache, a sentence saying where the figure comes from). ``space_env``:
    the environment variable giving the CPU plugin's budget in GiB (vLLM's name by default)."""
    env = os.environ if env is None else env
    free, total = torch.tpu.mem_get_info(device)
    on_host = torch.tpu.memory_sources(device)["total_memory"] == "host"
    headroom = HOST_HEADROOM_BYTES if on_host else int(total * DEVICE_HEADROOM_FRACTION)
    room = free - headroom
    where = "host memory (the XLA CPU plugin's device memory is the host's RAM)" if on_host else "device memory"
    if explicit is not None:
        want, setting = int(explicit), explicit_setting
        source = f"{explicit_setting}={want}"
    elif on_host and env.get(space_env, "").strip():
        raw = env[space_env].strip()
        try:
            want = int(float(raw) * GiB)
        except ValueError:
            raise KVCacheBudgetError(f"{space_env}={raw!r} is not a number of GiB") from None
        setting = space_env
        source = f"{space_env}={raw} GiB"
    elif on_host:
        want = min(DEFAULT_HOST_KV_BYTES, max(room, 0) // 2)
        setting = space_env
        source = (f"the default for the CPU plugin: {_gib(DEFAULT_HOST_KV_BYTES)}, at most half of the "
                  f"{_gib(max(room, 0))} available after {_gib(headroom)} headroom")
    else:
        want = int(total * utilization) - (total - free)
        setting = utilization_setting
        source = (f"{utilization_setting}={utilization} of {_gib(total)} device memory minus "
                  f"{_gib(total - free)} in use")
    if want <= 0 or want > room:
        raise KVCacheBudgetError(
            f"the KV cache budget ({_gib(max(want, 0))}, from {source}) does not fit in the {where}: "
            f"{_gib(free)} of {_gib(total)} available, {_gib(headroom)} kept as headroom for programs and "
            f"activations. Set {setting} (or {explicit_setting}) to a size that fits, e.g. "
            f"{explicit_setting}={max(room // 2, 0)}, or free memory."
        )
    return want, source
