"""A tiny Llama whose attention is a Pallas flash-attention kernel (torch_tpu.kernels), trained
side by side with the same model using PyTorch's scaled_dot_product_attention.

    python examples/llama_pallas_attention.py [--steps N] [--mode strict|fused] [--compile]

Both models start from the same weights and see the same batches; the script prints both loss
curves, checks that the loss falls and that the two curves agree within --tol, and exits non-zero
otherwise. The kernel (torch_tpu/kernels/pallas_attention.py) is written with
jax.experimental.pallas in interpret mode, which lowers to plain StableHLO: it runs on the XLA
CPU plugin, and is compiled into the same programs as the rest of the step (a func.call).
Needs JAX (pip install jax).
"""

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import torch_tpu  # noqa: E402
from models.llama import Attention, Llama, LlamaConfig, apply_rotary  # noqa: E402
from torch_tpu.execution_mode import mode  # noqa: E402
from torch_tpu.kernels.pallas_attention import attention as pallas_attention  # noqa: E402


class PallasAttention(Attention):
    """Llama attention with SDPA replaced by the Pallas kernel (same projections and RoPE)."""

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        repeat = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        # The kernel takes contiguous [batch, heads, seq, head_dim] arrays.
        y = pallas_attention(q.contiguous(), k.contiguous(), v.contiguous(), block_q=8, block_k=8)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


def batches(cfg, steps, batch, seq, seed=0):
    """A learnable toy language: each sequence counts up by a random stride (mod vocab)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, cfg.vocab_size, (batch, 1), generator=g)
        stride = torch.randint(1, 4, (batch, 1), generator=g)
        tokens = (start + stride * torch.arange(seq + 1)) % cfg.vocab_size
        yield tokens[:, :-1], tokens[:, 1:]


def train(model, cfg, args):
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    def step(tokens, targets):
        loss = model(tokens, targets)
        loss.backward()
        return loss

    run = torch.compile(step, backend="tpu") if args.compile else step
    losses = []
    with mode(args.mode):
        for tokens, targets in batches(cfg, args.steps, args.batch, args.seq):
            loss = run(tokens.to("tpu"), targets.to("tpu"))
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mode", choices=["strict", "fused"], default="strict")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--tol", type=float, default=1e-3, help="largest allowed loss difference")
    args = parser.parse_args(argv)

    cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=64,
                      max_seq_len=args.seq)
    torch.manual_seed(0)
    reference = Llama(cfg)
    pallas = copy.deepcopy(reference)
    for block in pallas.layers:
        old = block.attn
        block.attn = PallasAttention(cfg)
        block.attn.load_state_dict(old.state_dict())
    reference.to("tpu")
    pallas.to("tpu")

    torch_tpu.reset_fallback_counts()
    ref_losses = train(reference, cfg, args)
    pallas_losses = train(pallas, cfg, args)
    diff = max(abs(a - b) for a, b in zip(ref_losses, pallas_losses))
    for i, (a, b) in enumerate(zip(ref_losses, pallas_losses)):
        print(f"step {i:3d}  sdpa {a:.5f}  pallas {b:.5f}")
    print(f"metrics: final_loss_pallas={pallas_losses[-1]:.5f} final_loss_sdpa={ref_losses[-1]:.5f} "
          f"max_loss_diff={diff:.2e} cpu_fallbacks={sum(torch_tpu.fallback_counts().values())}")
    ok = pallas_losses[-1] < pallas_losses[0] and diff <= args.tol
    if not ok:
        print("FAILED: the loss did not fall or the curves differ by more than --tol", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
