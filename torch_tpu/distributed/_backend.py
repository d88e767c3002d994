"""Creation of ``tpu_dist`` backends: which transport a group uses, and the CPU side of its
process group.

Each rank of a new group publishes, through the group's store, which process it lives in and
which PJRT device it uses. When every rank lives in this process on its own device, the group
gets the *device* transport (collectives as XLA programs over the group's devices; the ranks meet
in memory); otherwise the *host* transport (device -> host -> Gloo -> device).
``TORCH_TPU_DIST_TRANSPORT=device|host`` forces one. ``device`` across processes needs a plugin
whose collectives span processes (libtpu, the XLA CUDA plugin; the ranks then meet through the
store) - not yet validated on such hardware, so it is opt-in - and is an error on the XLA CPU
plugin. ``TORCH_TPU_DIST_RENDEZVOUS=store`` makes ranks in one process meet through the store too.
"""

import os
import socket
import sys
import threading
import time
import uuid

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .. import _C

TRANSPORT_ENV = "TORCH_TPU_DIST_TRANSPORT"
RENDEZVOUS_ENV = "TORCH_TPU_DIST_RENDEZVOUS"
CHECK_ENV = "TORCH_TPU_DIST_CHECK"

_lock = threading.Lock()
# Gloo process groups made for tpu_dist groups, by (group name, rank): they also serve the group's
# CPU tensors and object collectives (see attach_cpu_backend).
_gloo_of_group: dict = {}
_hooks_installed = False


def process_token():
    """This process, as other ranks see it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _root_store(store):
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def _seconds(timeout):
    return timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)


def _get(store, key, timeout):
    """store.get without holding the GIL while the key is missing (a store's blocking get keeps
    it, which stalls ranks that are threads of this process)."""
    deadline = time.monotonic() + _seconds(timeout)
    pause = 0.0005
    while not store.check([key]):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"tpu_dist: timed out after {_seconds(timeout):.0f} s waiting for '{key}' in the "
                "store: not every rank of the group is creating it. Fix: every rank must call "
                "init_process_group/new_group for the group."
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return store.get(key)


def _choose_transport(members, in_process):
    """'device' or 'host' for a group whose ranks are `members` [(process, device id)], all in
    this process or not."""
    forced = os.environ.get(TRANSPORT_ENV, "auto").strip().lower() or "auto"
    if forced not in ("auto", "device", "host"):
        raise ValueError(
            f"{TRANSPORT_ENV}={forced!r} is not a tpu_dist transport. Fix: set it to 'device', "
            "'host' or 'auto' (the default), or unset it."
        )
    distinct = len({m[1] for m in members}) == len(members)
    if forced == "host":
        return "host"
    if in_process and distinct:
        return "device"
    if forced == "device" and distinct and _C._plugin_spans_processes():
        return "device"
    if forced == "device":
        why = (
            "its ranks live in different processes, and the XLA CPU plugin runs collectives only "
            "between the devices of one process"
            if not in_process
            else "two of its ranks use the same tpu device"
        )
        raise RuntimeError(
            f"{TRANSPORT_ENV}=device cannot be used for this group: {why}. Fix: unset "
            f"{TRANSPORT_ENV} (the host transport runs collectives through Gloo), or run the ranks "
            "as threads of one process with TORCH_TPU_CPU_DEVICE_COUNT=<ranks> and "
            "torch.tpu.set_device(rank) in each."
        )
    return "host"


def _install_failure_hooks(root_store, global_rank):
    """An uncaught exception in a rank is written to the store, so the other ranks' failed
    collectives can name it."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous = sys.excepthook

    def report(exc_type, exc, tb):
        try:
            root_store.set(f"tpu_dist/failed/{global_rank}", f"{exc_type.__name__}: {exc}")
        except Exception:
            pass
        previous(exc_type, exc, tb)

    sys.excepthook = report


def _join_processes(root_store, rank, world_size):
    """With a plugin that runs collectives across processes (libtpu, the XLA CUDA plugin), the
    world group's creation also creates this process's PJRT client as process `rank` of
    `world_size`, finding its peers through the process group's store. The XLA CPU plugin has no
    such collectives: its client stays per process."""
    if not _C._plugin_spans_processes():
        return
    if _C._is_initialized():
        raise RuntimeError(
            "tpu_dist: the tpu device was used before init_process_group, so its PJRT client "
            "cannot join the other processes. Fix: call torch.distributed.init_process_group "
            "before the first use of a tpu device."
        )
    _C._dist_join_processes(root_store, rank, world_size)


def create_backend(dist_opts, backend_opts):
    """The creator c10d calls for every ``tpu_dist`` group (``register_backend(extended_api=True)``)."""
    store = dist_opts.store
    rank = dist_opts.group_rank
    size = dist_opts.group_size
    timeout = dist_opts.timeout
    global_ranks = list(dist_opts.global_ranks_in_group) or list(range(size))
    root = _root_store(store)
    if not dist_opts.global_ranks_in_group and size > 1:
        _join_processes(root, rank, size)
    device = torch.tpu.current_device()
    device_id = _C._device_global_id(device)

    try:
        root.set(f"tpu_dist/peer/{global_ranks[rank]}", f"{socket.gethostname()} {os.getpid()}")
    except Exception:
        pass
    _install_failure_hooks(root, global_ranks[rank])

    # Who is where: every rank's process and device.
    store.set(f"tpu_dist/member/{rank}", f"{process_token()}|{device_id}")
    if rank == 0:
        store.set("tpu_dist/token", uuid.uuid4().hex)
    members = [_get(store, f"tpu_dist/member/{r}", timeout).decode().split("|") for r in range(size)]
    members = [(m[0], int(m[1])) for m in members]
    in_process = all(m[0] == members[0][0] for m in members)
    transport = _choose_transport(members, in_process)

    # A Gloo group for the CPU side (and, for the host transport, the data itself).
    gloo = dist.ProcessGroupGloo(dist.PrefixStore("tpu_dist/gloo/", store), rank, size, timeout)
    with _lock:
        _gloo_of_group[(dist_opts.group_id, rank)] = gloo

    if transport == "device":
        token = f"{dist_opts.group_id}/{_get(store, 'tpu_dist/token', timeout).decode()}"
        through_store = not in_process or os.environ.get(RENDEZVOUS_ENV, "").strip().lower() == "store"
        return _C._dist_device_backend(rank, size, _seconds(timeout), device, [m[1] for m in members], token,
                                       store if through_store else None)
    check = os.environ.get(CHECK_ENV, "1").strip() != "0"
    return _C._dist_host_backend(rank, size, _seconds(timeout), gloo, root, global_ranks, check)


def attach_cpu_backend(pg, group_name):
    """Gives a group made with ``tpu_dist`` alone a CPU backend (its Gloo group), so CPU tensors
    and object collectives (``all_gather_object``, ``broadcast_object_list``, DCP's metadata)
    run on the host, as with ``"cpu:gloo,tpu:tpu_dist"``."""
    if not isinstance(pg, dist.ProcessGroup):
        return
    with _lock:
        gloo = _gloo_of_group.pop((group_name, pg.rank()), None)
    if gloo is None:
        return
    if torch.device("cpu") in pg._device_types:
        return
    desc = pg.group_desc
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
    # The group's name and description live on its backends: give them to the new one too.
    pg._set_group_name(group_name)
    pg._set_group_desc(desc)


def _wrap_group_creation():
    """After c10d creates a group, attach the CPU side of its tpu_dist backend."""
    original = c10d._new_process_group_helper
    if getattr(original, "_tpu_dist_wrapped", False):
        return

    def create(*args, **kwargs):
        pg, prefix_store = original(*args, **kwargs)
        group_name = kwargs.get("group_name", args[5] if len(args) > 5 else None)
        if group_name is not None:
            attach_cpu_backend(pg, group_name)
        return pg, prefix_store

    create._tpu_dist_wrapped = True
    c10d._new_process_group_helper = create


def register():
    """Registers ``tpu_dist`` with torch.distributed (idempotent)."""
    if "tpu_dist" not in dist.Backend.backend_list:
        # A list, not a string: older PyTorch parsed a device string character by character.
        dist.Backend.register_backend("tpu_dist", create_backend, extended_api=True, devices=["tpu"])
    dist.Backend.default_device_backend_map["tpu"] = "tpu_dist"
    _wrap_group_creation()


def transport_of(group=None):
    """The transport ('device' or 'host') of ``group``'s tpu_dist backend."""
    pg = group or c10d._get_default_group()
    return _C._dist_transport(pg._get_backend(torch.device("tpu")))
