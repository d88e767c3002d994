"""Meshes of ranks for kernels with collectives: ``get_pallas_mesh`` and the shapes around it.

A ``jax_op(..., mesh=get_pallas_mesh(...))`` function is written as the original TorchTPU asks:
it takes *global* arrays (each rank's tensor is its shard) and does its work in one
``jax.shard_map`` over every axis of the mesh, whose body - one rank's program, with JAX
collectives (``psum``, ``all_gather``, ``ppermute``, ``all_to_all``, ``psum_scatter``,
``axis_index``) - runs inside each rank's program on tpu_dist's device transport
(``_rank_program``). Mesh position ``i`` (row-major) is rank ``i`` of the world group.

The mesh is a ``jax.sharding.AbstractMesh``: it has axis names and sizes but no devices, since
the devices belong to torch_tpu's plugin, not to JAX, which only traces here."""

import math

import torch


def _world(name, process_group):
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(f"{name}: torch.distributed is not initialized; call "
                           "dist.init_process_group('tpu_dist') (or run the ranks with "
                           "torch_tpu.distributed.run_in_threads) first")
    world = dist.get_world_size()
    if process_group is not None and dist.get_world_size(process_group) != world:
        raise ValueError(f"{name}: a mesh spans the whole world ({world} ranks); the process group "
                         f"given has {dist.get_world_size(process_group)}")
    return world


def get_pallas_mesh(axis_names, mesh_shape=None, process_group=None):
    """A JAX mesh whose positions are the job's ranks in rank order, for ``jax_op(mesh=...)``
    and the ``jax.shard_map`` inside the kernel. ``axis_names``: a name or a sequence of names;
    ``mesh_shape``: the size of each axis (its product is the world size; required with more
    than one axis)."""
    from ._jax_bridge import jax

    world = _world("get_pallas_mesh", process_group)
    names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"get_pallas_mesh: axis_names must be a non-empty name or sequence of names, "
                         f"got {axis_names!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"get_pallas_mesh: axis names must differ, got {names}")
    if mesh_shape is None:
        if len(names) > 1:
            raise ValueError(f"get_pallas_mesh: {len(names)} axes {names} need a mesh_shape (the size of "
                             "each axis)")
        shape = (world,)
    else:
        shape = tuple(int(s) for s in mesh_shape)
        if len(shape) != len(names):
            raise ValueError(f"get_pallas_mesh: mesh_shape {shape} has {len(shape)} axes but axis_names "
                             f"{names} has {len(names)}; give one size per axis")
        if math.prod(shape) != world or any(s < 1 for s in shape):
            raise ValueError(f"get_pallas_mesh: mesh_shape {shape} holds {math.prod(shape)} positions but "
                             f"the world has {world} ranks; the mesh must cover the world exactly")
    return jax().sharding.AbstractMesh(shape, names)


def axis_sizes(mesh):
    """{axis name: size} of a JAX mesh (an AbstractMesh or a concrete Mesh)."""
    return dict(zip(mesh.axis_names, mesh.axis_sizes))


def spec_axes(spec, ndim):
    """A partition spec (a PartitionSpec, tuple or None) as, per dimension, the tuple of mesh axes
    it is split over (``()``: not split) - JAX's ``P("x", None)`` and ``P(("a", "b"))`` alike."""
    spec = tuple(spec or ())
    return tuple(() if e is None else ((e,) if isinstance(e, str) else tuple(e))
                 for e in spec + (None,) * (ndim - len(spec)))


def spec_factor(shape, spec, sizes, who):
    """Per dimension of ``shape``, how many shards the partition spec cuts it into."""
    if len(tuple(spec or ())) > len(shape):
        raise ValueError(f"{who}: partition spec {tuple(spec)} has more entries than the tensor has dimensions "
                         f"({list(shape)})")
    factors = []
    for axes in spec_axes(spec, len(shape)):
        for a in axes:
            if a not in sizes:
                raise ValueError(f"{who}: partition spec {spec} names axis {a!r}, which the mesh "
                                 f"(axes {tuple(sizes)}) does not have")
        factors.append(math.prod(sizes[a] for a in axes))
    return factors


def global_shape(local, spec, sizes, who):
    """The global shape of a rank's shard ``local`` under partition spec ``spec``."""
    return tuple(d * f for d, f in zip(local, spec_factor(local, spec, sizes, who)))


def group_backend(name, mesh):
    """The tpu_dist backend of the world group, over whose ranks the kernel's collectives run."""
    import torch.distributed.distributed_c10d as c10d

    world = _world(name, None)
    if math.prod(mesh.axis_sizes) != world:
        raise ValueError(f"{name}: the mesh has {math.prod(mesh.axis_sizes)} positions but the world has "
                         f"{world} ranks; build it with torch.tpu.pallas.get_pallas_mesh")
    return c10d._get_default_group()._get_backend(torch.device("tpu"))
