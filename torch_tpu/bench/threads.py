"""Which threads of this process use the CPU during a step, and how long they wait for a core.

On the CPU plugin the "device" is the machine's own cores: XLA's compute pool runs the programs
while the step's thread issues the next ops, and the runtime's threads launch and copy. When
those threads want more cores than the machine has, each of them waits in the kernel's run queue
and the step gets slower though no layer of ours got more expensive. The profiler cannot show
that; Linux's per-thread accounting can (``/proc/self/task/<tid>/schedstat`` and ``status``):

* ``cpu``: time the thread ran;
* ``waiting``: time it was ready to run but waited for a core (the run queue);
* ``sleeps``: how often it blocked (a wake-up on a virtual CPU costs tens of microseconds).

Threads are grouped by name: torch_tpu names its own (``tpu_launcher``, ``tpu_group``,
``tpu_compile``, ``tpu_host_pool``, ``tpu_dist_*``), XLA's compute pool is ``tf_XLAEigen``;
threads a library left unnamed carry the process's name, like the step's thread, which is
reported apart.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from .. import _os_threads

STEP_THREAD = "the step's thread"
UNNAMED = "unnamed threads (plugin workers, others)"
_KNOWN = {
    "tf_XLAEigen": "XLA's compute pool",
    "tpu_launcher": "torch_tpu launch queue",
    "tpu_group": "torch_tpu group launcher",
    "tpu_compile": "torch_tpu background compiles",
    "tpu_host_pool": "torch_tpu host kernel pool",
    "tpu_dist_issue": "tpu_dist host transport (issue)",
    "tpu_dist_done": "tpu_dist host transport (completion)",
}
OVERSUBSCRIBED_SHARE = 0.25  # run-queue wait over the step's wall time, summed over threads


@dataclasses.dataclass(frozen=True)
class _Sample:
    name: str
    cpu_ns: int
    wait_ns: int
    sleeps: int


def available() -> bool:
    """Whether this system reports per-thread scheduler times (Linux with schedstat)."""
    return os.path.exists(f"{_os_threads.TASKS}/{threading.get_native_id()}/schedstat")


def snapshot() -> dict:
    """{thread id: _Sample} for every thread of this process now (empty where not available)."""
    out = {}
    for tid, name in _os_threads.listed() or ():
        try:
            with open(f"{_os_threads.TASKS}/{tid}/schedstat") as f:
                cpu_ns, wait_ns = (int(v) for v in f.read().split()[:2])
            sleeps = 0
            with open(f"{_os_threads.TASKS}/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        sleeps = int(line.split()[1])
        except (OSError, ValueError):
            continue  # the thread ended between the listing and the reads
        out[tid] = _Sample(name, cpu_ns, wait_ns, sleeps)
    return out


@dataclasses.dataclass
class ThreadGroup:
    """One group's per-step averages (milliseconds, counts)."""

    name: str
    threads: int
    cpu_ms: float
    wait_ms: float
    sleeps: float


@dataclasses.dataclass
class CpuUse:
    """Per-step CPU use of the process's threads over an unprofiled run of steps."""

    steps: int
    wall_ms: float
    cores: int
    groups: list  # ThreadGroup, the step's thread first, then by CPU time

    @property
    def cpu_ms(self) -> float:
        return sum(g.cpu_ms for g in self.groups)

    @property
    def wait_ms(self) -> float:
        return sum(g.wait_ms for g in self.groups)

    @property
    def oversubscribed(self) -> bool:
        return self.wall_ms > 0 and self.wait_ms > OVERSUBSCRIBED_SHARE * self.wall_ms

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(cpu_ms=self.cpu_ms, wait_ms=self.wait_ms, oversubscribed=self.oversubscribed)
        return d

    def table(self) -> str:
        labels = [g.name if g.threads == 1 else f"{g.name} ({g.threads})" for g in self.groups]
        w = max([len(label) for label in labels] + [28]) + 2
        lines = [f"threads over {self.steps} unprofiled steps ({self.wall_ms:.3f} ms wall each, "
                 f"{self.cores} cores):",
                 f"  {'thread group':<{w}}{'cpu ms':>9}{'waiting':>9}{'sleeps':>8}  per step"]
        for label, g in zip(labels, self.groups):
            lines.append(f"  {label:<{w}}{g.cpu_ms:>9.3f}{g.wait_ms:>9.3f}{g.sleeps:>8.1f}")
        used = self.cpu_ms / self.wall_ms if self.wall_ms > 0 else 0.0
        lines.append(f"  {'all':<{w}}{self.cpu_ms:>9.3f}{self.wait_ms:>9.3f}  = {used:.2f} of {self.cores} cores busy")
        if self.oversubscribed:
            lines.append(f"oversubscribed: threads waited {self.wait_ms:.2f} ms a step for a core "
                         f"({100 * self.wait_ms / self.wall_ms:.0f}% of the wall time, summed over threads) - "
                         "the host's work and the programs compete for the cores")
        return "\n".join(lines)


def cpu_use(before: dict, after: dict, *, steps: int, wall_s: float, step_thread: int) -> CpuUse:
    """Per-step CPU use between two snapshots taken around ``steps`` steps that took ``wall_s``
    seconds on the thread ``step_thread`` (a native thread id)."""
    if steps < 1:
        raise ValueError(f"cpu_use needs steps >= 1, got {steps}")
    process_name = after[step_thread].name if step_thread in after else None
    totals = {}
    for tid, end in after.items():
        start = before.get(tid, _Sample(end.name, 0, 0, 0))  # a thread started during the steps
        cpu, wait, sleeps = end.cpu_ns - start.cpu_ns, end.wait_ns - start.wait_ns, end.sleeps - start.sleeps
        if cpu <= 0 and wait <= 0 and sleeps <= 0:
            continue  # idle all along
        if tid == step_thread:
            key = STEP_THREAD
        elif end.name in _KNOWN:
            key = _KNOWN[end.name]
        elif end.name == process_name:
            key = UNNAMED
        else:
            key = f"threads named {end.name!r}"
        n, c, w, s = totals.get(key, (0, 0, 0, 0))
        totals[key] = (n + 1, c + cpu, w + wait, s + sleeps)
    groups = [ThreadGroup(name, n, c / steps / 1e6, w / steps / 1e6, s / steps)
              for name, (n, c, w, s) in totals.items()]
    groups.sort(key=lambda g: (g.name != STEP_THREAD, -g.cpu_ms))
    return CpuUse(steps, 1e3 * wall_s / steps, len(os.sched_getaffinity(0)), groups)
