"""Train a small MLP on the `tpu` device: regression onto a fixed random teacher network.

    python examples/train_mlp.py [--steps N] [--device tpu]

Prints the loss as it falls and the training speed in steps per second.
"""

import argparse
import time

import torch

import torch_tpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="tpu")
    args = parser.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    teacher = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))
    inputs = torch.randn(args.batch * 8, 64)
    with torch.no_grad():
        targets = teacher(inputs)

    model = torch.nn.Sequential(
        torch.nn.Linear(64, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x_all, y_all = inputs.to(device), targets.to(device)

    print(f"device: {device} ({torch.tpu.get_device_name() if device.type == 'tpu' else 'host'})")
    start = time.perf_counter()
    timed_from, timed_steps = None, 0
    for step in range(args.steps):
        i = (step % 8) * args.batch
        x, y = x_all[i : i + args.batch], y_all[i : i + args.batch]
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        if step == 10:  # the first steps compile; time the rest
            torch.tpu.synchronize() if device.type == "tpu" else None
            timed_from = time.perf_counter()
        elif step > 10:
            timed_steps += 1
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.5f}")
    if device.type == "tpu":
        torch.tpu.synchronize()
    end = time.perf_counter()
    rate = timed_steps / (end - timed_from) if timed_from and timed_steps else float("nan")
    print(f"trained {args.steps} steps in {end - start:.1f}s: {rate:.1f} steps/s after warm-up")
    if device.type == "tpu":
        stats = torch.tpu.compilation_cache_stats()
        print(f"compiled {stats['compiles']} executables ({stats['compile_seconds']:.1f}s); "
              f"CPU fallbacks: {sum(torch_tpu.fallback_counts().values())}")


if __name__ == "__main__":
    main()
