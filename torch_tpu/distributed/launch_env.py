"""``torch.tpu.distributed.set_tpu_launch_env``: the environment a launcher (torchrun, Ray, a
job scheduler) hands to the workers of a tpu job, set once in the parent before they start.

It never overwrites a variable that is set (an operator can pin any of them; a second call
changes nothing) and sets both the plain names (``NNODES``, ``NODE_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``, ``NPROC_PER_NODE``; what ``init_process_group("env://")`` and most launchers
read) and torchrun's ``PET_*`` spellings of its options (``PET_NNODES``, ``PET_NODE_RANK``,
``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, ``PET_NPROC_PER_NODE``), so a bare ``torchrun
train.py`` picks them up.

* One host (``nnodes`` 1 or unset, at most one name in ``TPU_WORKER_HOSTNAMES``, no
  ``JOB_COMPLETION_INDEX``): the rendezvous is on loopback (127.0.0.1) on a free port, and
  ``nproc_per_node`` defaults to this host's devices (on the XLA CPU plugin
  ``TORCH_TPU_CPU_DEVICE_COUNT``, else 1, without starting the runtime).
* Several hosts: the host list is ``TPU_WORKER_HOSTNAMES`` (comma-separated); the first host is
  the rendezvous address (port 29500), this host's rank is ``NODE_RANK`` or
  ``JOB_COMPLETION_INDEX`` (an indexed Kubernetes job), and ``nproc_per_node`` defaults to
  ``TORCH_TPU_DEVICES_PER_HOST``, else this host's devices.

Bad or missing facts raise ValueError naming the variable, before any worker starts.
"""

import os
import socket


def _set_default(name, value):
    if not os.environ.get(name):
        os.environ[name] = str(value)
    return os.environ[name]


def _free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local_device_count():
    import torch

    from .. import _C, _plugin

    if not _C._is_initialized() and (_plugin.requested_platform() or "cpu") == "cpu":
        return int(os.environ.get("TORCH_TPU_CPU_DEVICE_COUNT", "1") or 1)
    return torch.tpu.device_count()


def set_tpu_launch_env(*, nnodes=None, nproc_per_node=None):
    """Fills in the launch environment (see the module docstring)."""
    hosts = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if nnodes is not None and hosts and nnodes != len(hosts):
        raise ValueError(f"set_tpu_launch_env(nnodes={nnodes}): TPU_WORKER_HOSTNAMES lists {len(hosts)} "
                         f"host(s) ({','.join(hosts)}); make them agree")
    completion_index = os.environ.get("JOB_COMPLETION_INDEX")
    multihost = (nnodes or 1) > 1 or len(hosts) > 1 or completion_index is not None
    if multihost:
        if not hosts and not os.environ.get("MASTER_ADDR"):
            raise ValueError("set_tpu_launch_env: a multi-host job needs TPU_WORKER_HOSTNAMES (the hosts, "
                             "comma-separated) or MASTER_ADDR")
        count = nnodes if nnodes is not None else (len(hosts) or int(os.environ.get("NNODES", "0") or 0))
        if not count:
            raise ValueError("set_tpu_launch_env: the number of hosts is unknown; pass nnodes or set "
                             "TPU_WORKER_HOSTNAMES")
        node_rank = os.environ.get("NODE_RANK") or completion_index
        if node_rank is None:
            raise ValueError("set_tpu_launch_env: this host's rank is unknown; set NODE_RANK (or run as an "
                             "indexed job with JOB_COMPLETION_INDEX)")
        addr = _set_default("MASTER_ADDR", hosts[0] if hosts else "")
        port = _set_default("MASTER_PORT", 29500)
        per_node = nproc_per_node or int(os.environ.get("TORCH_TPU_DEVICES_PER_HOST", "0") or 0) \
            or _local_device_count()
    else:
        count, node_rank = 1, 0
        addr = _set_default("MASTER_ADDR", "127.0.0.1")
        port = _set_default("MASTER_PORT", _free_loopback_port())
        per_node = nproc_per_node or _local_device_count()
    values = {"NNODES": count, "NODE_RANK": node_rank, "MASTER_ADDR": addr, "MASTER_PORT": port,
              "NPROC_PER_NODE": per_node}
    for name, value in values.items():
        value = _set_default(name, value)
        _set_default("PET_" + name, value)
