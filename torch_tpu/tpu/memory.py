"""Memory statistics of torch.tpu: bytes of live tpu storages per device."""

from .. import _C
from ._device import _get_device_index


def memory_stats(device=None):
    """Nested statistics like torch.cuda.memory_stats, flattened to "key.all.current" names.

    ``"source"`` says where the byte figures come from: ``"pjrt"`` when the plugin reports
    device memory statistics (GPU, TPU), else ``"allocator"`` (torch_tpu's count of live tpu
    storages; the CPU plugin). ``memory_sources()`` gives the source of each figure."""
    index = _get_device_index(device)
    stats = _C._memory_stats(index)
    sources = stats.pop("source")
    flat = {}
    for group, values in stats.items():
        for metric, value in values.items():
            flat[f"{group}.all.{metric}"] = value
    flat["source"] = sources["allocated_bytes.current"]
    return dict(sorted(flat.items()))


def memory_sources(device=None):
    """Where each memory figure comes from: ``"pjrt"`` (the plugin's device statistics),
    ``"allocator"`` (torch_tpu's live-storage counters) or ``"host"`` (the host's memory, for
    totals on the CPU plugin). Keys: ``allocated_bytes.current`` (memory_allocated),
    ``allocated_bytes.peak`` (max_memory_allocated), ``reserved_bytes.current``
    (memory_reserved) and ``total_memory`` (mem_get_info, get_device_properties)."""
    index = _get_device_index(device)
    sources = dict(_C._memory_stats(index)["source"])
    sources["total_memory"] = _C._mem_get_info(index)[2]
    return sources


def mem_get_info(device=None):
    """(free, total) bytes of the device, like torch.cuda.mem_get_info: the plugin's memory
    limit and bytes in use when it reports them, else the host's available and physical memory."""
    free, total, _source = _C._mem_get_info(_get_device_index(device))
    return free, total


def memory_allocated(device=None):
    """Bytes held by live tpu tensors' storages on the device."""
    return _C._memory_stats(_get_device_index(device))["allocated_bytes"]["current"]


def max_memory_allocated(device=None):
    return _C._memory_stats(_get_device_index(device))["allocated_bytes"]["peak"]


def memory_reserved(device=None):
    """torch_tpu keeps no allocator cache of its own, so reserved equals allocated."""
    return _C._memory_stats(_get_device_index(device))["reserved_bytes"]["current"]


def max_memory_reserved(device=None):
    return _C._memory_stats(_get_device_index(device))["reserved_bytes"]["peak"]


def reset_peak_memory_stats(device=None):
    _C._reset_peak_memory_stats(_get_device_index(device))


def reset_accumulated_memory_stats(device=None):
    _C._reset_accumulated_memory_stats(_get_device_index(device))


def empty_cache():
    """Runs pending work, then releases cached device buffers of host scalars (tensor memory is
    freed with the tensors)."""
    _C._flush_pending()
    _C._empty_cache()


def set_per_process_memory_fraction(fraction, device=None):
    """Caps what this process may hold in tpu tensors on ``device`` at ``fraction`` (0 < f <= 1)
    of its total memory (``mem_get_info``: the plugin's figure, or the host's RAM on the CPU
    plugin), like torch.cuda.set_per_process_memory_fraction. An allocation past it raises
    ``torch.OutOfMemoryError`` before anything is allocated. ``TORCH_TPU_MEMORY_LIMIT`` (bytes,
    or 512M / 8G) caps every device; the lower cap wins."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        raise TypeError(f"set_per_process_memory_fraction: fraction must be a number, got {type(fraction).__name__}")
    if not 0 < fraction <= 1:
        raise ValueError(f"set_per_process_memory_fraction: fraction must be in (0, 1], got {fraction}")
    _C._set_memory_fraction(_get_device_index(device), float(fraction))


def get_per_process_memory_fraction(device=None):
    """The fraction set by set_per_process_memory_fraction for ``device`` (1.0 when none)."""
    return _C._memory_fraction(_get_device_index(device))
