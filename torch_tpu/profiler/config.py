"""``TpuProfilerConfig``: the tpu trace's options, passed to ``torch.profiler.profile`` as its
``experimental_config``.

torch.profiler hands the config to Kineto as one string of ``key:value`` pairs, which the tpu
session reads (``csrc/profiler/profiler_options.h``). What each option does here:

* ``device_tracer_level``: 1 (default) records every program execution as a device activity
  (``ProfilerActivity.PrivateUse1``); 0 leaves them out.
* ``host_tracer_level``: 1 or more (default 2) records the runtime's host events - compiles and
  compilation-cache hits; 0 leaves them out. 3 also records a host span for each layer of our
  stack (kernels, executor, Fused Eager's recording and flush, replays, waits, PJRT's Execute, the
  launch queue), which ``python -m torch_tpu.bench host`` reads (docs/performance.md).
* ``python_tracer_level``: accepted; Python frames come from ``torch.profiler.profile(with_stack=True)``.
* ``run_dir``: also writes the tpu trace (device programs, compiles, cache hits) as Chrome trace
  JSON to ``<run_dir>/<hostname>[_<worker_rank>].tpu_trace.json``, next to PyTorch's own trace.
* ``worker_rank``: the file name's suffix, so ranks sharing a directory write separate files.
* ``experimental_options``: none is recognised; with ``check_experimental_options=True``
  (default) any is an error, with False they are ignored.
"""

import os

import torch

_LEVELS = ("host_tracer_level", "device_tracer_level", "python_tracer_level")
_OWN_KEYS = frozenset(_LEVELS + ("run_dir", "worker_rank", "check_experimental_options"))
_KNOWN_EXPERIMENTAL = frozenset()


def _quoted(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"profiler option values must be int, bool or str, got {type(value).__name__}")


class TpuProfilerConfig(torch.profiler._ExperimentalConfig):
    """Options of the tpu trace for ``torch.profiler.profile(experimental_config=...)``."""

    def __init__(self, *, host_tracer_level: int = 2, device_tracer_level: int = 1,
                 python_tracer_level: int = 0, run_dir=None, worker_rank=None,
                 experimental_options=None, check_experimental_options: bool = True):
        levels = {"host_tracer_level": host_tracer_level, "device_tracer_level": device_tracer_level,
                  "python_tracer_level": python_tracer_level}
        for name, value in levels.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TpuProfilerConfig: {name} must be a non-negative int, got {value!r}")
        if worker_rank is not None:
            if not isinstance(worker_rank, str):
                raise TypeError(f"TpuProfilerConfig: worker_rank must be a str, got {type(worker_rank).__name__} "
                                f"(pass str(rank))")
            if ":" in worker_rank or "," in worker_rank:
                raise ValueError(f"TpuProfilerConfig: worker_rank cannot contain ':' or ',': {worker_rank!r}")
        run_dir = os.fspath(run_dir) if run_dir is not None else None
        if run_dir is not None and "," in run_dir:
            raise ValueError(f"TpuProfilerConfig: run_dir cannot contain ',': {run_dir!r}")
        experimental_options = dict(experimental_options or {})
        for key, value in experimental_options.items():
            if key in _OWN_KEYS:
                raise ValueError(f"TpuProfilerConfig: experimental option {key!r} clashes with the option of "
                                 "that name; pass it as a keyword argument")
            if ":" in key or "," in key:
                raise ValueError(f"TpuProfilerConfig: experimental option keys cannot contain ':' or ',': {key!r}")
            _quoted(value)
        unknown = sorted(set(experimental_options) - _KNOWN_EXPERIMENTAL)
        if unknown and check_experimental_options:
            raise ValueError(f"TpuProfilerConfig: the tpu profiler has no experimental options {unknown}; "
                             "remove them or pass check_experimental_options=False to ignore them")

        self.host_tracer_level = host_tracer_level
        self.device_tracer_level = device_tracer_level
        self.python_tracer_level = python_tracer_level
        self.run_dir = run_dir
        self.worker_rank = worker_rank
        self.experimental_options = experimental_options
        parts = [f"{name}:{value}" for name, value in levels.items()]
        if run_dir is not None:
            parts.append(f"run_dir:{run_dir}")
        if worker_rank is not None:
            parts.append(f"worker_rank:{_quoted(worker_rank)}")
        parts += [f"{key}:{_quoted(value)}" for key, value in experimental_options.items()]
        if experimental_options:
            parts.append(f"check_experimental_options:{_quoted(bool(check_experimental_options))}")
        super().__init__(custom_profiler_config=",".join(parts))

    def trace_path(self, host=None) -> "str | None":
        """Where ``run_dir``'s trace file goes on `host` (default: this host), or None."""
        if self.run_dir is None:
            return None
        import socket

        host = host or socket.gethostname()
        suffix = f"_{self.worker_rank}" if self.worker_rank else ""
        return os.path.join(self.run_dir, f"{host}{suffix}.tpu_trace.json")
