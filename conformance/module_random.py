"""Statistical checks for random modules in train mode (Dropout family, RReLU): their tpu results
cannot equal the CPU's, so each output is checked against what the module promises: every
element is either kept (scaled) or dropped, whole channels at a time for the feature dropouts,
at a keep rate consistent with 1 - p; RReLU's negative slopes lie in [lower, upper] with the
expected mean. Gradients must follow the same mask (or slopes)."""

import math

import torch

RANDOM_IN_TRAIN = ("nn.Dropout", "nn.Dropout1d", "nn.Dropout2d", "nn.Dropout3d", "nn.AlphaDropout",
                   "nn.FeatureAlphaDropout", "nn.RReLU")

# Trailing dimensions that share one random draw (a "unit") for the feature dropouts.
_SHARED_DIMS = {"nn.Dropout1d": 1, "nn.Dropout2d": 2, "nn.Dropout3d": 3}
_SELU_ALPHA = 1.7580993408473766  # alpha * scale of SELU: AlphaDropout's saturation value


def is_random(name, training):
    return training and name in RANDOM_IN_TRAIN


def _close(a, b, dtype):
    rtol, atol = (2e-2, 2e-2) if dtype in (torch.bfloat16, torch.float16) else (1e-5, 1e-6)
    return (a - b).abs() <= atol + rtol * b.abs()


def _rate_problem(what, hits, total, expected):
    """None when `hits` of `total` is a plausible draw at rate `expected` (6 standard deviations)."""
    if total == 0:
        return None
    rate = hits / total
    if expected in (0.0, 1.0):
        return None if rate == expected else f"{what} {rate:.3f}, expected exactly {expected}"
    sigma = math.sqrt(expected * (1 - expected) / total)
    if abs(rate - expected) > 6 * sigma:
        return f"{what} {rate:.3f} over {total} draws, expected {expected:.3f} +- {6 * sigma:.3f}"
    return None


def _kept_and_dropped(name, module, x):
    """(kept value, dropped value, gradient where kept, units' leading dims) for a dropout module."""
    p = float(module.p)
    if name in ("nn.AlphaDropout", "nn.FeatureAlphaDropout"):
        a = 1.0 / math.sqrt((_SELU_ALPHA ** 2 * p + 1) * (1 - p)) if p < 1 else 0.0
        kept = x * a + _SELU_ALPHA * a * p
        dropped = torch.full_like(x, -_SELU_ALPHA * a * (1 - p))
        lead = 2 if name == "nn.FeatureAlphaDropout" else x.dim()
        return kept, dropped, a, lead
    scale = 1.0 / (1 - p) if p < 1 else 0.0
    return x * scale, torch.zeros_like(x), scale, x.dim() - _SHARED_DIMS.get(name, 0)


def check_dropout(name, module, x, out, grad=None):
    """None when `out` (and `grad`, the gradient of out.sum() for x) is a valid draw of the
    dropout module `module` (its p; in train mode) on input `x`; else what is wrong. All tensors
    on the CPU."""
    dtype = x.dtype
    x, out = x.detach().double(), out.detach().double()
    kept_value, dropped_value, grad_kept, lead = _kept_and_dropped(name, module, x)
    elem_kept = _close(out, kept_value, dtype)
    elem_dropped = _close(out, dropped_value, dtype)
    units = int(torch.tensor(x.shape[:lead]).prod()) if lead else 1
    kept_u = elem_kept.reshape(units, -1).all(1)
    dropped_u = elem_dropped.reshape(units, -1).all(1)
    bad = int((~kept_u & ~dropped_u).sum())
    if bad:
        return f"{bad} of {units} units are neither kept (scaled) nor dropped as a whole"
    # A unit that fits both (an all-zero input) says nothing about the rate.
    decided = kept_u ^ dropped_u
    problem = _rate_problem("keep rate", int((kept_u & decided).sum()), int(decided.sum()), 1 - float(module.p))
    if problem or grad is None:
        return problem

    def per_element(unit_flags):
        return unit_flags.reshape(units, 1).expand(units, x.numel() // max(units, 1)).reshape(x.shape)

    expected_grad = per_element(kept_u).double() * grad_kept
    wrong = ~_close(grad.detach().double(), expected_grad, dtype) & per_element(decided)
    if wrong.any():
        return f"gradient does not follow the forward mask in {int(wrong.sum())} elements"
    return None


def check_rrelu(module, x, out, grad=None):
    """None when `out` (and `grad`) is a valid train-mode RReLU draw on `x`; else what is wrong."""
    dtype = x.dtype
    x, out = x.detach().double(), out.detach().double()
    lower, upper = float(module.lower), float(module.upper)
    pos = x >= 0
    if not _close(out[pos], x[pos], dtype).all():
        return "non-negative inputs are not passed through unchanged"
    neg = x < 0
    slopes = out[neg] / x[neg]
    slack = 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-5
    if slopes.numel() == 0:
        return None
    if bool((slopes < lower - slack).any() or (slopes > upper + slack).any()):
        return f"negative slopes in [{slopes.min().item():.4g}, {slopes.max().item():.4g}], expected within [{lower}, {upper}]"
    sigma = (upper - lower) / math.sqrt(12 * slopes.numel())
    mean = slopes.mean().item()
    if abs(mean - (lower + upper) / 2) > 6 * sigma + slack:
        return f"mean negative slope {mean:.4g}, expected {(lower + upper) / 2:.4g} +- {6 * sigma:.3g}"
    spread = slopes.std().item() if slopes.numel() > 1 else 0.0
    if slopes.numel() >= 30 and upper > lower and spread < 0.5 * (upper - lower) / math.sqrt(12):
        return f"negative slopes barely vary (std {spread:.3g}): not drawn per element"
    if grad is not None:
        g = grad.detach().double()
        if not (_close(g[pos], torch.ones_like(g[pos]), dtype).all() and _close(g[neg], slopes, dtype).all()):
            return "gradient does not equal the forward slopes"
    return None


def check_random(name, module, x, out, grad=None):
    """The statistical check for random module `name` in train mode."""
    if name == "nn.RReLU":
        return check_rrelu(module, x, out, grad)
    return check_dropout(name, module, x, out, grad)
