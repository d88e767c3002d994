"""Single ops of the zoo's models under torch.compile: where compiled code loses to Inductor, is it
ours or XLA:CPU's code for that op? (issue 27, part 3)

    python benchmarks/op_kernels.py [--rounds 5] [--round-seconds 0.3] [--cases conv,...] [--no-write]

Each case is one op (or one op's forward and backward) at the shapes of a zoo model that compiles
slower than Inductor (benchmarks/zoo.py: the UNet and the ResNet-style CNN, the small BERT and MLP,
the LSTM). Contenders: torch.compile(backend="tpu") (each call one program: the op's own lowering
in XLA's CPU code), Inductor and PyTorch CPU eager, interleaved in rounds of about
``--round-seconds`` after a warm-up, medians of the per-round times. A case with ``backward`` runs
the compiled forward and then ``backward()`` through the compiled backward, as a training step
does. Every contender's results are checked against CPU eager's.

Writes results/op_kernels.{json,md}.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_tpu  # noqa: E402,F401

from _results import write  # noqa: E402

CONTENDERS = ("tpu compiled", "inductor", "cpu eager")


def _conv(n, c, h, o):
    return dict(inputs=lambda g: (torch.randn(n, c, h, h, generator=g), torch.randn(o, c, 3, 3, generator=g) * 0.1),
                fn=lambda x, w: F.conv2d(x, w, padding=1))


def _conv_grad(n, c, h, o, which):
    """One output of aten.convolution_backward: the input's gradient or the weight's."""
    mask = [which == "input", which == "weight", False]
    index = 0 if which == "input" else 1

    def fn(go, x, w):
        return torch.ops.aten.convolution_backward(go, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   mask)[index]

    return dict(inputs=lambda g: (torch.randn(n, o, h, h, generator=g), torch.randn(n, c, h, h, generator=g),
                                  torch.randn(o, c, 3, 3, generator=g) * 0.1),
                fn=fn)


def _group_norm(n, c, h):
    return dict(inputs=lambda g: (torch.randn(n, c, h, h, generator=g), torch.randn(c, generator=g),
                                  torch.randn(c, generator=g)),
                fn=lambda x, w, b: F.silu(F.group_norm(x, 4, w, b)), backward=True)


def _layer_norm_gelu(rows, d):
    return dict(inputs=lambda g: (torch.randn(rows, d, generator=g), torch.randn(d, generator=g),
                                  torch.randn(d, generator=g)),
                fn=lambda x, w, b: F.gelu(F.layer_norm(x, (d,), w, b)), backward=True)


def _linear(rows, d_in, d_out):
    return dict(inputs=lambda g: (torch.randn(rows, d_in, generator=g), torch.randn(d_out, d_in, generator=g) * 0.1,
                                  torch.randn(d_out, generator=g)),
                fn=F.linear, backward=True)


def _attention(batch, heads, seq, dim):
    def inputs(g):
        q, k, v = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(3))
        lengths = torch.randint(seq // 4, seq + 1, (batch,), generator=g)
        keep = torch.arange(seq)[None, :] < lengths[:, None]
        return q, k, v, keep[:, None, None, :]

    return dict(inputs=inputs, fn=lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                backward=True, grads=3)


def _lstm(batch, seq, d):
    def inputs(g):
        return (torch.randn(batch, seq, d, generator=g), torch.randn(4 * d, d, generator=g) * 0.1,
                torch.randn(4 * d, d, generator=g) * 0.1, torch.randn(4 * d, generator=g) * 0.1)

    def fn(x, w_ih, w_hh, b):
        return torch._VF.lstm(x, (x.new_zeros(1, batch, d), x.new_zeros(1, batch, d)), (w_ih, w_hh, b, b),
                              True, 1, 0.0, True, False, True)[0]

    return dict(inputs=inputs, fn=fn, backward=True)


# name -> (zoo model it stands for, case)
CASES = {
    "conv 8x32x64x64 fwd": ("unet/medium", _conv(8, 32, 64, 32)),
    "conv 8x32x64x64 grad input": ("unet/medium", _conv_grad(8, 32, 64, 32, "input")),
    "conv 8x32x64x64 grad weight": ("unet/medium", _conv_grad(8, 32, 64, 32, "weight")),
    "conv 4x16x32x32 fwd": ("unet/small", _conv(4, 16, 32, 16)),
    "conv 4x16x32x32 grad weight": ("unet/small", _conv_grad(4, 16, 32, 16, "weight")),
    "conv 16x64x16x16 grad weight": ("cnn", _conv_grad(16, 64, 16, 64, "weight")),
    "group_norm+silu 8x32x64x64 fwd+bwd": ("unet/medium", _group_norm(8, 32, 64)),
    "layer_norm+gelu 256x64 fwd+bwd": ("bert/small", _layer_norm_gelu(256, 64)),
    "linear 64x128x128 fwd+bwd": ("mlp/small", _linear(64, 128, 128)),
    "sdpa masked 8x4x32x16 fwd+bwd": ("bert/small", _attention(8, 4, 32, 16)),
    "lstm 16x64x256 fwd+bwd": ("lstm/medium", _lstm(16, 64, 256)),
}


class Contender:
    def __init__(self, label, case):
        self.label = label
        device = "tpu" if label == "tpu compiled" else "cpu"
        self.device = device
        self.backward = case.get("backward", False)
        self.grads = case.get("grads", 1)
        self.inputs = [t.to(device) for t in case["inputs"](torch.Generator().manual_seed(0))]
        if self.backward:
            for t in self.inputs[: self.grads]:
                t.requires_grad_(True)
        fn = case["fn"]
        self.fn = (torch.compile(fn, backend="tpu") if label == "tpu compiled"
                   else torch.compile(fn) if label == "inductor" else fn)
        self.seconds = []

    def call(self):
        out = self.fn(*self.inputs)
        if not self.backward:
            return [out]
        for t in self.inputs[: self.grads]:
            t.grad = None
        out.sum().backward()
        return [out.detach()] + [t.grad for t in self.inputs[: self.grads]]

    def sync(self):
        if self.device == "tpu":
            torch.tpu.synchronize()

    def run(self, iters):
        self.sync()
        start = time.perf_counter()
        for _ in range(iters):
            self.call()
        self.sync()
        return (time.perf_counter() - start) / iters


def check(contender, reference):
    got = [t.detach().cpu() for t in contender.call()]
    for a, b in zip(got, reference):
        if not torch.allclose(a, b, rtol=1e-3, atol=1e-3 * max(1.0, b.abs().max().item())):
            raise AssertionError(f"{contender.label}: differs from CPU eager by {(a - b).abs().max().item():.3g}")


def run_case(name, case, rounds, round_seconds):
    contenders = [Contender(label, case) for label in CONTENDERS]
    reference = [t.detach().clone() for t in contenders[-1].call()]
    iters = {}
    for c in contenders:
        check(c, reference)
        c.run(3)  # compiles
        per_call = c.run(5)
        iters[c.label] = max(3, min(2000, round(round_seconds / per_call)))
    for _ in range(rounds):
        for c in contenders:
            c.seconds.append(c.run(iters[c.label]))
    return {c.label: statistics.median(c.seconds) * 1e3 for c in contenders}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.3)
    parser.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    wanted = [w for w in args.cases.split(",") if w]
    results = {}
    table = [["op", "zoo model", "tpu compiled ms", "inductor ms", "cpu eager ms", "tpu vs Inductor"]]
    for name, (model, case) in CASES.items():
        if wanted and not any(w in name for w in wanted):
            continue
        ms = run_case(name, case, args.rounds, args.round_seconds)
        ratio = ms["inductor"] / ms["tpu compiled"]
        results[name] = {"model": model, "ms": ms, "tpu_vs_inductor": ratio}
        table.append([name, model, f"{ms['tpu compiled']:.3f}", f"{ms['inductor']:.3f}", f"{ms['cpu eager']:.3f}",
                      f"{ratio:.2f}x"])
        print(" | ".join(table[-1]), flush=True)
    notes = [
        "tpu vs Inductor: Inductor's time over ours (above 1: ours faster). Medians of "
        f"{args.rounds} rounds of ~{args.round_seconds} s per contender, interleaved; results checked against "
        "CPU eager. Forward-only cases are one program per call; fwd+bwd cases a forward and a backward "
        "program (the sum's seed included), as in a compiled training step.",
        "Inductor and CPU eager call oneDNN for convolutions and matrix products; ours runs XLA:CPU's code "
        "for the same op (YNNPACK convolutions and dots after NCHW -> NHWC transposes, XLA's fused loops), except "
        "float32 convolutions of at least TORCH_TPU_HOST_CONV_MIN_MACS multiply-adds (default 1e8: here the "
        "8x32x64x64 and 16x64x16x16 ones), which call the same oneDNN kernel from inside the program (host kernel "
        "torch_tpu_conv); run with TORCH_TPU_HOST_KERNELS=0 to see XLA's convolution for them.",
    ]
    if not args.no_write:
        write("op_kernels", "Single ops under torch.compile: tpu (XLA:CPU) vs Inductor and CPU eager",
              {"cases": results, "rounds": args.rounds, "round_seconds": args.round_seconds}, table, notes)


if __name__ == "__main__":
    main()
