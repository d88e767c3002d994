"""torch.tpu mirrors torch.cuda; torch.accelerator and torch.backends report tpu."""

import os

import pytest
import torch

import torch_tpu
from device_marks import PLATFORM, cpu_plugin_only, needs_two_devices


def test_availability_and_count():
    assert torch.tpu.is_available()
    if PLATFORM == "cpu":  # set by conftest via TORCH_TPU_CPU_DEVICE_COUNT
        assert torch.tpu.device_count() == int(os.environ["TORCH_TPU_CPU_DEVICE_COUNT"])
    else:
        assert torch.tpu.device_count() >= 1
    assert torch.backends.tpu.is_available()
    assert torch.tpu.is_initialized()


@needs_two_devices
def test_current_device_and_context_manager():
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        assert torch.empty(2, device="tpu").device == torch.device("tpu", 1)
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device("tpu:1")
    try:
        assert torch.ones(1, device="tpu").device.index == 1
    finally:
        torch.tpu.set_device(0)


def test_device_name_and_properties():
    props = torch.tpu.get_device_properties(0)
    assert props.name == torch.tpu.get_device_name(0) == props.device_kind
    assert props.platform == PLATFORM
    if PLATFORM == "cpu":
        assert props.name == "cpu"  # the XLA CPU plugin's device kind
    assert props.total_memory > 0
    assert props.pjrt_api_version.startswith("0.")
    assert props.name in repr(props)


def test_synchronize_waits_for_work():
    x = torch.randn(256, 256, device="tpu")
    y = x @ x
    torch.tpu.synchronize()
    torch.tpu.synchronize("tpu:0")
    assert torch.tpu.current_stream().query()
    assert torch.isfinite(y.cpu()).all()


def test_misc_capabilities():
    assert torch.tpu.is_bf16_supported()
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()


def test_accelerator_reports_tpu():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.is_available()
    x = torch.ones(1024, device="tpu")
    torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() >= x.numel() * 4
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()


def test_generated_methods():
    x = torch.arange(4.0)
    t = x.tpu()
    assert t.is_tpu and not x.is_tpu
    assert t.device == torch.device("tpu:0")
    if torch.tpu.device_count() > 1:
        assert x.tpu(1).device == torch.device("tpu:1")
    m = torch.nn.Linear(3, 2).tpu()
    assert m.weight.device.type == "tpu"
    s = x.untyped_storage().tpu()
    assert s.is_tpu and s.device.type == "tpu"
    assert torch.equal(t.cpu(), x)


def test_streams_and_events():
    s = torch.tpu.Stream()
    assert s.device.type == "tpu"
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    x = torch.randn(128, 128, device="tpu")
    y = (x @ x).sum()
    end.record()
    end.synchronize()
    assert end.query()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    with torch.tpu.stream(s):
        z = (x + 1).cpu()
        assert torch.tpu.current_stream() == s
    torch.testing.assert_close(z, x.cpu() + 1)
    assert torch.tpu.current_stream().device_index == 0
    # torch.cuda.StreamContext's shape (SGLang's scheduler enters one); None keeps the stream.
    with torch.tpu.StreamContext(s) as entered:
        assert entered is s and torch.tpu.current_stream() == s
    with torch.tpu.StreamContext(None):
        assert torch.tpu.current_stream() != s
    assert torch.isfinite(y.cpu())


@cpu_plugin_only
def test_plugin_is_the_installed_cpu_plugin():
    props = torch.tpu.get_device_properties()
    import fastatomstruct_xla_cpu
    assert props.plugin == fastatomstruct_xla_cpu.library_path()
    assert torch_tpu._plugin.default_plugin_path() == props.plugin
    assert props.pjrt_api_version.startswith("0.")


@pytest.mark.parametrize("bad", ["tpu:7", 7])
def test_set_device_out_of_range(bad):
    with pytest.raises(IndexError, match="out of range"):
        torch.tpu.set_device(bad)
