"""Skip marks for tests that assume the CPU test bed (two XLA CPU devices, allocator-counted
memory): the device check runs the device-generic tests on other plugins too (a GPU has one
device, and the plugin's own memory statistics)."""

import pytest
import torch

import torch_tpu
from torch_tpu import _plugin

PLATFORM = _plugin.requested_platform()

needs_two_devices = pytest.mark.skipif(
    torch.tpu.device_count() < 2,
    reason="needs two tpu devices (the CPU plugin has TORCH_TPU_CPU_DEVICE_COUNT=2 under pytest; "
           "this plugin has one)")

cpu_plugin_only = pytest.mark.skipif(
    PLATFORM != "cpu", reason=f"checks the XLA CPU plugin's own facts (this run's platform: {PLATFORM})")

allocator_counted_memory = pytest.mark.skipif(
    torch.tpu.memory_sources(0)["allocated_bytes.current"] != "allocator",
    reason="exact bytes per storage are the allocator's counters; this plugin reports its own device "
           "statistics, which count XLA's buffers (a storage once written), so tests/test_device_facts.py "
           "checks those")
