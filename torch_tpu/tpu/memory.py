"""Memory statistics of torch.tpu: bytes of live tpu storages per device."""

from .. import _C
from ._device import _get_device_index


def memory_stats(device=None):
    """Nested statistics like torch.cuda.memory_stats, flattened to "key.all.current" names."""
    stats = _C._memory_stats(_get_device_index(device))
    flat = {}
    for group, values in stats.items():
        for metric, value in values.items():
            flat[f"{group}.all.{metric}"] = value
    return dict(sorted(flat.items()))


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
    """Releases cached device buffers of host scalars (tensor memory is freed with the tensors)."""
    _C._empty_cache()
