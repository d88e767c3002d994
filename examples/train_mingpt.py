"""Train minGPT (GPT-2 style: LayerNorm, causal self-attention, GELU MLP, dropout) on the
`tpu` device, on the toy byte corpus of train_llama.py.

    python examples/train_mingpt.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                    [--amp] [--dropout P] [--check-cpu N] [--out-dir DIR]

Shows a progress bar with the loss and tokens/s, prints one metrics line and writes
loss_curve.png, log.txt and metrics.json to --out-dir (default runs/train_mingpt/). Dropout
draws different random masks on the device and on the CPU: use --dropout 0 with --check-cpu.
"""

import _common
import _text
from models.mingpt import GPT, GPTConfig


def main():
    parser = _common.build_parser(__doc__, steps=300, batch=16, lr=1e-3)
    _text.add_size_args(parser)
    parser.add_argument("--dropout", type=float, default=0.1)
    args = parser.parse_args()
    cfg = GPTConfig(vocab_size=_text.VOCAB, block_size=args.seq, n_layer=args.layers, n_head=4, n_embd=args.dim,
                    dropout=args.dropout)
    _common.run(_text.language_model(args, "minGPT", lambda: GPT(cfg)), args)


if __name__ == "__main__":
    main()
