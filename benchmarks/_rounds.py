"""The end of a timed round: its time must include every program the round launched."""


def wait_for_device(device_type):
    """Waits until the current tpu device has run everything launched so far (nothing on "cpu").

    Reading the loss (`loss.item()`) waits only for the program that computes it. In Strict
    mode, under torch.compile and in a Fused Eager step cut into several programs, the step's
    backward and optimizer are launched after that program and may still be queued when the read
    returns: a round timed up to its last read would leave them to the next round - in an
    interleaved benchmark, to the next contender, which then pays for them on the same cores.
    Rounds of a few steps (the zoo's medium models: 2-5 steps of ~100-200 ms) were timed
    up to ~2x too fast that way (`docs/benchmarks.md`, 2026-12-08).
    """
    if device_type == "tpu":
        import torch

        torch.tpu.synchronize()
