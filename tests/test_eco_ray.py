"""Ray Train 2.60 on the tpu device: a local Ray cluster whose node has TPU resources (from the
GKE-style environment variables - never the GCE metadata server) gives each worker Ray's
TPUTorchDeviceManager, which loads torch_tpu through torch_tpu._loader.load(). Then:
one worker trains on `tpu` exactly like the same loop on the CPU, and two workers train with DDP
over the `tpu_dist` process group (Ray's TorchConfig picks it for TPU workers) to the weights of
one CPU process on the concatenated batches.

Ray Train V2 (the default) is used; for more than one TPU worker it needs ScalingConfig's
topology and accelerator_type, and reserves the slice through the TPU head resource and labels
that the environment variables give the node. One cluster serves the whole file."""

import contextlib
import os
import signal

import pytest
import torch

import torch_tpu  # noqa: F401

ray = pytest.importorskip("ray", reason="ray is not installed")
pytest.importorskip("ray.train", reason="ray[train] is not installed")

import eco_ray_loops  # noqa: E402
from eco_ray_loops import CLUSTER_TPUS, TPU_ENV, cpu_state, make_model, sgd_steps  # noqa: E402

STEPS = 4
GLOBAL_BATCH = 8
CLUSTER_ENV = {
    **TPU_ENV,
    "RAY_USAGE_STATS_ENABLED": "0",  # no usage report (it probes cloud metadata endpoints)
    "RAY_AUTH_MODE": "disabled",  # no token written under ~/.ray for a throwaway local cluster
    "RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS": "0",
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
}


@contextlib.contextmanager
def hard_timeout(seconds, what):
    """Raises TimeoutError in the main thread if the body runs longer than ``seconds``."""
    def expire(signum, frame):
        raise TimeoutError(f"{what} ran past {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def ray_cluster():
    """A 2-CPU local cluster with CLUSTER_TPUS TPUs, no dashboard; the metadata server is
    forbidden in this process (where ray.init resolves the node's resources) and in every
    worker (a setup hook)."""
    from ray import cloudpickle

    saved = {k: os.environ.get(k) for k in CLUSTER_ENV}
    os.environ.update(CLUSTER_ENV)
    from ray._private.accelerators import tpu as ray_tpu

    original_metadata = ray_tpu._get_tpu_metadata
    eco_ray_loops.forbid_metadata_server()
    # Workers cannot import tests/ modules: ship the loops and the hook by value.
    cloudpickle.register_pickle_by_value(eco_ray_loops)
    try:
        with hard_timeout(120, "ray.init"):
            ray.init(num_cpus=2, resources={"TPU": CLUSTER_TPUS}, include_dashboard=False,
                     log_to_driver=False,
                     runtime_env={"worker_process_setup_hook": eco_ray_loops.forbid_metadata_server})
        yield ray
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(eco_ray_loops)
        ray_tpu._get_tpu_metadata = original_metadata
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def make_batches():
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(GLOBAL_BATCH, 8, generator=generator), torch.randn(GLOBAL_BATCH, 1, generator=generator))
            for _ in range(STEPS)]


def fit(tmp_path, scaling_config, batches, timeout=240):
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    out = tmp_path / "ranks"
    out.mkdir()
    trainer = TorchTrainer(
        eco_ray_loops.train_loop,
        train_loop_config={"batches": batches, "global_batch": GLOBAL_BATCH, "out": str(out)},
        scaling_config=scaling_config,
        run_config=RunConfig(name="eco_ray", storage_path=str(tmp_path / "ray_results")),
    )
    with hard_timeout(timeout, "TorchTrainer.fit"):
        result = trainer.fit()
    assert result.error is None, result.error
    return [torch.load(out / f"rank_{r}.pt", weights_only=False) for r in range(scaling_config.num_workers)]


def cpu_reference(batches):
    model = make_model()
    losses = sgd_steps(model, batches, "cpu")
    return losses, cpu_state(model)


@pytest.mark.parametrize("unset", [None, *TPU_ENV])
def test_tpu_environment_keeps_ray_off_the_metadata_server(monkeypatch, unset):
    """Everything Ray asks about a TPU node comes from the four variables; without any one of
    them it goes to the metadata server (here: the guard raises)."""
    from ray._private.accelerators import tpu as ray_tpu

    for key, value in TPU_ENV.items():
        monkeypatch.setenv(key, value)
    if unset:
        monkeypatch.delenv(unset)
    monkeypatch.setattr(ray_tpu, "_get_tpu_metadata", ray_tpu._get_tpu_metadata)  # restored after
    eco_ray_loops.forbid_metadata_server()
    manager = ray_tpu.TPUAcceleratorManager

    def ask_everything():
        return (manager.get_current_node_accelerator_type(), manager.get_current_node_additional_resources(),
                manager.get_current_node_accelerator_labels())

    if unset is None:
        accelerator_type, extra_resources, labels = ask_everything()
        assert accelerator_type == "TPU-V6E"
        assert extra_resources == {"local-tpu": 1, "TPU-v6e-4-head": 1}
        assert labels["ray.io/tpu-topology"] == "2x2" and labels["ray.io/tpu-worker-id"] == "0"
    else:
        with pytest.raises(eco_ray_loops.MetadataServerContacted):
            ask_everything()


def test_node_has_tpu_resources_from_the_environment(ray_cluster):
    resources = ray.cluster_resources()
    assert resources.get("TPU") == CLUSTER_TPUS
    assert resources.get("accelerator_type:TPU-V6E") == 1
    assert resources.get("TPU-v6e-4-head") == 1  # worker 0 of the slice: V2 reserves it
    labels = ray.nodes()[0]["Labels"]
    assert labels.get("ray.io/tpu-topology") == TPU_ENV["TPU_TOPOLOGY"]
    assert labels.get("ray.io/tpu-slice-name") == TPU_ENV["TPU_NAME"]


def test_one_worker_trains_on_tpu_like_cpu(ray_cluster, tmp_path):
    from ray.train import ScalingConfig

    batches = make_batches()
    (rank0,) = fit(tmp_path, ScalingConfig(num_workers=1, use_tpu=True, resources_per_worker={"TPU": 1, "CPU": 1}),
                   batches)
    assert rank0["torch_tpu_loaded"]
    assert rank0["metadata_forbidden"]  # the setup hook ran in the worker
    assert "TPU" in rank0["accelerator_ids"] and rank0["accelerator_ids"]["TPU"], rank0["accelerator_ids"]
    assert rank0["device"] == "tpu"
    assert rank0["param_device"].startswith("tpu")
    assert rank0["wrapped"] != "DistributedDataParallel"
    assert rank0["fallbacks"] == {}, rank0["fallbacks"]
    cpu_losses, cpu_weights = cpu_reference(batches)
    torch.testing.assert_close(torch.tensor(rank0["losses"]), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rank0["state"], cpu_weights, rtol=1e-5, atol=1e-6)


def test_two_workers_ddp_over_tpu_dist(ray_cluster, tmp_path):
    from ray.train import ScalingConfig

    batches = make_batches()
    # Train V2 wants a slice for > 1 TPU worker: 2x2 v6e = 4 chips, 2 per worker.
    scaling = ScalingConfig(num_workers=2, use_tpu=True, topology=TPU_ENV["TPU_TOPOLOGY"],
                            accelerator_type="TPU-V6E", resources_per_worker={"TPU": 2, "CPU": 1})
    ranks = fit(tmp_path, scaling, batches)
    for rank in ranks:
        assert rank["device"] == "tpu" and rank["param_device"].startswith("tpu")
        assert rank["backend"] == "tpu_dist"
        assert rank["world_size"] == 2
        assert rank["wrapped"] == "DistributedDataParallel"
        assert rank["fallbacks"] == {}, rank["fallbacks"]
    cpu_losses, cpu_weights = cpu_reference(batches)
    # DDP keeps the replicas identical, and averaging the two halves' gradients is the gradient
    # of the whole batch's mean loss.
    torch.testing.assert_close(ranks[0]["state"], ranks[1]["state"], rtol=0, atol=0)
    torch.testing.assert_close(ranks[0]["state"], cpu_weights, rtol=1e-5, atol=1e-5)
    # Each rank's loss is its half's mean; their mean is the CPU loss on the whole batch.
    mean_losses = (torch.tensor(ranks[0]["losses"]) + torch.tensor(ranks[1]["losses"])) / 2
    torch.testing.assert_close(mean_losses, torch.tensor(cpu_losses), rtol=1e-5, atol=1e-6)
