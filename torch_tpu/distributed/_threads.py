"""Ranks as threads of one process, one tpu device each: the shape in which the XLA CPU plugin runs
tpu_dist's device transport (its collectives work between the devices of one process).

``run_in_threads(fn, world_size)`` gives every thread its own torch.distributed state (c10d keeps
one per process), selects device ``rank`` for it, initializes the ``tpu_dist`` group and calls
``fn(rank, world_size, *args)``. Needs ``TORCH_TPU_CPU_DEVICE_COUNT >= world_size`` before the
device is first used.
"""

import datetime
import threading

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


class _RankWorld:
    """One rank's c10d state: what ``distributed_c10d._World`` keeps in module globals, kept
    here per instance instead."""

    def __init__(self):
        self.default_pg = None
        self.pg_map = {}
        self.pg_names = {}
        self.pg_group_ranks = {}
        self.pg_backend_config = {}
        self.group_count = 0
        self.tags_to_pg = {}
        self.pg_to_tag = {}
        self.pg_coalesce_state = {}
        self.comms = []

    @property
    def pg_config_info(self):
        return [
            {"pg_name": self.pg_names[pg], "backend_config": self.pg_backend_config[pg],
             "ranks": list(self.pg_group_ranks[pg].keys()), "group_size": len(self.pg_group_ranks[pg]),
             "group_count": self.group_count}
            for pg in self.pg_map
        ]


class _ThreadWorlds:
    """c10d's world (``distributed_c10d._world``, which c10d documents as replaceable), one per
    thread."""

    def __init__(self):
        object.__setattr__(self, "_local", threading.local())

    def _world(self):
        local = object.__getattribute__(self, "_local")
        if not hasattr(local, "world"):
            local.world = _RankWorld()
        return local.world

    def __getattr__(self, name):
        return getattr(self._world(), name)

    def __setattr__(self, name, value):
        setattr(self._world(), name, value)


def _abandon_groups(why):
    """This thread's rank leaves every tpu_dist group it is in, telling the others why."""
    from .. import _C

    for pg in list(c10d._world.pg_map):
        try:
            _C._dist_abandon(pg._get_backend(torch.device("tpu")), why)
        except RuntimeError:
            pass  # a group without a tpu backend


def _resolve_compile_backend():
    """Dynamo registers a backend named by an entry point on first lookup, without a lock: two
    ranks whose first torch.compile(backend="tpu") runs at once would both register "tpu" and one
    would fail ("duplicate name"). So the name is resolved here, before the ranks start - which
    loads Dynamo if nothing has yet (about 2 s, once a process)."""
    from torch._dynamo.backends.registry import lookup_backend

    lookup_backend("tpu")


def run_in_threads(fn, world_size, args=(), timeout=60.0, backend="tpu_dist"):
    """Runs ``fn(rank, world_size, *args)`` on ``world_size`` threads, rank r on ``tpu:r`` in a
    ``backend`` process group of its own; returns their results in rank order. A rank that raises
    makes this raise (naming the rank) once every thread has ended; ``timeout`` (seconds) bounds
    the group's collectives and the wait for the threads."""
    if torch.tpu.device_count() < world_size:
        raise RuntimeError(
            f"run_in_threads needs {world_size} tpu devices in this process, found "
            f"{torch.tpu.device_count()}. Fix: set TORCH_TPU_CPU_DEVICE_COUNT={world_size} before "
            "torch_tpu first uses the device."
        )
    _resolve_compile_backend()
    store = dist.HashStore()
    results = [None] * world_size
    errors = [None] * world_size
    saved_world = c10d._world
    c10d._world = _ThreadWorlds()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)

    def rank_main(rank):
        try:
            # Each rank's backward runs on its own thread, not on the device's autograd thread
            # (the setting is per thread): a rank's work then comes from one thread, in order.
            torch.autograd.set_multithreading_enabled(False).__enter__()
            torch.tpu.set_device(rank)
            dist.init_process_group(
                backend, rank=rank, world_size=world_size, store=store,
                timeout=datetime.timedelta(seconds=timeout),
            )
            try:
                results[rank] = fn(rank, world_size, *args)
            except BaseException as e:
                # The other ranks must not wait for this one: their collectives fail at once.
                _abandon_groups(f"raised {type(e).__name__}: {e}")
                raise
            finally:
                dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001 - reported to the caller with the rank
            errors[rank] = e

    threads = [threading.Thread(target=rank_main, args=(r,), name=f"tpu_dist rank {r}", daemon=True)
               for r in range(world_size)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        alive = [r for r, t in enumerate(threads) if t.is_alive()]
        if alive:
            raise TimeoutError(f"run_in_threads: rank(s) {alive} did not finish within {timeout} s")
    finally:
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        c10d._world = saved_world
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        rank, error = failed[0]
        raise RuntimeError(f"rank {rank} of {world_size} failed: {type(error).__name__}: {error}") from error
    return results
