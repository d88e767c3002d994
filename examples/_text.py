"""What the language-model examples (Llama, Qwen3, minGPT) share: size flags, the toy-corpus
data and the next-byte loss. The byte vocabulary makes ln(256) = 5.55 the uniform-guess loss."""

import math

from _common import Example
from _data import text_batches

VOCAB = 256


def add_size_args(parser, dim=128, layers=2, seq=64):
    parser.add_argument("--seq", type=int, default=seq, help="tokens per sequence")
    parser.add_argument("--dim", type=int, default=dim, help="model width")
    parser.add_argument("--layers", type=int, default=layers)


def language_model(args, name, make_model, **fields):
    """An Example training `make_model()` (a model whose forward(tokens, targets) returns the
    cross-entropy loss) on windows of the toy corpus."""
    return Example(name=name, make_model=make_model, make_batches=lambda: text_batches(args.batch, args.seq),
                   loss=lambda model, batch: model(*batch), unit="tokens", items_per_step=args.batch * args.seq,
                   describe=f"{args.layers} layers, dim {args.dim}, batch {args.batch} x {args.seq} tokens",
                   baseline=math.log(VOCAB), **fields)
