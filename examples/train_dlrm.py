"""Train DLRM (embedding bags, bottom/top MLPs, dot-product interactions) to predict clicks on
the `tpu` device.

    python examples/train_dlrm.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                  [--amp] [--tables N,N,...] [--per-bag K] [--check-cpu N] [--out-dir DIR]

A click is 1 when a hidden linear score of the dense features plus per-id scores of the sparse
ids is positive, so the binary cross-entropy falls from ln(2) = 0.69 towards 0. Every bag holds
--per-bag ids (static shapes). Shows a progress bar with the loss and samples/s, prints one
metrics line and writes loss_curve.png, log.txt and metrics.json to --out-dir (default
runs/train_dlrm/).
"""

import math

import _common
from _data import click_batches
from models.dlrm import DLRM, DLRMConfig


def main():
    parser = _common.build_parser(__doc__, steps=300, batch=128, lr=1e-2)
    parser.add_argument("--tables", default="100,50,80", help="rows of each embedding table")
    parser.add_argument("--per-bag", type=int, default=2, help="sparse ids per sample and table")
    parser.add_argument("--dim", type=int, default=16, help="embedding width")
    args = parser.parse_args()
    try:
        tables = [int(n) for n in args.tables.split(",")]
    except ValueError:
        parser.error(f"--tables takes comma-separated table sizes, got {args.tables!r}")
    cfg = DLRMConfig(dense_features=13, table_sizes=tables, embedding_dim=args.dim, bottom=[32, args.dim],
                     top=[32, 1])
    _common.run(_common.Example(
        name="DLRM", make_model=lambda: DLRM(cfg),
        make_batches=lambda: click_batches(args.batch, cfg.dense_features, tables, args.per_bag),
        loss=lambda model, batch: model(*batch), unit="samples", items_per_step=args.batch,
        describe=f"tables {args.tables} x dim {args.dim}, batch {args.batch} x {args.per_bag} ids per bag",
        baseline=math.log(2)), args)


if __name__ == "__main__":
    main()
