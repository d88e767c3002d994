"""Runs torchtitan's own entry point (``torchtitan.train.main``) with the arguments given, and
writes every logged step's loss to ``$ECO_TITAN_LOSSES`` (JSON, rank 0) for the tests to read.

``ECO_TITAN_DEVICE=tpu`` (default): the tpu device is registered first (torch's backend
autoload does that too), so torchtitan's ``_get_available_device_type()`` finds ``tpu`` and its
process group backend comes from ``Backend.default_device_backend_map`` (``tpu_dist``).

``ECO_TITAN_DEVICE=cpu``: the reference run. torchtitan has no CPU mode (without an accelerator it
picks ``cuda``), so before torchtitan is imported its device lookup is pointed at ``cpu`` with a
``torch.cpu`` stand-in that answers the memory-statistics calls its metrics make."""

import json
import os
import sys
import types

import torch

DEVICE = os.environ.get("ECO_TITAN_DEVICE", "tpu")


def _cpu_device_module():
    """torch.cpu plus the torch.cuda-style queries torchtitan's DeviceMemoryMonitor makes."""
    module = types.ModuleType("eco_titan_cpu")
    module.__dict__.update({k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("__")})
    module.current_device = lambda: 0  # torch.cpu answers "cpu"; barrier(device_ids=) wants an int
    module.get_device_name = lambda device=None: "cpu"
    module.get_device_properties = lambda device=None: types.SimpleNamespace(total_memory=1 << 34)
    module.reset_peak_memory_stats = lambda device=None: None
    module.empty_cache = lambda: None
    module.memory_stats = lambda device=None: {}
    return module


def _point_torchtitan_at_cpu():
    import torch._utils

    cpu_module = _cpu_device_module()
    torch._utils._get_available_device_type = lambda: "cpu"
    original = torch._utils._get_device_module
    torch._utils._get_device_module = lambda t: cpu_module if t == "cpu" else original(t)


def _add_set_timeout():
    """torchtitan 0.3 calls ``torch.distributed.set_timeout`` after the first step; torch 2.13
    has it only as the private ``distributed_c10d._set_pg_timeout``."""
    import torch.distributed as dist

    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = dist.distributed_c10d._set_pg_timeout


def _record_losses(path):
    from torchtitan.components.metrics import MetricsProcessor

    losses = {}
    original_log = MetricsProcessor.log

    def log(self, step, global_avg_loss, *args, **kwargs):
        losses[int(step)] = float(global_avg_loss)
        if torch.distributed.is_initialized():
            losses["backend"] = str(torch.distributed.get_backend())
            losses["world_size"] = torch.distributed.get_world_size()
        return original_log(self, step, global_avg_loss, *args, **kwargs)

    MetricsProcessor.log = log
    return losses


def main():
    if DEVICE == "tpu":
        import torch_tpu  # noqa: F401  (explicit, whether or not autoload already ran)
    else:
        _point_torchtitan_at_cpu()
    from torchtitan.tools import utils

    assert utils.device_type == DEVICE, (utils.device_type, DEVICE)
    _add_set_timeout()
    losses = _record_losses(os.environ["ECO_TITAN_LOSSES"]) if os.environ.get("ECO_TITAN_LOSSES") else None

    from torchtitan.train import main as titan_main

    sys.argv = ["torchtitan.train", *sys.argv[1:]]
    titan_main()
    if losses is not None and int(os.environ.get("RANK", "0")) == 0:
        fallbacks = {}
        if DEVICE == "tpu":
            import torch_tpu

            fallbacks = dict(torch_tpu.fallback_counts())
        result = {"device": utils.device_type, "backend": losses.pop("backend", None),
                  "world_size": losses.pop("world_size", 1), "losses": losses, "fallbacks": fallbacks}
        with open(os.environ["ECO_TITAN_LOSSES"], "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
