"""Device facts from the plugin (device kind, memory limit, memory statistics) and the source of
each figure. On the XLA CPU plugin PJRT_Device_MemoryStats is UNIMPLEMENTED, so the figures are
torch_tpu's allocator counters and the host's memory; the precedence when a plugin does report
statistics (GPU, TPU) is unit-tested with fake statistics in tests/cpp/test_memory_figures.cc
(run here too when the C++ tests are built)."""

import os
import subprocess

import pytest
import torch

import torch_tpu
from torch_tpu import _C

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _host_total():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_device_kind_comes_from_the_plugin():
    props = torch.tpu.get_device_properties(0)
    info = _C._device_info(0)
    assert props.device_kind == info["device_kind"]
    assert props.name == props.device_kind  # what torch.tpu.get_device_name reports
    assert torch.tpu.get_device_name() == props.device_kind
    if props.platform == "cpu":
        assert props.device_kind == "cpu"


def test_total_memory_and_mem_get_info_on_the_cpu_plugin():
    props = torch.tpu.get_device_properties(0)
    if props.platform != "cpu":
        pytest.skip("the CPU plugin's fallback to host memory; this plugin reports its own")
    free, total = torch.tpu.mem_get_info(0)
    assert props.total_memory_source == "host"
    assert props.total_memory == total == _host_total()
    assert 0 < free <= total
    assert torch.tpu.memory_sources(0)["total_memory"] == "host"
    # torch.accelerator goes through the same allocator hook.
    assert torch.accelerator.get_memory_info(0)[1] == total


def test_memory_figures_source_and_values_on_the_cpu_plugin():
    if torch.tpu.get_device_properties(0).platform != "cpu":
        pytest.skip("the CPU plugin reports no device memory statistics; this one does")
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated(0)
    x = torch.empty(1024, 256, device="tpu")  # 1 MiB of float32
    stats = torch.tpu.memory_stats(0)
    assert stats["source"] == "allocator"
    assert torch.tpu.memory_sources(0) == {
        "allocated_bytes.current": "allocator", "allocated_bytes.peak": "allocator",
        "reserved_bytes.current": "allocator", "total_memory": "host"}
    assert torch.tpu.memory_allocated(0) - before == x.nbytes
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated(0)
    assert torch.accelerator.memory_allocated(0) == torch.tpu.memory_allocated(0)
    assert torch.tpu.memory_reserved(0) == torch.tpu.memory_allocated(0)
    # Peak: tracked, resettable.
    del x
    torch.tpu.reset_peak_memory_stats(0)
    assert torch.tpu.max_memory_allocated(0) == torch.tpu.memory_allocated(0)
    y = torch.empty(2048, 256, device="tpu")
    peak = torch.tpu.max_memory_allocated(0)
    del y
    assert peak - torch.tpu.memory_allocated(0) == 2048 * 256 * 4
    assert torch.tpu.memory_sources(0)["allocated_bytes.peak"] == "allocator"
    # Every value but the source is a byte or count, as in torch.cuda.memory_stats.
    assert all(isinstance(v, int) for k, v in stats.items() if k != "source")


def test_bad_device_index_is_a_clear_error():
    n = torch.tpu.device_count()
    for fn in (torch.tpu.mem_get_info, torch.tpu.memory_sources, torch.tpu.memory_stats,
               torch.tpu.get_device_properties):
        with pytest.raises((RuntimeError, ValueError, IndexError)):
            fn(n + 7)


def test_precedence_unit_tests():
    """The C++ precedence tests (fake plugin statistics) when the test binary is built."""
    binary = os.path.join(_ROOT, "build", "py", "tpu_core_tests")
    if not os.path.exists(binary):
        pytest.skip(f"C++ tests not built ({binary} missing; scripts/run_tests.sh builds them)")
    proc = subprocess.run([binary, "--gtest_filter=MemoryFigures.*:MemoryTotals.*"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "[  PASSED  ] 6 tests" in proc.stdout


def test_plugin_memory_statistics_when_reported():
    """On a plugin with device statistics (the XLA GPU plugin, libtpu) the byte figures are the
    plugin's, and they see the buffers of live tensors."""
    if torch.tpu.memory_sources(0)["allocated_bytes.current"] != "pjrt":
        pytest.skip("this plugin reports no device memory statistics (the XLA CPU plugin)")
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated(0)
    x = torch.ones(4096, 1024, device="tpu")  # 16 MiB, materialized by the fill
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated(0) - before >= x.nbytes
    assert torch.tpu.max_memory_allocated(0) >= torch.tpu.memory_allocated(0)
    assert torch.tpu.memory_stats(0)["source"] == "pjrt"
    free, total = torch.tpu.mem_get_info(0)
    props = torch.tpu.get_device_properties(0)
    if torch.tpu.memory_sources(0)["total_memory"] == "pjrt":
        assert props.total_memory == total and props.total_memory_source == "pjrt"
        assert 0 <= free <= total
        if torch.cuda.is_available():  # the XLA pool lives inside the GPU's memory
            assert total <= torch.cuda.get_device_properties(0).total_memory
    del x
