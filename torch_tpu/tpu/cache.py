"""``torch.tpu.compilation_cache_stats`` and ``torch.tpu.clear_compilation_cache``."""

from .. import _C


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
    for a host read run as the read value's dependencies, then the rest); the fuse advisor's
    ``fused_patterns_timed`` (loop iteration patterns timed fused against op by op),
    ``fused_patterns_strict`` (those found faster op by op, which then run in Strict mode),
    ``fused_patterns_pending`` (steady loop patterns still on their way to a verdict: counting
    clean iterations or being timed; a gauge) and ``fused_ops_run_strictly`` (Fused-mode ops it
    ran strictly, trials included); ``donated_buffers`` (input
    buffers that programs - per-op, fused graphs, compiled graphs, collectives - took over for
    their outputs, including one the program before is still writing); ``host_reads`` (blocking
    device-to-host reads: ``.item()``, ``.cpu()``, device checks) and ``host_reads_in_place``
    (those copied straight from the buffer's memory, where device memory is host memory: the
    XLA CPU plugin).
    """
    return dict(_C._compilation_cache_stats())


def clear_compilation_cache(disk: bool = False):
    """Forgets every compiled program in memory; with ``disk=True`` also deletes the disk
    tier's entries (``TORCH_TPU_CACHE_DIR``)."""
    _C._clear_compilation_cache(disk)
