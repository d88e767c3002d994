"""Where a step's host time goes, layer by layer, from one torch.profiler session.

The profile is taken with ``TpuProfilerConfig(host_tracer_level=3)``: besides PyTorch's own op
events and the device programs, the runtime then reports a host span for each layer of our stack
(``csrc/profiler/trace_hooks.h``, ``HostSpan``). This module turns those events into exclusive times
per layer and step:

* threads that issue ops (the step's thread and autograd's device thread) are assumed to take
  turns - the step's thread waits while autograd runs the backward - so their layers add up to the
  step's wall time, and what no event covers is Python and the framework outside ops;
* the launcher thread's PJRT calls run beside them (their own row), as does the device.

Each instant of a step goes to the innermost event open on the issuing threads (the one that
started last: a thread waiting for another holds older events); an instant no event covers is
Python's. So the layers are exclusive times and add up to the wall time.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import defaultdict

STEP_LABEL = "tpu_bench::step"

# Layers of the threads that issue ops, in the order of the stack (top to bottom).
ISSUING_LAYERS = (
    ("python", "Python and framework code outside ops"),
    ("pytorch", "PyTorch: dispatcher, autograd engine, view and metadata ops"),
    ("kernel", "tpu kernels: building the call, wrapping outputs"),
    ("executor", "Strict: signature, program cache lookup, launch push"),
    ("record", "Fused: recording ops into the graph"),
    ("flush", "Fused: closing a graph (key, program lookup, bind)"),
    ("replay", "compiled graphs: matching and binding a replay"),
    ("compile", "compiling programs (XLA) or loading them from disk"),
    ("pjrt_execute", "PJRT Execute called on this thread"),
    ("wait", "waiting for the device (sync, host reads)"),
)
# Our span names (tpu::<name>) that are host work on the thread that reports them.
_SPAN_LAYERS = {"kernel", "executor", "record", "flush", "replay", "wait", "pjrt_execute"}


@dataclasses.dataclass
class Breakdown:
    """Per-step averages (milliseconds) over the profiled steps."""

    steps: int
    wall_ms: float
    layers_ms: dict  # issuing threads' layers: name -> ms per step (ISSUING_LAYERS order)
    launcher_execute_ms: float  # PJRT Execute on the launcher thread
    queue_latency_us: float  # mean time a launch waited in the launch queue
    device_busy_ms: float  # union of the device programs' run times
    programs: float  # device programs per step
    ops: float  # tpu kernels per step
    top_ops: list  # (name, ms per step, calls per step), top-level PyTorch ops by host time
    threads: object = None  # threads.CpuUse of an unprofiled run of the same steps, where measured
    warmup_steps: int = 0  # steps run before the profiled ones (host.warm_up)
    warmup_note: str = ""  # why the loop was profiled before it was steady, if it was

    @property
    def host_bound(self) -> bool:
        return self.device_busy_ms < 0.5 * self.wall_ms

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["host_bound"] = self.host_bound
        d["threads"] = self.threads.as_dict() if self.threads is not None else None
        return d

    def verdict(self) -> str:
        idle = 100.0 * (1.0 - self.device_busy_ms / self.wall_ms) if self.wall_ms > 0 else 0.0
        issuing = {k: v for k, v in self.layers_ms.items() if k != "wait"}
        top = max(issuing, key=issuing.get) if issuing else "python"
        label = dict(ISSUING_LAYERS)[top]
        if self.host_bound:
            return (f"host-bound: the device is idle {idle:.0f}% of the step; the largest host layer is "
                    f"'{top}' ({label}, {self.layers_ms[top]:.2f} ms)")
        return (f"device-bound: the device is busy {100 - idle:.0f}% of the step; host layers overlap it "
                f"(largest: '{top}', {self.layers_ms[top]:.2f} ms)")

    def table(self) -> str:
        def row(name, ms, what):
            share = 100.0 * ms / self.wall_ms if self.wall_ms > 0 else 0.0
            return f"  {name:<14}{ms:>10.3f}{share:>8.1f}%  {what}"

        lines = [f"host time per step: {self.wall_ms:.3f} ms wall, mean of {self.steps} profiled steps",
                 f"  {'layer':<14}{'ms/step':>10}{'share':>9}  what",
                 "  issuing threads (the step's thread, autograd's):"]
        described = dict(ISSUING_LAYERS)
        for name, _ in ISSUING_LAYERS:
            lines.append(row(name, self.layers_ms.get(name, 0.0), described[name]))
        lines.append("  beside them:")
        lines.append(row("launcher", self.launcher_execute_ms, "PJRT Execute on the launcher thread"))
        lines.append(f"  {'queue':<14}{self.queue_latency_us / 1000:>10.3f}{'':>9}  "
                     "mean wait of a launch in the launch queue (latency, not work)")
        lines.append(row("device", self.device_busy_ms, f"device busy ({self.programs:.1f} programs, "
                                                        f"{self.ops:.1f} tpu kernels per step)"))
        if self.top_ops:
            lines.append("  top PyTorch ops by host time (with everything under them):")
            for name, ms, calls in self.top_ops:
                lines.append(f"    {name:<40}{ms:>9.3f} ms {calls:>7.1f} calls/step")
        if self.threads is not None:
            lines.append(self.threads.table())
        lines.append(self.verdict())
        return "\n".join(lines)


@dataclasses.dataclass
class _Event:
    name: str
    start: int
    end: int
    thread: int
    children: int = 0  # total duration of direct children
    top_level_op: bool = False  # no PyTorch op above it

    @property
    def duration(self):
        return self.end - self.start


def analyse(kineto_events, steps: int | None = None) -> Breakdown:
    """Breaks down the profiled steps (``record_function(STEP_LABEL)`` scopes) of a session."""
    step_events, ops, spans, device, launches, launcher = [], [], [], [], [], []
    for e in kineto_events:
        name = e.name()
        kind = str(e.activity_type())
        ev = _Event(name, e.start_ns(), e.end_ns(), e.start_thread_id())
        if name == STEP_LABEL:
            step_events.append(ev)
        elif kind == "cpu_op":
            ops.append(ev)
        elif kind == "privateuse1_runtime" and name.startswith("tpu::"):
            layer = name[len("tpu::"):].split(" ", 1)[0]
            ev.name = layer
            if layer in _SPAN_LAYERS or layer == "compile":
                spans.append(ev)
            elif layer == "launch_queue":
                launches.append(ev)
            elif layer == "launcher_execute":
                launcher.append(ev)
        elif kind == "kernel" and name.startswith("tpu::"):
            device.append(ev)
    if not step_events:
        raise RuntimeError(f"torch_tpu.bench: no '{STEP_LABEL}' scopes in the profile")
    step_events.sort(key=lambda e: e.start)
    n = steps or len(step_events)
    windows = [(s.start, s.end) for s in step_events]
    wall = sum(e - s for s, e in windows)

    def inside(ev):
        return any(s <= ev.start and ev.end <= e for s, e in windows)

    ops = [o for o in ops if inside(o)]
    spans = [s for s in spans if inside(s)]

    # PyTorch's events nest by time on each thread (for the top-level ops below).
    _nest_by_time(step_events + ops)
    layers = _exclusive_layers(ops, spans, windows)
    launcher_ns = sum(min(e, x.end) - max(s, x.start) for x in launcher for s, e in windows
                      if x.start < e and x.end > s)

    queue = [q.duration for q in launches if inside(q)]
    busy = _union_within(device, windows)
    programs = sum(1 for d in device if _overlaps_any(d, windows))
    kernels = sum(1 for s in spans if s.name == "kernel")

    top = defaultdict(lambda: [0, 0])
    for o in ops:
        if o.top_level_op:
            top[o.name][0] += o.duration
            top[o.name][1] += 1
    top_ops = sorted(((k, v[0] / n / 1e6, v[1] / n) for k, v in top.items()), key=lambda t: -t[1])[:8]
    return Breakdown(
        steps=n,
        wall_ms=wall / n / 1e6,
        layers_ms={k: v / n / 1e6 for k, v in layers.items()},
        launcher_execute_ms=launcher_ns / n / 1e6,
        queue_latency_us=(sum(queue) / len(queue) / 1e3) if queue else 0.0,
        device_busy_ms=busy / n / 1e6,
        programs=programs / n,
        ops=kernels / n,
        top_ops=top_ops,
    )


def _exclusive_layers(ops, spans, windows):
    """Each instant of the step windows goes to the innermost open event of the issuing threads:
    the one that started last (threads take turns, so a thread waiting for another - the step's
    thread while autograd's runs the backward - holds older events). An instant no event covers
    is Python's. Returns ns per layer."""
    layers = {name: 0 for name, _ in ISSUING_LAYERS}
    events = sorted([(o.start, o.end, "pytorch") for o in ops] + [(x.start, x.end, x.name) for x in spans])
    for w_start, w_end in windows:
        inside = [e for e in events if e[0] < w_end and e[1] > w_start]
        bounds = sorted({w_start, w_end, *(max(w_start, e[0]) for e in inside),
                         *(min(w_end, e[1]) for e in inside)})
        open_, i = [], 0  # heap of (-start, end, layer): the latest started on top
        for t, t_next in zip(bounds, bounds[1:]):
            while i < len(inside) and max(w_start, inside[i][0]) <= t:
                heapq.heappush(open_, (-inside[i][0], inside[i][1], inside[i][2]))
                i += 1
            while open_ and open_[0][1] <= t:
                heapq.heappop(open_)
            # An event that ended under a later one stays in the heap until it is on top.
            layers[open_[0][2] if open_ else "python"] += t_next - t
    return layers


def _nest_by_time(events):
    """Gives each event its direct children's total duration (per thread); returns the top level."""
    tops = []
    by_thread = defaultdict(list)
    for e in events:
        by_thread[e.thread].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start, -e.end))
        stack = []
        for e in evs:
            while stack and stack[-1].end <= e.start:
                stack.pop()
            # A child that outlives its parent (an asynchronous end) is clipped to the parent.
            if stack:
                stack[-1].children += min(e.end, stack[-1].end) - e.start
            else:
                tops.append(e)
            e.top_level_op = not stack or stack[-1].name == STEP_LABEL
            stack.append(e)
    return tops


def _overlaps_any(ev, windows):
    return any(ev.start < e and ev.end > s for s, e in windows)


def _union_within(events, windows):
    """Total time covered by `events`, clipped to the windows."""
    total = 0
    for s, e in windows:
        spans = sorted((max(s, d.start), min(e, d.end)) for d in events if d.start < e and d.end > s)
        cur_s = cur_e = None
        for a, b in spans:
            if cur_e is None or a > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = a, b
            else:
                cur_e = max(cur_e, b)
        if cur_e is not None:
            total += cur_e - cur_s
    return total
