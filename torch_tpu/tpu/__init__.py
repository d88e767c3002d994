"""``torch.tpu``: the device module of the ``tpu`` device, shaped like ``torch.cuda``."""

import torch

from .. import _C
from ._device import (
    _get_device_index,
    current_device,
    device,
    device_count,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
)
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_sources,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import Event, Stream, StreamContext, current_stream, default_stream, stream
from . import pallas  # custom JAX / Pallas kernels (JAX imported lazily)


def get_amp_supported_dtype():
    """The dtypes torch.autocast("tpu") may cast to."""
    return [torch.bfloat16, torch.float16]


def compilation_cache_stats():
    """Statistics of the compilation cache shared by all eager modes and torch.compile.

    ``hits`` (lookups answered without compiling: per-op programs, fused graphs and executables
    in memory), ``misses``, ``compiles``, ``compile_seconds``, ``entries`` (executables in
    memory), ``executions``; the disk tier's ``disk_loads``, ``disk_load_seconds``,
    ``disk_writes``, ``disk_rejected`` (corrupt or foreign entries replaced),
    ``disk_host_mismatch`` (entries compiled on a CPU with instruction-set extensions this one
    lacks, recompiled instead of loaded), ``disk_evicted``,
    ``disk_bytes`` and ``disk_dir``; and Fused Eager's ``fused_ops_recorded``,
    ``fused_graphs_run``, ``fused_graph_compiles``, ``fused_graph_replays``,
    ``fused_flushes_by_repeat``, ``fused_flushes_by_size`` and ``fused_split_reads`` (flushes
    for a host read run as the read value's dependencies, then the rest); ``donated_buffers`` (input
    buffers that fused graphs and compiled graphs reused for their outputs).
    """
    return dict(_C._compilation_cache_stats())


def clear_compilation_cache(disk: bool = False):
    """Forgets every compiled program in memory; with ``disk=True`` also deletes the disk
    tier's entries (``TORCH_TPU_CACHE_DIR``)."""
    _C._clear_compilation_cache(disk)


def _is_in_bad_fork():
    """True in a process forked after its parent used the tpu device (as torch.cuda's): its first
    device use raises RuntimeError; use the 'spawn' start method instead."""
    return _C._is_in_bad_fork()


__all__ = [
    "Event",
    "Stream",
    "clear_compilation_cache",
    "compilation_cache_stats",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "pallas",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "mem_get_info",
    "memory_sources",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "stream",
    "StreamContext",
    "synchronize",
]
