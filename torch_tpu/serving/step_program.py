"""A serving step as one device program per bucket, captured once and replayed from C++.

The first step of a bucket runs the engine's step function (input preparation, model forward,
logits, sampler, state updates) in Fused Eager capture mode: every op goes through its one
lowering into a single recorded graph, which is compiled through the shared program cache and
run - that step's results are real. The capture (``torch_tpu._C._capture_begin/_capture_end``,
the same mechanism as ``torch.compile``'s graphs) also describes how the program's parameters
map to the step's input tensors: the packed metadata, the KV caches and the per-slot state,
which the program updates in place (their buffers donated). Weights and other tensors the step
only reads are held by the program as constants. Every later step of the bucket is one call
into C++ (``_CompiledGraph.run``): no Python per op, no dispatch, no recording.

A step function must depend only on its bucket (shapes, variant) and its input tensors' data -
never on a host value of the step. If a capture cannot be replayed (an op read device data on
the host, or fell back to the CPU), that bucket is recorded again on every step (still one
compiled program, with the per-op recording cost) and a warning names the reason once.
"""

import warnings

from .. import _C
from ..execution_mode import EagerMode, mode


class StepPrograms:
    """The captured programs of one engine, by bucket key."""

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
                f"{self.label}: a step program cannot be replayed ({graph.reason}); its bucket is "
                "recorded again on every step. Check torch_tpu.fallback_counts() for ops that run on "
                "the CPU.",
                stacklevel=3,
            )
        return outs
