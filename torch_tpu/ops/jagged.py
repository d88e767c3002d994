"""Padding helpers of jagged nested tensors (``torch.nested`` with ``layout=torch.jagged``).

``align_jagged_to_multiple`` pads the flat values buffer with trailing rows up to a multiple of
``multiple`` (offsets unchanged), so batches of varying total length share a few buffer shapes
- a few compiled programs - and tile-sized matrix products; ``strip_jagged_padding`` drops
those rows again (a view; give ``valid_tokens`` when the host knows it, to avoid reading the
offsets back from the device)."""

import torch
from torch.nested._internal.nested_tensor import nested_view_from_values_offsets


def _check(name, nt):
    if not (isinstance(nt, torch.Tensor) and nt.is_nested and nt.layout == torch.jagged):
        raise TypeError(f"{name} expects a nested tensor with layout=torch.jagged")


def align_jagged_to_multiple(nt, multiple: int = 128, padding_value=0.0):
    """``nt`` with its values buffer padded to a multiple of ``multiple`` rows."""
    _check("align_jagged_to_multiple", nt)
    if multiple < 1:
        raise ValueError(f"align_jagged_to_multiple: multiple must be >= 1, got {multiple}")
    values = nt.values()
    extra = -values.size(0) % multiple
    if extra == 0:
        return nt
    padding = values.new_full((extra, *values.shape[1:]), padding_value)
    return nested_view_from_values_offsets(torch.cat([values, padding]), nt.offsets())


def strip_jagged_padding(nt, valid_tokens=None):
    """``nt`` without values rows past its last offset (``valid_tokens`` of them remain)."""
    _check("strip_jagged_padding", nt)
    offsets = nt.offsets()
    if valid_tokens is None:
        valid_tokens = int(offsets[-1].item()) if offsets.numel() else 0
    values = nt.values()
    if values.size(0) == valid_tokens:
        return nt
    if not 0 <= valid_tokens <= values.size(0):
        raise ValueError(f"strip_jagged_padding: valid_tokens={valid_tokens} is outside the "
                         f"values buffer's {values.size(0)} rows")
    return nested_view_from_values_offsets(values[:valid_tokens], offsets)
