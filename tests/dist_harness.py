"""Multi-rank test harness for tpu_dist: ranks as processes (the host transport, and Gloo on CPU
tensors as the reference) or as threads of one process (the device transport). Every run has a
hard timeout: ranks still alive then are killed and the test fails, naming them."""

import datetime
import io
import os
import queue as queue_module
import tempfile
import time
import traceback

import torch
import torch.multiprocessing as mp


def _child(fn, rank, world_size, store_path, backend, env, results, args, timeout):
    os.environ.update(env)
    os.environ["OMP_NUM_THREADS"] = "1"
    status, payload = "ok", None
    try:  # an import that fails is reported too, not waited for until the timeout
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        import torch_tpu  # noqa: F401  (registers tpu_dist)

        store = dist.FileStore(store_path, world_size)
        dist.init_process_group(backend, rank=rank, world_size=world_size, store=store,
                                timeout=datetime.timedelta(seconds=timeout))
        payload = fn(rank, world_size, *args)
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the test
        status, payload = "error", traceback.format_exc()
    buffer = io.BytesIO()
    torch.save((rank, status, payload), buffer)
    results.put(buffer.getvalue())


def run_processes(fn, world_size=2, backend="tpu_dist", args=(), timeout=120, env=None,
                  collective_timeout=None, expect_failure=False):
    """Runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined by a
    ``backend`` process group; returns their results in rank order (CPU tensors and plain data).
    A rank that raises fails the test with its traceback (``expect_failure``: returns
    ``{rank: ("ok"|"error", payload)}`` instead)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    store_dir = tempfile.mkdtemp(prefix="tpu_dist_test_")
    store_path = os.path.join(store_dir, "store")
    child_env = dict(env or {})
    procs = [
        ctx.Process(target=_child, args=(fn, r, world_size, store_path, backend, child_env, results, args,
                                         collective_timeout or timeout), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    outcomes = {}
    deadline = time.monotonic() + timeout
    try:
        while len(outcomes) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                rank, status, payload = torch.load(io.BytesIO(results.get(timeout=min(remaining, 1.0))),
                                                   weights_only=False)
                outcomes[rank] = (status, payload)
            except queue_module.Empty:
                if expect_failure and all(not p.is_alive() for p in procs):
                    break
                # A rank that died before it could report (e.g. its bootstrap failed to import the
                # test's module: the traceback is on stderr) is not waited for until the timeout.
                if not expect_failure and any(not p.is_alive() and p.exitcode != 0 for p in procs):
                    break
    finally:
        for p in procs:
            p.join(timeout=max(0.0, min(10.0, deadline - time.monotonic())))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    if expect_failure:
        return outcomes
    missing = [r for r in range(world_size) if r not in outcomes]
    died = {r: procs[r].exitcode for r in missing if procs[r].exitcode not in (None, 0, -9)}
    assert not died, f"rank(s) {sorted(died)} exited without a result (exit codes {died}; see stderr)"
    assert not missing, f"rank(s) {missing} did not finish within {timeout} s (killed)"
    errors = {r: o[1] for r, o in outcomes.items() if o[0] != "ok"}
    assert not errors, "\n".join(f"rank {r} failed:\n{tb}" for r, tb in errors.items())
    return [outcomes[r][1] for r in range(world_size)]


def run_threads(fn, world_size=2, args=(), timeout=120):
    """Runs ``fn(rank, world_size, *args)`` on threads of this process, rank r on tpu:r
    (the device transport). The process's fallback counts start empty, as in the fresh processes
    of ``run_processes``: the ranks read them, and tests an earlier file ran in this worker
    process (pytest-xdist) may have left some."""
    import torch_tpu
    from torch_tpu.distributed import run_in_threads

    torch_tpu.reset_fallback_counts()
    return run_in_threads(fn, world_size, args=args, timeout=timeout)
