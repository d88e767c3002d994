"""torch.save / torch.load of tpu tensors, with map_location in both directions."""

import io

import torch

from helpers import assert_close

# The last device: a second one on the CPU test bed (two devices), the only one on a GPU.
LAST = torch.device("tpu", torch.tpu.device_count() - 1)


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_tpu_tensors_load_back_on_tpu():
    x = torch.randn(4, 5)
    t = x.to(LAST)
    loaded = roundtrip({"t": t, "row": t[2], "ints": torch.arange(3).to("tpu")})
    assert loaded["t"].device == LAST
    assert_close(loaded["t"], x)
    assert_close(loaded["row"], x[2])
    # a view and its base still share one storage after loading
    assert loaded["row"].untyped_storage().data_ptr() == loaded["t"].untyped_storage().data_ptr()
    assert_close(loaded["ints"], torch.arange(3))


def test_map_location_both_ways():
    x = torch.randn(3, 3)
    on_cpu = roundtrip(x.to("tpu"), map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, x)
    on_tpu = roundtrip(x, map_location="tpu")
    assert_close(on_tpu, x)
    moved = roundtrip(x.to("tpu:0"), map_location={"tpu:0": str(LAST)})
    assert moved.device == LAST
    assert_close(moved, x)


def test_module_state_dict():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3).to("tpu")
    sd = roundtrip(m.state_dict())
    fresh = torch.nn.Linear(4, 3).to("tpu")
    fresh.load_state_dict(sd)
    for a, b in zip(m.parameters(), fresh.parameters()):
        assert_close(b.detach(), a.detach().cpu())
