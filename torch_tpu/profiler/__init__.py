"""Profiler options for the tpu device (``torch.tpu.profiler``)."""

from .config import TpuProfilerConfig

__all__ = ["TpuProfilerConfig"]
