"""Ray Train pieces for tests/test_eco_ray.py: the local cluster's TPU environment, a guard
against the GCE metadata server, and the training loops (shipped to Ray's workers by value).

Ray decides what a node's TPUs are in ray/_private/accelerators/tpu.py. Asking for a "TPU"
resource makes it call, on the head node (in ray.init's process) and in workers:
  get_current_node_tpu_pod_type  -> TPU_ACCELERATOR_TYPE  (else GCE "accelerator-type")
  get_current_node_tpu_name      -> TPU_NAME              (else GCE "instance-id")
  get_current_node_tpu_worker_id -> TPU_WORKER_ID         (else GCE "agent-worker-number")
  get_current_node_tpu_topology  -> TPU_TOPOLOGY          (else GCE "tpu-env")
Each falls back to ``_get_tpu_metadata`` (an HTTP GET of metadata.google.internal) only when its
variable is unset or empty, so setting all four keeps Ray off the metadata server; the chip
count comes from /dev/accel* and /dev/vfio (files, no network), and is overridden by the
explicit ``resources={"TPU": n}``. ``forbid_metadata_server`` makes any remaining call fail."""

import os

import torch

# A single-host v6e slice with 4 chips: "2x2" is a v6e topology Ray Train V2 accepts.
TPU_ENV = {
    "TPU_ACCELERATOR_TYPE": "v6e-4",
    "TPU_NAME": "local-tpu",
    "TPU_WORKER_ID": "0",
    "TPU_TOPOLOGY": "2x2",
}
CLUSTER_TPUS = 4


class MetadataServerContacted(RuntimeError):
    pass


def forbid_metadata_server():
    """Replaces Ray's only metadata-server client with one that raises (a Ray
    worker_process_setup_hook, and called in the driver before ray.init)."""
    from ray._private.accelerators import tpu

    def refuse(key):
        raise MetadataServerContacted(f"Ray tried to read GCE metadata key {key!r}")

    tpu._get_tpu_metadata = refuse


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def sgd_steps(model, batches, device, lr=0.1):
    """Plain SGD with momentum on mean-squared error; the losses, one per batch."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def cpu_state(model):
    model = getattr(model, "module", model)  # unwrap DDP
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def train_loop(config):
    """Runs in every Ray Train worker: each rank trains on its slice of every global batch and
    saves what it saw (device, process group, losses, final weights) to config["out"]/rank_R.pt."""
    import torch.distributed as dist

    import ray.train
    import ray.train.torch

    from ray._private.accelerators import tpu as ray_tpu

    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(make_model())
    per_rank = config["global_batch"] // world_size
    batches = [(x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank])
               for x, y in config["batches"]]
    losses = sgd_steps(model, batches, device)
    torch.save({
        "device": str(device),
        "param_device": str(next(model.parameters()).device),
        "wrapped": type(model).__name__,
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "accelerator_ids": ray.get_runtime_context().get_accelerator_ids(),
        "torch_tpu_loaded": "torch_tpu" in __import__("sys").modules,
        "metadata_forbidden": ray_tpu._get_tpu_metadata.__name__ == "refuse",
        "fallbacks": dict(__import__("torch_tpu").fallback_counts()),
        "losses": losses,
        "state": cpu_state(model),
    }, os.path.join(config["out"], f"rank_{rank}.pt"))
    ray.train.report({"rank": rank})
