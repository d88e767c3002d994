"""The OpInfo sweep compares random ops as distributions (conformance/random_compare.py): a correct
random op passes; a planted wrong distribution (scale, shift, keep probability, a wrong
deterministic part, NaNs) is a mismatch; OpInfo's fixed-seed wrappers still give independent
draws; uninitialized outputs are never passes."""

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the tpu device)

from conformance import opinfo_sweep as sweep
from conformance import random_compare
from test_conformance_tool import FakeOpInfo, _on_tpu, _samples


@pytest.fixture
def random_names(monkeypatch):
    """Makes the fake entries of a test random ops for the sweep."""

    def add(*names):
        monkeypatch.setattr(sweep, "RANDOM_OPS", sweep.RANDOM_OPS | set(names))

    return add


def _forward(op, dtype="float32"):
    result = sweep.check_op(op, [dtype], backward=False)
    return result["dtypes"][dtype]["forward"], result["dtypes"][dtype].get("messages", {})


def _dropout(p, keep_on_tpu=None, scale_on_tpu=None):
    def fn(x):
        if not _on_tpu(x):
            return torch.nn.functional.dropout(x, p=p)
        keep = 1 - p if keep_on_tpu is None else keep_on_tpu
        scale = 1 / (1 - p) if scale_on_tpu is None else scale_on_tpu
        return x * (torch.rand_like(x) < keep) * scale

    return fn


@pytest.mark.parametrize("name,fn", [
    ("rand_like", torch.rand_like),
    ("randn_like", torch.randn_like),
    ("bernoulli", lambda x: torch.bernoulli(x / 8)),
    ("dropout", _dropout(0.5)),
    ("randint_like", lambda x: torch.randint_like(x, 0, 7)),
    ("multinomial", lambda x: torch.multinomial(x, 3)),
])
def test_a_correct_random_op_passes(name, fn, random_names):
    random_names("fake_" + name)
    fwd, messages = _forward(FakeOpInfo("fake_" + name, fn, [torch.float32], _samples()))
    assert fwd["pass"] == 2 and fwd["mismatch"] == 0 and fwd["random"] == 0, (fwd, messages)


@pytest.mark.parametrize("name,fn", [
    ("uniform_scaled", lambda x: torch.rand_like(x) * (0.9 if _on_tpu(x) else 1.0)),
    ("normal_shifted", lambda x: torch.randn_like(x) + (0.15 if _on_tpu(x) else 0.0)),
    ("normal_wider", lambda x: torch.randn_like(x) * (1.15 if _on_tpu(x) else 1.0)),
    ("dropout_keeps_too_many", _dropout(0.5, keep_on_tpu=0.6)),
    ("dropout_wrong_scale", _dropout(0.5, scale_on_tpu=2.01)),
    ("bernoulli_wrong_p", lambda x: torch.bernoulli(torch.full_like(x, 0.3 if _on_tpu(x) else 0.25))),
    ("nan_on_tpu", lambda x: torch.where(torch.rand_like(x) < (0.05 if _on_tpu(x) else 0.0),
                                         float("nan"), torch.rand_like(x))),
])
def test_a_planted_wrong_distribution_is_a_mismatch(name, fn, random_names):
    random_names("fake_" + name)
    fwd, messages = _forward(FakeOpInfo("fake_" + name, fn, [torch.float32], _samples()))
    assert fwd["mismatch"] == 2 and fwd["pass"] == 0, (fwd, messages)
    assert messages["forward"].startswith("mismatch: output 0")


def test_a_wrong_gradient_of_a_random_op_is_a_mismatch(random_names):
    """Backward of a random op is compared the same way (dropout's gradient with a wrong scale)."""

    class WrongGradDropout(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            mask = (torch.rand_like(x) < 0.5).to(x.dtype) * 2
            ctx.save_for_backward(mask)
            return x * mask

        @staticmethod
        def backward(ctx, grad):
            (mask,) = ctx.saved_tensors
            return grad * mask * (1.1 if _on_tpu(grad) else 1.0)

    def samples(dtype, requires_grad):
        out = _samples()(dtype, requires_grad)
        for s in out:
            s.input.requires_grad_(requires_grad)
        return out

    random_names("fake_grad")
    op = FakeOpInfo("fake_grad", WrongGradDropout.apply, [torch.float32], samples, supports_autograd=True)
    result = sweep.check_op(op, ["float32"], backward=True)
    f32 = result["dtypes"]["float32"]
    assert f32["forward"]["pass"] == 2, result
    assert f32["backward"]["mismatch"] == 2, result


def test_fixed_seed_wrappers_still_draw_independently(random_names):
    """OpInfo wraps random ops in `wrapper_set_seed` (torch.manual_seed(42) before every call);
    the comparison's draws must still differ, or it would compare one draw many times."""
    from torch.testing._internal.common_methods_invocations import wrapper_set_seed

    draws = []

    def seeded(x):
        out = wrapper_set_seed(torch.rand_like, x)
        draws.append(out.detach().cpu())
        return out

    random_names("fake_seeded")
    fwd, messages = _forward(FakeOpInfo("fake_seeded", seeded, [torch.float32], _samples(count=1)))
    assert fwd["pass"] == 1, (fwd, messages)
    assert len(draws) >= 2 * random_compare.MIN_DRAWS
    distinct = {tuple(d.reshape(-1).tolist()) for d in draws}
    assert len(distinct) >= len(draws) - 2  # the first draw on each device used seed 42


def test_the_real_manual_seed_is_restored():
    real = torch.manual_seed
    with random_compare._FreshSeeds(torch, 7):
        assert torch.manual_seed is not real
    assert torch.manual_seed is real


def test_deterministic_output_equal_within_tolerance_passes(random_names):
    """A 'random' op whose output happens to be deterministic (dropout with p=0) matches as any
    other op: exactly equal values pass, a tiny rounding difference within tolerance passes."""
    random_names("fake_p0")
    fn = lambda x: torch.nn.functional.dropout(x, p=0.0) * (1 + 1e-7 if _on_tpu(x) else 1.0)  # noqa: E731
    fwd, messages = _forward(FakeOpInfo("fake_p0", fn, [torch.float32], _samples()))
    assert fwd["pass"] == 2, (fwd, messages)


def test_uninitialized_outputs_are_never_passes(random_names):
    random_names("empty_like")
    fwd, _ = _forward(FakeOpInfo("empty_like", torch.empty_like, [torch.float32], _samples()))
    assert fwd["random"] == 2 and fwd["pass"] == 0


def test_low_rank_factorizations_are_compared_sign_free():
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    s = torch.tensor([2.0, 3.0])
    flipped = random_compare._low_rank_product((-u, s, -u))[0]
    assert torch.equal(flipped, random_compare._low_rank_product((u, s, u))[0])
    assert torch.equal(flipped, torch.diag(s))


def test_compare_leaf_needs_z_above_threshold():
    """The statistic: equal distributions give no problem; a shifted one names the point."""
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(100, 200, generator=gen, dtype=torch.float64)
    b = torch.rand(100, 200, generator=gen, dtype=torch.float64)
    assert random_compare.compare_leaf(torch, a, b, 1.3e-5, 1e-4) is None
    problem = random_compare.compare_leaf(torch, a + 0.05, b, 1.3e-5, 1e-4)
    assert problem is not None and problem.startswith("distribution differs: fraction <=")
