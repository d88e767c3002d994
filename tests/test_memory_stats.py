"""Memory statistics follow live tpu storages per device."""

import gc

import torch

from device_marks import allocator_counted_memory, needs_two_devices


@allocator_counted_memory
def test_allocated_tracks_tensors():
    torch.tpu.synchronize()
    gc.collect()
    before = torch.tpu.memory_allocated()
    x = torch.empty(1024, 1024, device="tpu")
    assert torch.tpu.memory_allocated() == before + 4 * 1024 * 1024
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    del x
    gc.collect()
    assert torch.tpu.memory_allocated() == before


def test_peak_and_reset():
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    y = torch.ones(256, 1024, device="tpu")
    peak = torch.tpu.max_memory_allocated()
    assert peak >= base + y.numel() * 4
    del y
    assert torch.tpu.max_memory_allocated() == peak
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()


@needs_two_devices
def test_devices_are_counted_separately():
    b0, b1 = torch.tpu.memory_allocated(0), torch.tpu.memory_allocated(1)
    z = torch.zeros(1000, device="tpu:1")
    assert torch.tpu.memory_allocated(1) == b1 + 4000
    assert torch.tpu.memory_allocated(0) == b0
    del z


def test_stats_dict_and_accelerator_view():
    x = torch.zeros(10, device="tpu")
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.tpu.memory_reserved()
    torch.tpu.empty_cache()
    torch.accelerator.empty_cache()
    assert torch.tpu.memory_allocated() >= x.numel() * 4


@allocator_counted_memory
def test_storage_resize_is_accounted():
    t = torch.empty(100, device="tpu")
    before = torch.tpu.memory_allocated()
    t.untyped_storage().resize_(0)
    assert torch.tpu.memory_allocated() == before - 400
