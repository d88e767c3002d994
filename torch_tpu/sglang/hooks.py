"""The SGLang hooks torch_tpu registers (``HookRegistry``, SGLang's plugin mechanism).

* ``support_triton``: SGLang decides by the attention backend's *name* whether to launch Triton
  kernels for request bookkeeping; ``tpu`` answers no (Triton does not run on tpu).
* ``ReqToTokenPool.__init__`` and ``FutureMap.__init__``: the request -> KV-slot table and the
  table relaying each step's sampled tokens to the next live on the host. They are scheduling
  bookkeeping that SGLang reads and writes entry by entry every step; on the device each access
  would be a program (and each ``.item()`` a wait). Every scheduling tensor then follows them to
  the CPU (``ScheduleBatch.device`` is the request table's device); the model, its KV buffers and
  the step program stay on tpu.
* ``KVCacheConfigurator._profile_available_bytes``: the KV budget follows
  ``torch_tpu.serving.memory`` (on the CPU plugin ``TORCH_TPU_KVCACHE_SPACE`` GiB or 4 GiB, capped
  by the memory available; on accelerators ``--mem-fraction-static`` of the device memory minus
  what is in use), never a fraction of the host's RAM.
* ``TpModelWorker.forward_batch_generation``: a step runs as one device program
  (``step_runner``).
* ``TokenizerManager._validate_one_request``: refuses (HTTP 400) what the step program does not
  implement, before the request reaches the scheduler.
"""

import inspect

import torch
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from . import BACKEND_NAME

_registered = False


def _support_triton(original, backend, *args, **kwargs):
    return False if backend == BACKEND_NAME else original(backend, *args, **kwargs)


def _on_host(original, self, *args, **kwargs):
    """Calls a constructor with its ``device`` argument replaced by the CPU."""
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    bound.arguments["device"] = "cpu"
    return original(*bound.args, **bound.kwargs)


def _kv_budget(original, self, pre_model_load_memory):
    from sglang.srt.runtime_context import get_schedule

    from torch_tpu.serving.memory import kv_cache_budget

    budget, source = kv_cache_budget(
        torch.device(self.device), get_schedule().mem_fraction_static,
        utilization_setting="--mem-fraction-static", explicit_setting="--max-total-tokens",
        space_env="TORCH_TPU_KVCACHE_SPACE",
    )
    import logging

    logging.getLogger("sglang.torch_tpu").info("KV cache budget on tpu: %.2f GiB (%s)", budget / (1 << 30), source)
    return budget


def _forward_batch_generation(original, self, batch=None, *args, **kwargs):
    from .step_runner import runner_for

    runner = runner_for(self)
    if batch is None or args or any(v is not None for v in kwargs.values()):
        why = "SGLang called the model worker without a plain schedule batch (speculative or pipelined paths)"
        raise NotImplementedError(f"SGLang on tpu: {why}; run without those features")
    return runner.run(batch)


def _validate_request(original, self, obj, *args, **kwargs):
    from .step_runner import unsupported_request

    problem = unsupported_request(obj)
    if problem:
        raise ValueError(f"{problem} is not supported by SGLang on tpu yet")
    return original(self, obj, *args, **kwargs)


def register():
    global _registered
    if _registered:
        return
    _registered = True
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS, register_attention_backend

    if BACKEND_NAME not in ATTENTION_BACKENDS:
        from .attention import create_backend

        register_attention_backend(BACKEND_NAME)(create_backend)
    around = HookType.AROUND
    HookRegistry.register("sglang.srt.utils.common.support_triton", _support_triton, around)
    HookRegistry.register("sglang.srt.mem_cache.memory_pool.ReqToTokenPool.__init__", _on_host, around)
    HookRegistry.register("sglang.srt.managers.overlap_utils.FutureMap.__init__", _on_host, around)
    HookRegistry.register("sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._profile_available_bytes",
                          _kv_budget, around)
    HookRegistry.register("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
                          _forward_batch_generation, around)
    HookRegistry.register("sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request",
                          _validate_request, around)
