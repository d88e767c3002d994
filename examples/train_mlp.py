"""Train a small MLP on the `tpu` device: regression onto a fixed random teacher network.

    python examples/train_mlp.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                 [--amp] [--hidden N] [--check-cpu N] [--out-dir DIR]

Shows a progress bar with the loss and samples/s, prints one metrics line and writes
loss_curve.png, log.txt and metrics.json to --out-dir (default runs/train_mlp/).
"""

import torch

import _common
from _data import teacher_regression

FEATURES, OUTPUTS = 64, 10


def main():
    parser = _common.build_parser(__doc__, steps=300, batch=256, lr=3e-3, warmup=10, log_every=50)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()

    def make_model():
        return torch.nn.Sequential(torch.nn.Linear(FEATURES, args.hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(args.hidden, OUTPUTS))

    _common.run(_common.Example(
        name="MLP", make_model=make_model, make_batches=lambda: teacher_regression(args.batch, FEATURES, OUTPUTS),
        loss=lambda model, batch: ((model(batch[0]) - batch[1]) ** 2).mean(), unit="samples",
        items_per_step=args.batch, describe=f"hidden {args.hidden}, batch {args.batch}"), args)


if __name__ == "__main__":
    main()
