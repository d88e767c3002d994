"""A step's metadata as one int32 buffer: filled on the host, uploaded once, unpacked on the device.

A ``Layout`` is an ordered list of named sections, each int32 or float32 (carried as its bits)
with a fixed shape. The host gets NumPy views into a fresh buffer to fill; the device gets
views into the uploaded tensor (slices, a bitcast for float sections, reshapes), which a
captured program reads as part of its computation. The layout (names, dtypes, shapes) is part
of a program's bucket key, so the same layout always means the same offsets.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

_KINDS = {"i32": (np.int32, torch.int32), "f32": (np.float32, torch.float32)}


@dataclass(frozen=True)
class Section:
    name: str
    kind: str  # "i32" or "f32"
    shape: tuple

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Layout:
    def __init__(self, sections):
        self.sections = tuple(sections)
        self.offsets = {}
        offset = 0
        for s in self.sections:
            if s.kind not in _KINDS:
                raise ValueError(f"section {s.name!r}: kind must be i32 or f32, got {s.kind!r}")
            if s.name in self.offsets:
                raise ValueError(f"section {s.name!r} appears twice")
            self.offsets[s.name] = offset
            offset += s.size
        # At least one element, so an empty layout still uploads a tensor.
        self.total = max(offset, 1)
        self.key = tuple((s.name, s.kind, tuple(s.shape)) for s in self.sections)

    def __contains__(self, name) -> bool:
        return name in self.offsets

    def host_buffer(self):
        """(buffer, {name: writable NumPy view}) for one step."""
        buf = np.zeros(self.total, dtype=np.int32)
        return buf, self._views(buf, lambda flat: flat.view(np.float32))

    def device_views(self, packed: torch.Tensor) -> dict:
        """{name: tensor view} of an uploaded buffer (int32 [total])."""
        return self._views(packed, lambda flat: flat.view(torch.float32))

    def _views(self, buf, as_f32) -> dict:
        views = {}
        for s in self.sections:
            start = self.offsets[s.name]
            flat = buf[start : start + s.size]
            views[s.name] = (as_f32(flat) if s.kind == "f32" else flat).reshape(s.shape)
        return views


def upload(buffer: np.ndarray, device) -> torch.Tensor:
    """The step's one host-to-device transfer."""
    return torch.from_numpy(buffer).to(device)
