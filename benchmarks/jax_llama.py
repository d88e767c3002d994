"""The Llama-style training step (forward, backward, AdamW) written in JAX under jax.jit: the XLA
reference for torch.compile(backend="tpu"). It starts from a torch Llama's weights, so both
compute the same losses (checked by benchmarks/compile_step.py).

The step runs on JAX's default device (jaxlib's own CPU client, with jaxlib's build of XLA) or on
`device`, e.g. the PJRT plugin torch_tpu runs on (`jax_plugin.py`): then JAX's program and ours
are compiled and run by the same build of XLA, and what is left between them is the programs and
the host paths.

Only used by benchmarks; jax is not a dependency of torch_tpu.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np


def params_from_torch(model):
    return {k: jnp.asarray(v.detach().cpu().numpy()) for k, v in model.state_dict().items()
            if k not in ("cos", "sin")}


def _rms_norm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rotary(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    t = x.shape[-2]
    cos, sin = cos[:t], sin[:t]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def make_loss(cfg, cos, sin):
    head_dim = cfg.dim // cfg.n_heads
    repeat = cfg.n_heads // cfg.n_kv_heads
    cos, sin = jnp.asarray(cos.numpy()), jnp.asarray(sin.numpy())

    def attention(p, prefix, x):
        b, t, _ = x.shape
        q = (x @ p[prefix + "wq.weight"].T).reshape(b, t, cfg.n_heads, head_dim).transpose(0, 2, 1, 3)
        k = (x @ p[prefix + "wk.weight"].T).reshape(b, t, cfg.n_kv_heads, head_dim).transpose(0, 2, 1, 3)
        v = (x @ p[prefix + "wv.weight"].T).reshape(b, t, cfg.n_kv_heads, head_dim).transpose(0, 2, 1, 3)
        q, k = _rotary(q, cos, sin), _rotary(k, cos, sin)
        k, v = jnp.repeat(k, repeat, axis=1), jnp.repeat(v, repeat, axis=1)
        scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(head_dim)
        mask = jnp.tril(jnp.ones((t, t), dtype=bool))
        scores = jnp.where(mask, scores, -jnp.inf)
        y = jax.nn.softmax(scores, axis=-1) @ v
        return y.transpose(0, 2, 1, 3).reshape(b, t, -1) @ p[prefix + "wo.weight"].T

    def mlp(p, prefix, x):
        h = jax.nn.silu(x @ p[prefix + "w1.weight"].T) * (x @ p[prefix + "w3.weight"].T)
        return h @ p[prefix + "w2.weight"].T

    def loss(p, tokens, targets):
        x = p["embed.weight"][tokens]
        for i in range(cfg.n_layers):
            pre = f"layers.{i}."
            x = x + attention(p, pre + "attn.", _rms_norm(x, p[pre + "attn_norm.weight"], cfg.norm_eps))
            x = x + mlp(p, pre + "mlp.", _rms_norm(x, p[pre + "mlp_norm.weight"], cfg.norm_eps))
        logits = _rms_norm(x, p["norm.weight"], cfg.norm_eps) @ p["lm_head.weight"].T
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

    return loss


def make_step(model, tokens, targets, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8, device=None):
    """A function running one jitted step (state donated) and returning the loss as a float; on
    `device` (default: JAX's default device)."""
    loss_fn = make_loss(model.cfg, model.cos.cpu(), model.sin.cpu())
    b1, b2 = betas

    def _step(params, m, v, t, tokens, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
        t = t + 1
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        new_p, new_m, new_v = {}, {}, {}
        for k in params:
            g = grads[k]
            p = params[k] * (1 - lr * weight_decay)
            new_m[k] = b1 * m[k] + (1 - b1) * g
            new_v[k] = b2 * v[k] + (1 - b2) * g * g
            new_p[k] = p - lr * (new_m[k] / c1) / (jnp.sqrt(new_v[k] / c2) + eps)
        return loss, new_p, new_m, new_v, t

    step_fn = jax.jit(_step, donate_argnums=(0, 1, 2, 3))
    params = params_from_torch(model)
    state = {"p": params, "m": jax.tree.map(jnp.zeros_like, params), "v": jax.tree.map(jnp.zeros_like, params),
             "t": jnp.zeros((), jnp.float32)}
    tokens = jnp.asarray(np.asarray(tokens.cpu()))
    targets = jnp.asarray(np.asarray(targets.cpu()))
    if device is not None:  # the jitted step runs where its arguments are
        state, tokens, targets = jax.device_put((state, tokens, targets), device)

    def arguments():
        return state["p"], state["m"], state["v"], state["t"], tokens, targets

    def step():
        loss, state["p"], state["m"], state["v"], state["t"] = step_fn(*arguments())
        return float(loss)

    # For benchmarks that look at the program (step_programs_vs_jax.py) or where it runs:
    # step.jitted.lower(*step.arguments()) is the step as JAX compiles it.
    step.jitted, step.arguments = step_fn, arguments
    return step
