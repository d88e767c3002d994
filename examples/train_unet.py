"""Train a small UNet as a diffusion denoiser on the `tpu` device.

    python examples/train_unet.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                  [--amp] [--size PIXELS] [--base CHANNELS] [--check-cpu N] [--out-dir DIR]

The objective is DDPM's: a clean synthetic image x0 (a coloured grating) is mixed with Gaussian
noise eps at a random level, x_t = sqrt(a) x0 + sqrt(1 - a) eps, and the UNet predicts eps from
x_t (mean squared error). Predicting zero scores 1.0; the structure of x0 lets the model do
better. Shows a progress bar with the loss and images/s, prints one metrics line and writes
loss_curve.png, log.txt and metrics.json to --out-dir (default runs/train_unet/).
"""

import _common
from _data import noised_images
from models.unet import UNet, UNetConfig


def main():
    parser = _common.build_parser(__doc__, steps=200, batch=16, lr=2e-3, log_every=20)
    parser.add_argument("--size", type=int, default=32, help="image height and width (a multiple of 4)")
    parser.add_argument("--base", type=int, default=16, help="channels of the first level")
    args = parser.parse_args()
    if args.size % 4:
        parser.error("--size must be a multiple of 4 (the UNet halves it twice)")
    cfg = UNetConfig(in_channels=3, base=args.base, groups=4)
    _common.run(_common.Example(
        name="UNet", make_model=lambda: UNet(cfg), make_batches=lambda: noised_images(args.batch, args.size),
        loss=lambda model, batch: model(*batch), unit="images", items_per_step=args.batch,
        describe=f"base {args.base}, batch {args.batch} x {args.size}x{args.size} images, noise prediction",
        baseline=1.0), args)


if __name__ == "__main__":
    main()
