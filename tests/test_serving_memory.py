"""The serving engines' KV-cache budget (torch_tpu/serving/memory.py): never a fraction of the
whole host on the CPU plugin, the CUDA rule on accelerators, and a clear error naming the figures
and the setting when a budget cannot fit - before anything is allocated."""

import pytest
import torch

from torch_tpu.serving import memory

GiB = 1 << 30


def _fake_device(monkeypatch, free, total, source):
    monkeypatch.setattr(torch.tpu, "mem_get_info", lambda device=None: (free, total))
    monkeypatch.setattr(torch.tpu, "memory_sources", lambda device=None: {"total_memory": source})


def test_cpu_plugin_default_is_capped_by_available_memory(monkeypatch):
    _fake_device(monkeypatch, free=20 * GiB, total=24 * GiB, source="host")
    budget, why = memory.kv_cache_budget("tpu:0", 0.9, env={})
    assert budget == memory.DEFAULT_HOST_KV_BYTES  # 4 GiB, not 0.9 x 24 GiB
    assert "default" in why
    _fake_device(monkeypatch, free=3 * GiB, total=24 * GiB, source="host")
    budget, _ = memory.kv_cache_budget("tpu:0", 0.9, env={})
    assert budget == (3 * GiB - memory.HOST_HEADROOM_BYTES) // 2  # half of what is left


def test_cpu_plugin_follows_vllm_cpu_kvcache_space(monkeypatch):
    _fake_device(monkeypatch, free=20 * GiB, total=24 * GiB, source="host")
    budget, why = memory.kv_cache_budget("tpu:0", 0.9, env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert budget == 2 * GiB and "VLLM_CPU_KVCACHE_SPACE" in why
    with pytest.raises(memory.KVCacheBudgetError, match=r"VLLM_CPU_KVCACHE_SPACE=64 GiB.*does not fit.*20\.00 GiB of 24\.00"):
        memory.kv_cache_budget("tpu:0", 0.9, env={"VLLM_CPU_KVCACHE_SPACE": "64"})
    with pytest.raises(memory.KVCacheBudgetError, match="not a number"):
        memory.kv_cache_budget("tpu:0", 0.9, env={"VLLM_CPU_KVCACHE_SPACE": "lots"})


def test_explicit_size_is_taken_or_refused(monkeypatch):
    _fake_device(monkeypatch, free=20 * GiB, total=24 * GiB, source="host")
    assert memory.kv_cache_budget("tpu:0", 0.9, explicit=GiB, env={})[0] == GiB
    with pytest.raises(memory.KVCacheBudgetError, match="kv_cache_memory_bytes=.*does not fit"):
        memory.kv_cache_budget("tpu:0", 0.9, explicit=30 * GiB, env={})


def test_accelerator_uses_the_fraction_of_device_memory_minus_what_is_in_use(monkeypatch):
    _fake_device(monkeypatch, free=60 * GiB, total=80 * GiB, source="pjrt")
    budget, why = memory.kv_cache_budget("tpu:0", 0.9, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert budget == int(80 * GiB * 0.9) - 20 * GiB  # the host setting does not apply here
    assert "gpu_memory_utilization=0.9" in why
    with pytest.raises(memory.KVCacheBudgetError, match="gpu_memory_utilization"):
        memory.kv_cache_budget("tpu:0", 0.2, env={})  # 16 GiB allowed, 20 already in use


def test_real_device_figures():
    """On this machine (the CPU plugin) the default budget is at most 4 GiB and fits."""
    budget, why = memory.kv_cache_budget("tpu:0", 0.9, env={})
    free, _ = torch.tpu.mem_get_info()
    assert 0 < budget <= min(memory.DEFAULT_HOST_KV_BYTES, free)
