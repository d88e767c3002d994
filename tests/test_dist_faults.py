"""Faults in tpu_dist never hang: a rank that raises, is killed or never arrives makes the others
fail within the timeout with an error naming the collective and the rank; ranks that disagree on
a collective's size or dtype get a clear error; a CPU tensor handed to tpu_dist is a clear error.
Every case runs under a hard timeout, on both transports where the case exists."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from dist_harness import run_processes
from torch_tpu.distributed import run_in_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _all_reduce_outcome(x):
    """(the error all_reduce raised, or "no error"; seconds until then)."""
    start = time.monotonic()
    try:
        dist.all_reduce(x)
    except RuntimeError as e:
        return str(e), time.monotonic() - start
    return "no error", time.monotonic() - start


# ---- host transport (processes) ------------------------------------------------------------

def _raise_or_die(rank, world_size, how):
    x = torch.ones(4, device="tpu")
    dist.all_reduce(x)  # everyone is up
    if rank == 1:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("rank 1 gives up")
    return _all_reduce_outcome(x)


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_host_peer_that_raises_or_dies_fails_the_others_naming_it(how):
    outcomes = run_processes(_raise_or_die, args=(how,), timeout=90, collective_timeout=30, expect_failure=True)
    status, (message, seconds) = outcomes[0]
    assert status == "ok", outcomes[0]
    assert "all_reduce" in message and "rank 0 of 2" in message, message
    assert "rank 1 (pid" in message and "has exited" in message, message
    assert seconds < 30, seconds  # well within the group's timeout


def _never_arrives(rank, world_size):
    x = torch.ones(4, device="tpu")
    dist.all_reduce(x)
    if rank == 1:
        time.sleep(12)  # alive but absent
        return "slept", 0
    return _all_reduce_outcome(x)


def test_host_peer_that_never_arrives_times_out_naming_the_collective():
    outcomes = run_processes(_never_arrives, timeout=90, collective_timeout=4, expect_failure=True)
    message, seconds = outcomes[0][1]
    assert "tpu_dist all_reduce on rank 0 of 2 (host transport) failed" in message, message
    assert "Timed out" in message or "timed out" in message, message
    assert 3 < seconds < 12, seconds


def _mismatch(rank, world_size, kind):
    if kind == "size":
        x = torch.ones(4 + rank, device="tpu")
    else:
        x = torch.ones(4, device="tpu", dtype=torch.float32 if rank == 0 else torch.int64)
    try:
        dist.all_reduce(x)
    except RuntimeError as e:
        return str(e)
    return "no error"


@pytest.mark.parametrize("kind", ["size", "dtype"])
def test_host_size_or_dtype_mismatch_is_a_clear_error(kind):
    outcomes = run_processes(_mismatch, args=(kind,), timeout=90, collective_timeout=20, expect_failure=True)
    for rank in (0, 1):
        message = outcomes[rank][1]
        assert "different collectives" in message, message
        assert "rank 0 has all_reduce" in message or "rank 1 has all_reduce" in message, message
        want = ("4 elements", "5 elements") if kind == "size" else ("float32", "int64")
        assert all(w in message for w in want), message


def _cpu_tensor(rank, world_size):
    messages = []
    calls = [
        # A tpu output with a CPU input reaches tpu_dist ...
        lambda: dist.all_gather_into_tensor(torch.empty(3 * world_size, device="tpu"), torch.ones(3)),
        # ... and so does a CPU tensor handed to the group's tpu backend itself.
        lambda: dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu")).allreduce(
            [torch.ones(3)]).wait(),
    ]
    for call in calls:
        try:
            call()
            messages.append("no error")
        except RuntimeError as e:
            messages.append(str(e))
    # The group is still usable, and CPU tensors of the public API run on its CPU side (Gloo).
    x = torch.ones(3)
    dist.all_reduce(x)
    return messages, x


def test_cpu_tensor_through_tpu_dist_is_a_clear_error():
    for messages, x in run_processes(_cpu_tensor, timeout=90):
        for message in messages:
            assert "got a tensor on cpu" in message and "tpu_dist runs collectives on tpu tensors" in message, message
            assert "Fix:" in message
        torch.testing.assert_close(x, torch.full((3,), 2.0))


def test_uncaught_exception_is_reported_through_the_store(tmp_path):
    """A rank started by a launcher of its own (not torchrun, which kills the others) that dies
    of an exception: the others' error names it and its error."""
    script = (
        "import os, sys, torch, torch.distributed as dist, torch_tpu\n"
        "dist.init_process_group('tpu_dist', timeout=__import__('datetime').timedelta(seconds=30))\n"
        "x = torch.ones(4, device='tpu'); dist.all_reduce(x)\n"
        "if dist.get_rank() == 1: raise KeyError('missing shard')\n"
        "try:\n"
        "    dist.all_reduce(x)\n"
        "except RuntimeError as e:\n"
        "    print('ERROR:', e)\n"
    )
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=120))
    finally:
        for p in procs:
            p.kill()
    assert procs[1].returncode != 0 and "KeyError" in outs[1][1]
    assert "ERROR: tpu_dist all_reduce on rank 0 of 2" in outs[0][0], outs[0]
    assert "rank 1 reported: KeyError: 'missing shard'" in outs[0][0], outs[0]


# ---- device transport (threads) ------------------------------------------------------------

def _threads_case(rank, world_size, case):
    x = torch.ones(4, device="tpu")
    dist.all_reduce(x)
    if case == "raise" and rank == 1:
        raise ValueError("rank 1 gives up")
    if case == "absent" and rank == 1:
        time.sleep(6)
        return "slept"
    if case == "size":
        x = torch.ones(4 + rank, device="tpu")
    return _all_reduce_outcome(x)


@pytest.mark.parametrize("rendezvous", ["memory", "store"])
@pytest.mark.parametrize("case", ["raise", "absent", "size"])
def test_device_transport_faults(case, rendezvous, monkeypatch):
    if rendezvous == "store":  # how ranks in different processes meet
        monkeypatch.setenv("TORCH_TPU_DIST_RENDEZVOUS", "store")
    results = {}

    def body(rank, world_size):
        results[rank] = _threads_case(rank, world_size, case)
        return results[rank]

    try:
        run_in_threads(body, 2, timeout=4)
    except RuntimeError as e:
        assert case == "raise" and "rank 1 of 2 failed: ValueError" in str(e), e
    message, seconds = results[0]
    assert "tpu_dist all_reduce on rank 0 of 2 (device transport)" in message, message
    if case == "raise":
        assert "rank 1 raised ValueError: rank 1 gives up" in message, message
        assert seconds < 2, seconds
    elif case == "absent":
        assert "timed out after 4.0 s" in message and "rank(s) 1 did not reach it" in message, message
    else:
        assert "different collectives" in message and "float32[5]" in message, message
        assert "different collectives" in results[1][0]
