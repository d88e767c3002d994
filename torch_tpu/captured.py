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

A step function must depend only on its key (shapes, variant) and its input tensors' data - never
on a host value of the step. If a capture cannot be replayed (an op read device data on the host,
drew random numbers, or fell back to the CPU), that key is recorded again on every call (still one
compiled program, with the per-op recording cost) and a warning names the reason once.
"""

import warnings

from . import _C
from .execution_mode import EagerMode, mode


class CapturedPrograms:
    """The captured programs of one step function owner (an engine, a trainer), by key."""

    def __init__(self, label: str):
        self.label = label
        self._graphs = {}
        self._rerecord = set()
        self.stats = {"captures": 0, "replays": 0, "rerecorded_steps": 0}

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

    def _capture(self, key, fn, inputs):
        with mode(EagerMode.FUSED):
            _C._capture_begin(True)
            try:
                outs = list(fn(*inputs))
            except BaseException:
                _C._capture_end([], [])
                raise
            graph = _C._capture_end(list(inputs), outs)
        self.stats["captures"] += 1
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
