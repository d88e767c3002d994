"""A Python step function as one device program per key, captured once and replayed from C++
(a serving engine's step per bucket, torch.tpu.optimizers' whole training step).

The first call for a key runs the step function in Fused Eager capture mode: every op - autograd's
backward ones too - goes through its one lowering into a single recorded graph, which is compiled
through the shared program cache and run; that call's results are real. The capture
(``torch_tpu._C._capture_begin/_capture_end``, the same mechanism as ``torch.compile``'s graphs)
also describes how the program's parameters map to the step's input tensors (a serving step's
packed metadata, KV caches and per-slot state; a training step's batch, parameters, optimizer
state and buffers), which the program updates in place (their buffers donated). Tensors the step
only reads are held by the program as constants. Every later call for the key is one call into
C++ (``_CompiledGraph.run``): no Python per op, no dispatch, no recording.

``compile_in_background(key, fn, inputs)`` records ``fn`` for ``key`` the same way but runs
nothing: the program compiles on a worker thread (``_C._capture_end_in_background``) while the
caller keeps working, and ``background_state(key)`` says when it is ready; the capture ``run``
then makes for ``key`` finds it compiled. A serving engine uses this to give a step shape its own
program without stopping the requests it is serving.

A step function must depend only on its key (shapes, variant) and its input tensors' data - never
on a host value of the step. If a capture cannot be replayed (an op read device data on the host,
drew random numbers, or fell back to the CPU), that key is recorded again on every call (still one
compiled program, with the per-op recording cost) and a warning names the reason once.
"""

import atexit
import functools
import threading
import time
import warnings

import torch

from . import _C
from .execution_mode import EagerMode, mode


_EXIT_WAIT_S = 60.0  # bounds the exit's wait for a compile in flight


@functools.lru_cache(maxsize=None)
def _wait_for_background_compiles_at_exit():
    """Registers (once) an exit handler that lets background compiles finish: the worker thread
    must not be inside the plugin's compiler while the process tears the plugin's static state
    down. Bounded: a stuck compile does not hang the exit."""

    def wait():
        waiter = threading.Thread(target=_C._wait_background_compiles, daemon=True)
        waiter.start()
        waiter.join(_EXIT_WAIT_S)

    atexit.register(wait)


class CapturedPrograms:
    """The captured programs of one step function owner (an engine, a trainer), by key."""

    def __init__(self, label: str):
        self.label = label
        self._graphs = {}
        self._rerecord = set()
        self._background = {}  # key -> _C._BackgroundProgram, or None when it could not be recorded
        # capture_seconds: time the callers spent in captures (recording, and compiling unless the
        # program was compiled in the background or came from the disk cache).
        self.stats = {"captures": 0, "replays": 0, "rerecorded_steps": 0, "capture_seconds": 0.0}

    def __len__(self):
        return len(self._graphs) + len(self._rerecord)

    def __contains__(self, key):
        return key in self._graphs or key in self._rerecord

    def keys(self):
        return list(self._graphs) + list(self._rerecord)

    def clear(self):
        """Drops every program (e.g. after the weights were replaced: programs hold them)."""
        self._graphs.clear()
        self._rerecord.clear()
        self._background.clear()

    def run(self, key, fn, inputs):
        """``fn(*inputs)`` -> list of output tensors, as one program for ``key``."""
        graph = self._graphs.get(key)
        if graph is not None:
            out = graph.run(inputs)
            if out is not None:
                self.stats["replays"] += 1
                return out
            # The inputs' layout changed (a state tensor was reallocated): capture again.
        if key in self._rerecord:
            self.stats["rerecorded_steps"] += 1
            with mode(EagerMode.FUSED):
                return list(fn(*inputs))
        return self._capture(key, fn, inputs)

    def compile_in_background(self, key, fn, inputs) -> None:
        """Records ``fn(*inputs)`` as ``key``'s program and compiles it on a worker thread; nothing
        runs and no input changes. Its results are not available (the caller computed them
        another way)."""
        if key in self or key in self._background:
            return
        _wait_for_background_compiles_at_exit()
        with mode(EagerMode.FUSED):
            _C._capture_begin(True, device_of(inputs))
            outs = None
            try:
                outs = fn(*inputs)  # alive until the end: what it returns is part of the program
            finally:
                job = _C._capture_end_in_background()  # on an error too: drops what was recorded
            del outs
            self._background[key] = job

    def background_state(self, key):
        """None (never asked), "pending", "ready" (``run`` captures it without compiling), or
        "failed: ..." / "unrecordable" (``run`` captures it the usual way, and reports why)."""
        if key not in self._background:
            return None
        job = self._background[key]
        return "unrecordable" if job is None else job.state

    def _capture(self, key, fn, inputs):
        start = time.perf_counter()
        job = self._background.get(key)
        if job is not None:
            job.wait()  # its compile is under way: finishing it is quicker than another
        with mode(EagerMode.FUSED):
            _C._capture_begin(True, device_of(inputs))
            try:
                outs = list(fn(*inputs))
            except BaseException:
                _C._capture_end([], [])
                raise
            graph = _C._capture_end(list(inputs), outs)
        self.stats["captures"] += 1
        self.stats["capture_seconds"] += time.perf_counter() - start
        if graph.replayable:
            self._graphs[key] = graph
        else:
            self._rerecord.add(key)
            warnings.warn(
                f"{self.label}: a step program cannot be replayed ({graph.reason}); it is recorded "
                "again on every step (still one compiled program). Check torch_tpu.fallback_counts() "
                "for ops that run on the CPU.",
                stacklevel=3,
            )
        return outs


def device_of(inputs) -> int:
    """The device the capture records on: the first tpu input's (-1: the current device)."""
    return next((t.device.index for t in inputs if isinstance(t, torch.Tensor) and t.device.type == "tpu"
                 and t.device.index is not None), -1)
