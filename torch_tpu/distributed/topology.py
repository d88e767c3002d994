"""``topology_aware_mesh``: the rank layout of a device mesh that follows the hardware.

Returns an int64 CPU tensor of global ranks with shape ``mesh_shape``, to pass as
``DeviceMesh(device_type, mesh=...)`` (or ``init_device_mesh``'s order). Every rank computes the
same layout from the devices' own descriptions, all-gathered over the default process group
(which must be initialised):

* ranks are grouped by the slice their device reports (``slice_index``; a job whose devices
  report none is one slice). With several slices, one logical axis is split across them - the
  data-centre network (DCN) axis: ``dcn_mesh_shape`` says how (same rank as ``mesh_shape``,
  product = slice count, dividing it elementwise), or by default the first axis (the least
  network-intensive, by the caller's ordering) whose size the slice count divides;
* inside a slice, ranks are ordered by their device's physical coordinates (``coords``, then
  ``core_on_chip``), then by PJRT device id, then by rank, and fill the per-slice (ICI) shape row-major, so
  the last, most network-intensive axis joins physical neighbours.

Devices that report no coordinates (the XLA CPU and CUDA plugins) are ordered by device id.
``allow_split_physical_axes`` and ``contiguous_submeshes`` are accepted for the original's
signature; this row-major placement never splits a physical axis and is contiguous per slice.
"""

import math
import os
import socket

import torch


def _describe_local_device():
    from .. import _C

    index = torch.tpu.current_device()
    attrs = _C._device_int_attributes(index)
    slice_index = attrs.get("slice_index")
    return {
        "slice": slice_index[0] if slice_index else None,
        "coords": tuple(reversed(attrs.get("coords", ()))),  # outermost physical axis first
        "core": attrs.get("core_on_chip", [0])[0],
        "id": _C._device_global_id(index),
        "process": (socket.gethostname(), os.getpid()),  # ids are per client: per process on some plugins
    }


def _slice_axes(mesh_shape, num_slices, dcn_mesh_shape):
    if dcn_mesh_shape is None:
        if num_slices == 1:
            return (1,) * len(mesh_shape)
        for axis, size in enumerate(mesh_shape):
            if size % num_slices == 0:
                return tuple(num_slices if a == axis else 1 for a in range(len(mesh_shape)))
        raise ValueError(f"topology_aware_mesh: no axis of mesh_shape {tuple(mesh_shape)} can be split "
                         f"across the job's {num_slices} slices; pass dcn_mesh_shape")
    dcn = tuple(int(d) for d in dcn_mesh_shape)
    if len(dcn) != len(mesh_shape):
        raise ValueError(f"topology_aware_mesh: dcn_mesh_shape {dcn} must have as many axes as mesh_shape "
                         f"{tuple(mesh_shape)}")
    if math.prod(dcn) != num_slices:
        raise ValueError(f"topology_aware_mesh: dcn_mesh_shape {dcn} multiplies to {math.prod(dcn)}, but "
                         f"the job spans {num_slices} slice(s)")
    if any(d < 1 or m % d for m, d in zip(mesh_shape, dcn)):
        raise ValueError(f"topology_aware_mesh: dcn_mesh_shape {dcn} must divide mesh_shape "
                         f"{tuple(mesh_shape)} axis by axis")
    return dcn


def layout_from_devices(mesh_shape, devices, dcn_mesh_shape=None):
    """The layout for ``devices`` (per global rank: slice, coords, core, id), as described above."""
    mesh_shape = tuple(int(m) for m in mesh_shape)
    if math.prod(mesh_shape) != len(devices):
        raise ValueError(f"topology_aware_mesh: mesh_shape {mesh_shape} has {math.prod(mesh_shape)} "
                         f"positions, but the world has {len(devices)} ranks")
    reported = {d["slice"] is not None for d in devices}
    if len(reported) > 1:
        raise RuntimeError("topology_aware_mesh: only some ranks' devices report a slice index")
    owners = [(d.get("process"), d["id"]) for d in devices]
    if len(set(owners)) != len(owners):
        raise RuntimeError(f"topology_aware_mesh: ranks share PJRT devices (device ids {[d['id'] for d in devices]}); "
                           "give each rank its own device (torch.tpu.set_device(LOCAL_RANK))")
    slices = sorted({d["slice"] for d in devices}, key=lambda s: -1 if s is None else s)
    dcn = _slice_axes(mesh_shape, len(slices), dcn_mesh_shape)
    ici = tuple(m // d for m, d in zip(mesh_shape, dcn))
    members = []
    for s in slices:
        ranks = [r for r, d in enumerate(devices) if d["slice"] == s]
        ranks.sort(key=lambda r: (devices[r]["coords"], devices[r]["core"], devices[r]["id"]))
        if len(ranks) != math.prod(ici):
            raise ValueError(f"topology_aware_mesh: slice {s} has {len(ranks)} ranks, but the per-slice "
                             f"shape {ici} needs {math.prod(ici)}")
        members.append(ranks)
    layout = torch.empty(mesh_shape, dtype=torch.int64)
    for position in torch.cartesian_prod(*[torch.arange(m) for m in mesh_shape]).reshape(-1, len(mesh_shape)).tolist():
        outer = [p // i for p, i in zip(position, ici)]
        inner = [p % i for p, i in zip(position, ici)]
        layout[tuple(position)] = members[_ravel(outer, dcn)][_ravel(inner, ici)]
    return layout


def _ravel(index, shape):
    flat = 0
    for i, n in zip(index, shape):
        flat = flat * n + i
    return flat


def topology_aware_mesh(device_type, mesh_shape, *, dcn_mesh_shape=None, allow_split_physical_axes=False,
                        contiguous_submeshes=False):
    """An int64 tensor of global ranks with shape ``mesh_shape`` (see the module docstring)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("topology_aware_mesh needs an initialised process group: call "
                           "torch.distributed.init_process_group() first")
    if device_type != "tpu":
        raise ValueError(f"topology_aware_mesh lays out tpu devices, got device_type={device_type!r}")
    devices = [None] * dist.get_world_size()
    dist.all_gather_object(devices, _describe_local_device())
    return layout_from_devices(mesh_shape, devices, dcn_mesh_shape)
