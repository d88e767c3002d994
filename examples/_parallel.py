"""Data parallelism for the example scripts (--ddp / --fsdp under torchrun, over `tpu_dist`).

Every rank takes its slice of each global batch, so the loss curve is the single-process one on
the same batches. `start` returns `SINGLE` (one process, no-ops) or a `DataParallel`.
"""

import os
import sys

import torch
import torch.distributed as dist


class Single:
    rank, world = 0, 1

    def wrap(self, model, example):
        return model

    def shard(self, batch):
        return batch

    def average(self, tensor):
        pass

    def describe(self, batch):
        return None

    def finish(self):
        pass


SINGLE = Single()


class DataParallel(Single):
    def __init__(self, fsdp):
        self.fsdp = fsdp
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def wrap(self, model, example):
        """DDP, or FSDP2 with one unit per block of `example.fsdp_units(model)`."""
        if not self.fsdp:
            from torch.nn.parallel import DistributedDataParallel

            return DistributedDataParallel(model)
        from torch.distributed.fsdp import fully_shard

        for block in example.fsdp_units(model):
            fully_shard(block)
        fully_shard(model)
        return model

    def shard(self, batch):
        """This rank's rows of every tensor of the batch."""
        rows = batch[0].shape[0] // self.world
        return tuple(t[self.rank * rows:(self.rank + 1) * rows] for t in batch)

    def average(self, tensor):
        dist.all_reduce(tensor, op=dist.ReduceOp.AVG)

    def describe(self, batch):
        import torch_tpu

        return (f"{'FSDP2' if self.fsdp else 'DDP'} over {self.world} ranks (tpu_dist, "
                f"{torch_tpu.distributed.transport_of()} transport): {batch // self.world} of the "
                f"{batch} samples of each batch per rank")

    def finish(self):
        dist.destroy_process_group()


def start(args, device, script):
    """Joins the torchrun job when --ddp/--fsdp is given; exits with a hint on misuse."""
    ddp, fsdp = getattr(args, "ddp", False), getattr(args, "fsdp", False)
    if not (ddp or fsdp):
        return SINGLE
    if device.type != "tpu" or "LOCAL_RANK" not in os.environ:
        sys.exit(f"--ddp/--fsdp train on tpu under a launcher: torchrun --standalone "
                 f"--nproc_per_node=2 {script} --ddp")
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("tpu_dist")
    if args.batch % dist.get_world_size():
        sys.exit(f"--batch {args.batch} does not split over {dist.get_world_size()} ranks")
    if args.check_cpu:
        sys.exit("--check-cpu compares single-process runs; drop it with --ddp/--fsdp")
    return DataParallel(fsdp)
