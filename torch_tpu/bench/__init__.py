"""Performance tools for the tpu device: ``python -m torch_tpu.bench host`` breaks a step's host
time down by layer of our stack (see ``docs/performance.md``)."""

from .breakdown import Breakdown
from .host import host_breakdown

__all__ = ["Breakdown", "host_breakdown"]
