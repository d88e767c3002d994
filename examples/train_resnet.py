"""Train ResNet-18 (narrow) to classify synthetic images on the `tpu` device.

    python examples/train_resnet.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                    [--amp] [--size PIXELS] [--width CHANNELS] [--check-cpu N] [--out-dir DIR]

Each of the 10 classes is a coloured grating with its own spatial frequency, drawn at a random
phase under Gaussian noise, so the cross-entropy falls from ln(10) = 2.30 towards 0. Shows a
progress bar with the loss and images/s, prints one metrics line and writes loss_curve.png,
log.txt and metrics.json to --out-dir (default runs/train_resnet/).
"""

import math

import torch.nn.functional as F

import _common
from _data import labelled_images
from models.resnet import resnet18

CLASSES = 10


def main():
    parser = _common.build_parser(__doc__, steps=200, batch=32, lr=1e-3, log_every=20)
    parser.add_argument("--size", type=int, default=32, help="image height and width")
    parser.add_argument("--width", type=int, default=16, help="channels of the first stage")
    args = parser.parse_args()
    _common.run(_common.Example(
        name="ResNet-18", make_model=lambda: resnet18(args.width, CLASSES),
        make_batches=lambda: labelled_images(args.batch, args.size, CLASSES),
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        unit="images", items_per_step=args.batch,
        describe=f"width {args.width}, batch {args.batch} x {args.size}x{args.size} images",
        baseline=math.log(CLASSES)), args)


if __name__ == "__main__":
    main()
