"""Train a small Qwen3-style language model (Llama plus per-head query/key RMSNorm, tied
embeddings) on the `tpu` device, on the toy byte corpus of train_llama.py.

    python examples/train_qwen3.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                   [--amp] [--check-cpu N] [--out-dir DIR]

Shows a progress bar with the loss and tokens/s, prints one metrics line and writes
loss_curve.png, log.txt and metrics.json to --out-dir (default runs/train_qwen3/).
"""

import torch

import _common
import _text
from models.qwen3 import Qwen3, Qwen3Config


def make_model(cfg):
    """Qwen3 with the small embedding init of its release: the embedding is tied to the output
    layer, and nn.Embedding's unit-variance init would start the loss far above ln(256)."""
    model = Qwen3(cfg)
    with torch.no_grad():
        model.embed.weight.normal_(0.0, 0.02)
    return model


def main():
    parser = _common.build_parser(__doc__, steps=300, batch=16, lr=3e-3)
    _text.add_size_args(parser)
    args = parser.parse_args()
    cfg = Qwen3Config(vocab_size=_text.VOCAB, dim=args.dim, n_layers=args.layers, n_heads=4, n_kv_heads=2,
                      hidden_dim=args.dim * 3, max_seq_len=args.seq)
    _common.run(_text.language_model(args, "Qwen3", lambda: make_model(cfg)), args)


if __name__ == "__main__":
    main()
