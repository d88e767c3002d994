"""Step programs (torch_tpu/captured.py): a Python step function captured once per
bucket and replayed from C++, updating its state tensors in place - and taking over their
buffers even while the previous step that writes them is still running (the serving loop
launches step N+1 before step N finishes)."""

import numpy as np
import pytest
import torch

from torch_tpu.serving.packing import Layout, Section, upload
from torch_tpu.captured import CapturedPrograms


def _donated():
    return torch.tpu.compilation_cache_stats()["donated_buffers"]


def _step(weight):
    def fn(packed, cache, last):
        rows = packed[:4].long()
        values = packed[4:8].float()[:, None] * weight[:4]  # [4, 16]
        cache.index_copy_(0, rows, values)  # the KV-cache-like update
        last.index_copy_(0, rows, packed[4:8])
        return [cache[rows].sum(-1)]
    return fn


def _reference(steps, weight):
    cache, last = torch.zeros(64, 16), torch.zeros(64, dtype=torch.int32)
    outs = []
    for packed in steps:
        outs.append(_step(weight)(packed, cache, last)[0])
    return outs, cache, last


def test_replays_update_state_in_place_and_donate_back_to_back(strict_no_fallback):
    torch.manual_seed(0)
    weight = torch.randn(8, 16)
    rng = np.random.default_rng(0)
    steps = [torch.from_numpy(np.concatenate([rng.choice(64, 4, replace=False), rng.integers(-5, 5, 4)]).astype(np.int32))
             for _ in range(6)]
    cache = torch.zeros(64, 16, device="tpu")
    last = torch.zeros(64, dtype=torch.int32, device="tpu")
    programs = CapturedPrograms("test")
    fn = _step(weight.to("tpu"))
    before = _donated()
    outs = [programs.run("bucket", fn, [upload(p.numpy(), "tpu"), cache, last])[0] for p in steps]
    # One capture, then replays launched without waiting in between: every run takes over the
    # state buffers the run before it is still defining (2 state tensors per step).
    assert {k: programs.stats[k] for k in ("captures", "replays", "rerecorded_steps")} == {
        "captures": 1, "replays": 5, "rerecorded_steps": 0}
    assert programs.stats["capture_seconds"] > 0
    assert _donated() - before == 2 * len(steps)
    ref_outs, ref_cache, ref_last = _reference(steps, weight)
    for got, want in zip(outs, ref_outs):
        torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(cache.cpu(), ref_cache)
    assert torch.equal(last.cpu(), ref_last)


def test_new_layout_captures_again():
    programs = CapturedPrograms("test")
    fn = lambda packed, state: [state.add_(packed.float()).sum().reshape(1)]  # noqa: E731
    for n in (4, 4, 8, 8):
        state = torch.zeros(n, device="tpu")
        out = programs.run(("n", n), fn, [upload(np.ones(n, np.int32), "tpu"), state])[0]
        assert out.item() == n
    assert programs.stats["captures"] == 2 and programs.stats["replays"] == 2
    assert len(programs) == 2


def test_a_step_that_reads_the_host_is_recorded_per_step_with_a_warning():
    programs = CapturedPrograms("test")

    def fn(packed, state):
        k = int(packed[0].item())  # a host read inside the step: not one program
        return [state[:k].sum().reshape(1)]

    state = torch.arange(8.0, device="tpu")
    with pytest.warns(UserWarning, match="cannot be replayed"):
        first = programs.run("b", fn, [upload(np.array([3], np.int32), "tpu"), state])[0]
    again = programs.run("b", fn, [upload(np.array([5], np.int32), "tpu"), state])[0]
    assert first.item() == 3 and again.item() == 10  # each step still computes its own result
    assert programs.stats["rerecorded_steps"] == 1


def _compiles():
    return torch.tpu.compilation_cache_stats()["compiles"]


def test_a_program_compiled_in_the_background_changes_nothing_and_is_captured_without_compiling(strict_no_fallback):
    from torch_tpu import _C

    programs = CapturedPrograms("test")
    fn = lambda packed, state: [state.add_(packed.float() * 3).sum().reshape(1)]  # noqa: E731
    state = torch.arange(6.0, device="tpu")
    packed = np.arange(6, dtype=np.int32)
    programs.compile_in_background("b", fn, [upload(packed, "tpu"), state])
    assert programs.background_state("b") in ("pending", "ready")
    assert "b" not in programs  # not a program of the step yet: its capture comes with run()
    # Nothing ran: the state the recording wrote keeps its contents, and reading it waits for nothing.
    assert state.cpu().tolist() == list(range(6))
    _C._wait_background_compiles()
    assert programs.background_state("b") == "ready"
    before = _compiles()
    out = programs.run("b", fn, [upload(packed, "tpu"), state])[0]
    assert _compiles() == before  # the capture found the program compiled
    assert programs.stats["captures"] == 1
    want = torch.arange(6.0) + torch.arange(6.0) * 3
    torch.testing.assert_close(state.cpu(), want)
    assert out.item() == want.sum().item()
    programs.compile_in_background("b", fn, [upload(packed, "tpu"), state])  # a known key: nothing to do
    assert programs.background_state("b") == "ready"


def test_a_step_that_reads_the_host_is_not_compiled_in_the_background():
    programs = CapturedPrograms("test")

    def fn(packed, state):
        return [state[: int(packed[0].item())].sum().reshape(1)]

    programs.compile_in_background("b", fn, [upload(np.array([3], np.int32), "tpu"), torch.arange(8.0, device="tpu")])
    assert programs.background_state("b") == "unrecordable"


def test_layout_packs_views_for_the_device():
    layout = Layout([Section("ids", "i32", (3,)), Section("temp", "f32", (2,))])
    buf, views = layout.host_buffer()
    views["ids"][:] = [7, -1, 2]
    views["temp"][:] = [0.5, 1.5]
    v = layout.device_views(upload(buf, "tpu"))
    assert v["ids"].cpu().tolist() == [7, -1, 2] and v["temp"].cpu().tolist() == [0.5, 1.5]


def test_buckets():
    from torch_tpu.serving.buckets import bucket, fine_bucket, pow2

    assert [pow2(n) for n in (0, 1, 2, 3, 5, 8, 9)] == [1, 1, 2, 4, 8, 8, 16]
    assert bucket(0, floor=8) == 0 and bucket(3, floor=8) == 8 and bucket(9, floor=8) == 16
    assert bucket(40, cap=48) == 48
    with pytest.raises(ValueError, match="exceeds the largest bucket"):
        bucket(50, cap=48)
    sizes = [fine_bucket(n, floor=4) for n in range(1, 100)]
    assert sizes[:8] == [4, 4, 4, 4, 6, 6, 8, 8] and fine_bucket(17) == 24 and fine_bucket(25) == 32
    # At most a third of a bucket is padding once past the floor.
    assert all(s >= n and (s - n) * 3 <= s for n, s in zip(range(4, 100), sizes[3:]))
