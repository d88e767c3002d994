"""Train a small Llama-style language model on the `tpu` device.

    python examples/train_llama.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                   [--amp] [--check-cpu N] [--out-dir DIR]
    torchrun --standalone --nproc_per_node=2 examples/train_llama.py --ddp    # or --fsdp

The corpus is synthetic but learnable: byte sequences made of short words drawn from a fixed
vocabulary with a fixed grammar (each word is usually followed by one of a few others), so the
loss falls well below the uniform-guess level of ln(256) = 5.55 within a few hundred steps.
Shows a progress bar, prints the loss every --log-every steps and one metrics line (final loss,
tokens/s after warm-up, compiled programs, CPU fallbacks); writes log.txt, metrics.json and
loss_curve.png to --out-dir (default runs/train_llama/). --check-cpu also runs the first steps
on the CPU from the same initial weights and reports how far the two loss curves are apart.

--ddp / --fsdp (under torchrun) train data-parallel over the `tpu_dist` backend: every rank takes
its slice of each global batch, so the loss curve is the single-process one on the same batches.
"""

import _common
import _text
from models.llama import Llama, LlamaConfig


def main():
    parser = _common.build_parser(__doc__, steps=300, batch=16, lr=3e-3, parallel=True)
    _text.add_size_args(parser)
    args = parser.parse_args()
    cfg = LlamaConfig(vocab_size=_text.VOCAB, dim=args.dim, n_layers=args.layers, n_heads=4, n_kv_heads=2,
                      hidden_dim=args.dim * 4, max_seq_len=args.seq)
    _common.run(_text.language_model(args, "Llama", lambda: Llama(cfg), fsdp_units=lambda model: model.layers), args)


if __name__ == "__main__":
    main()
