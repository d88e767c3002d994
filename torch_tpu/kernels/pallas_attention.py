"""A causal flash-attention kernel written in Pallas: blocked over queries (the grid) and keys
(an online-softmax loop), run as ``torch_tpu.kernels.pallas_attention.attention(q, k, v)`` on
[batch, heads, seq, head_dim] tensors. ``interpret=True`` (the default off TPU) lowers it to
plain StableHLO, which the XLA CPU plugin runs. Backward: a jax.custom_vjp that recomputes the
probabilities in plain JAX (Pallas calls are not differentiable by JAX itself).

JAX is imported only when the kernel is first traced."""

import functools
import math

from .jax_op import jax_op


def _flash_forward(q, k, v, block_q, block_k, causal, interpret):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    bh, t, d = q.shape
    scale = 1.0 / math.sqrt(d)

    def kernel(q_ref, k_ref, v_ref, o_ref):
        qi = pl.program_id(1)
        qb = q_ref[0].astype(jnp.float32) * scale                    # [block_q, d]
        rows = qi * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)

        def body(j, carry):
            m, l, acc = carry
            kb = k_ref[0, pl.ds(j * block_k, block_k), :].astype(jnp.float32)
            vb = v_ref[0, pl.ds(j * block_k, block_k), :].astype(jnp.float32)
            s = qb @ kb.T
            if causal:
                cols = j * block_k + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
                s = jnp.where(cols <= rows, s, -jnp.inf)
            m_new = jnp.maximum(m, s.max(axis=-1))
            p = jnp.exp(s - m_new[:, None])
            corr = jnp.exp(m - m_new)
            return m_new, l * corr + p.sum(axis=-1), acc * corr[:, None] + p @ vb

        init = (jnp.full((block_q,), -jnp.inf, jnp.float32), jnp.zeros((block_q,), jnp.float32),
                jnp.zeros((block_q, d), jnp.float32))
        _, l, acc = jax.lax.fori_loop(0, t // block_k, body, init)
        o_ref[0] = (acc / l[:, None]).astype(o_ref.dtype)

    spec_q = pl.BlockSpec((1, block_q, d), lambda b, i: (b, i, 0))
    spec_kv = pl.BlockSpec((1, t, d), lambda b, i: (b, 0, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(bh, t // block_q),
                          in_specs=[spec_q, spec_kv, spec_kv], out_specs=spec_q, interpret=interpret)(q, k, v)


def _reference_probs(q, k, causal):
    import jax
    import jax.numpy as jnp
    s = (q.astype(jnp.float32) @ jnp.swapaxes(k.astype(jnp.float32), -1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1)


@functools.lru_cache(maxsize=None)
def _flash(block_q, block_k, causal, interpret):
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def flash(q, k, v):
        return _flash_forward(q, k, v, block_q, block_k, causal, interpret)

    def fwd(q, k, v):
        return flash(q, k, v), (q, k, v)

    def bwd(res, g):
        q, k, v = res
        p = _reference_probs(q, k, causal)                          # [bh, t, t]
        g32 = g.astype(jnp.float32)
        dv = jnp.swapaxes(p, -1, -2) @ g32
        dp = g32 @ jnp.swapaxes(v.astype(jnp.float32), -1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / math.sqrt(q.shape[-1])
        dq = ds @ k.astype(jnp.float32)
        dk = jnp.swapaxes(ds, -1, -2) @ q.astype(jnp.float32)
        return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)

    flash.defvjp(fwd, bwd)
    return flash


@jax_op("torch_tpu::pallas_flash_attention", static_argnames=("block_q", "block_k", "causal", "interpret"))
def attention(q, k, v, block_q=16, block_k=16, causal=True, interpret=True):
    """softmax(q k^T / sqrt(d) [+ causal mask]) v for [batch, heads, seq, head_dim] arrays;
    seq must be a multiple of block_q and block_k."""
    b, h, t, d = q.shape
    if t % block_q or t % block_k:
        raise ValueError(f"sequence length {t} must be a multiple of block_q={block_q} and block_k={block_k}")
    flat = lambda x: x.reshape(b * h, t, d)
    out = _flash(block_q, block_k, causal, interpret)(flat(q), flat(k), flat(v))
    return out.reshape(b, h, t, d)
