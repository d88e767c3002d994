"""Streams and events of torch.tpu.

PJRT orders device work by data dependencies, so every stream of a device shares one queue:
results never depend on the stream used, and synchronizing a stream or event waits for the
device's work recorded before it. Events record host-observed completion times for
elapsed_time()."""

import torch

from ._device import _get_device_index


def _tpu_device(device):
    return torch.device("tpu", _get_device_index(device))


class Stream(torch.Stream):
    """A tpu stream (see the module note on ordering)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        return super().__new__(cls, device=_tpu_device(device), priority=priority, **kwargs)


class Event:
    """A tpu event: wraps a torch.Event on a tpu device (torch.Event's methods check the exact
    type of the other event, so this forwards instead of subclassing)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, device=None):
        self._event = torch.Event(
            device=_tpu_device(device),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )

    @property
    def device(self):
        return self._event.device

    def record(self, stream=None):
        if stream is None:
            self._event.record()
        else:
            self._event.record(stream)

    def wait(self, stream=None):
        if stream is None:
            self._event.wait()
        else:
            self._event.wait(stream)

    def query(self):
        return self._event.query()

    def synchronize(self):
        self._event.synchronize()

    def elapsed_time(self, end_event):
        """Milliseconds between this event and `end_event` (host-observed completion times)."""
        other = end_event._event if isinstance(end_event, Event) else end_event
        return self._event.elapsed_time(other)

    def __repr__(self):
        return f"torch.tpu.Event(device={self.device})"


def current_stream(device=None):
    return torch.accelerator.current_stream(_tpu_device(device))


def default_stream(device=None):
    s = torch.accelerator.current_stream(_tpu_device(device))
    return torch.Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


class stream:
    """Context manager selecting a stream (accepted for API compatibility)."""

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
