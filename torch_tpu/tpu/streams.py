"""Streams and events of torch.tpu.

PJRT orders device work by data dependencies, so every stream of a device shares one queue:
results never depend on the stream used, and synchronizing a stream or event waits for the
device's work recorded before it. Events record host-observed completion times for
elapsed_time()."""

import torch

from .. import _C
from ._device import _get_device_index


def _tpu_device(device):
    return torch.device("tpu", _get_device_index(device))


class Stream(torch.Stream):
    """A tpu stream (see the module note on ordering)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        return super().__new__(cls, device=_tpu_device(device), priority=priority, **kwargs)


class Event(torch.Event):
    """A tpu event: a ``torch.Event`` on a tpu device (FSDP2 and ``torch.Stream.wait_event``
    need a real one). Recording captures the device's outstanding work; ``elapsed_time``
    reports host-observed completion times."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, device=None):
        return super().__new__(
            cls,
            device=_tpu_device(device),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, device=None):
        pass

    def elapsed_time(self, end_event):
        """Milliseconds between this event and `end_event` (host-observed completion times)."""
        # torch.Event.elapsed_time accepts only the exact base type as `end_event`.
        if not isinstance(end_event, torch.Event):
            raise TypeError(f"expected a torch.Event, got {type(end_event).__name__}")
        return _C._event_elapsed_ms(self.event_id, end_event.event_id)

    def __repr__(self):
        return f"torch.tpu.Event(device={self.device})"


def current_stream(device=None):
    return torch.accelerator.current_stream(_tpu_device(device))


def default_stream(device=None):
    s = torch.accelerator.current_stream(_tpu_device(device))
    return torch.Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


class StreamContext:
    """Context manager selecting a stream (torch.cuda.StreamContext's shape; ``stream(s)`` makes
    one). None leaves the current stream as it is."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is not None:
            self.prev = torch.accelerator.current_stream(self.stream.device)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.accelerator.set_stream(self.prev)
        return False


def stream(stream):
    """``with torch.tpu.stream(s):`` - the current stream is ``s`` inside the block."""
    return StreamContext(stream)


def set_stream(stream):
    """Makes ``stream`` the current stream of its device (None: no change), as
    ``torch.cuda.set_stream``."""
    if stream is not None:
        torch.accelerator.set_stream(stream)
