"""What distributed code needs from the tpu device itself: torch.tpu.Event is a real torch.Event
(FSDP2 hands it to torch.Stream.wait_event), streams wait on events and streams, the FSDP2 ops run
on the device without CPU fallback, and under a launcher torch.tpu.set_device(LOCAL_RANK) selects
the process's only device."""

import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from helpers import assert_close


def test_event_is_a_torch_event_streams_wait_on_it():
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    assert isinstance(start, torch.Event) and start.device.type == "tpu"
    start.record()
    x = torch.randn(64, 64, device="tpu")
    y = (x @ x).sum()
    end.record()
    side = torch.tpu.Stream()
    side.wait_event(end)  # torch.Stream.wait_event takes it
    torch.tpu.current_stream().wait_stream(side)
    event = torch.tpu.current_stream().record_event()
    event.synchronize()
    assert end.query() and event.query()
    assert start.elapsed_time(end) >= 0
    assert torch.isfinite(y.cpu())


def test_fsdp2_device_ops_run_without_cpu_fallback(no_fallback):
    a = [torch.randn(3), torch.randn(5)]
    b = [torch.randn(3), torch.randn(5)]
    ta, tb = [t.to("tpu") for t in a], [t.to("tpu") for t in b]
    torch._foreach_copy_(ta, tb)
    torch._foreach_add_(ta, tb, alpha=0.5)
    torch._foreach_copy_(a, b)
    torch._foreach_add_(a, b, alpha=0.5)
    for t, c in zip(ta, a):
        assert_close(t, c)
    flat = torch.arange(10.0)
    outs = [torch.empty(3, device="tpu"), torch.empty(7, device="tpu")]
    torch.split_with_sizes_copy(flat.to("tpu"), [3, 7], out=outs)
    for o, c in zip(outs, torch.split_with_sizes_copy(flat, [3, 7])):
        assert_close(o, c)
    # FSDP2's reduce-scatter input: per-parameter gradients chunked per rank along dim 0.
    parts = [torch.randn(3, 4), torch.randn(5, 4)]
    expected = torch._chunk_cat(parts, 0, 2)
    out = torch.empty(expected.shape, device="tpu")
    torch._chunk_cat([p.to("tpu") for p in parts], 0, 2, out=out)
    assert_close(out, expected)
    # FSDP2 frees and re-allocates unsharded parameters with storage resize_.
    t = torch.randn(16, device="tpu")
    t.untyped_storage().resize_(0)
    t.untyped_storage().resize_(16 * 4)
    t.copy_(torch.arange(16.0))
    assert_close(t, torch.arange(16.0))


def test_set_device_local_rank_with_one_device_per_process():
    script = (
        "import torch, torch_tpu\n"
        "torch.tpu.set_device(1)\n"
        "assert torch.tpu.current_device() == 0 and torch.tpu.device_count() == 1\n"
        "x = torch.ones(2, device='tpu')\n"
        "assert x.device == torch.device('tpu', 0)\n"
        "try:\n"
        "    torch.ones(2, device='tpu:1')\n"
        "except IndexError as e:\n"
        "    print('ERROR', e)\n"
    )
    env = dict(os.environ, LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", TORCH_TPU_CPU_DEVICE_COUNT="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ERROR tpu device index 1 is out of range" in out.stdout, out.stdout
    assert "torch.tpu.set_device(LOCAL_RANK)" in out.stdout, out.stdout


def test_set_device_other_than_local_rank_is_still_an_error():
    with pytest.raises(IndexError, match="out of range"):
        torch.tpu.set_device(5)


def test_plugin_join_after_the_device_was_used_is_a_clear_error():
    import torch.distributed as dist

    torch.ones(1, device="tpu").cpu()  # the runtime exists now
    # The CPU plugin's collectives stay in one process: its client never joins others.
    assert not torch_tpu._C._plugin_spans_processes()
    with pytest.raises(RuntimeError, match="before the first use of a tpu device"):
        torch_tpu._C._dist_join_processes(dist.HashStore(), 0, 2)
