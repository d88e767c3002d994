"""The zoo by phase (benchmarks/zoo_phases.py): the training step cut into forward, backward and
optimizer, ours compiled against Inductor. The backward and optimizer are differences of measured
loops taken per round; the step bodies it times are the zoo's own (zoo.training_step), which must
do exactly their phase's work."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import zoo  # noqa: E402
import zoo_phases  # noqa: E402


def _loops(forward, forward_backward, step, issue_share=1.0):
    def run(ms):
        return {"all_ms": ms, "issue_ms": [m * issue_share for m in ms], "steps_per_round": 10}
    return {"forward": run(forward), "forward+backward": run(forward_backward), "step": run(step)}


def _results(ours, theirs):
    return {**{f"compiled {p}": v for p, v in ours.items()}, **{f"inductor {p}": v for p, v in theirs.items()},
            "loss_rel_diff": 3e-7}


def test_backward_and_optimizer_are_per_round_differences():
    # Round 2 is slow for every loop (the machine's hiccup): per-round differences cancel it,
    # differences of medians would not.
    ours = _loops([1.0, 3.0, 1.2], [3.0, 6.0, 3.4], [4.0, 8.0, 4.5])
    times = zoo_phases.phase_times(_results(ours, ours), "compiled")
    assert times["forward"] == pytest.approx(1.2)
    assert times["backward"] == pytest.approx(2.2)  # median of 2.0, 3.0, 2.2
    assert times["optimizer"] == pytest.approx(1.1)  # median of 1.0, 2.0, 1.1
    assert times["step"] == pytest.approx(4.5)


def test_ratios_are_inductors_time_over_ours_and_host_share_is_reported():
    ours = _loops([1.0, 1.0, 1.0], [5.0, 5.0, 5.0], [6.0, 6.0, 6.0], issue_share=0.5)
    theirs = _loops([2.0, 2.0, 2.0], [4.0, 4.0, 4.0], [4.5, 4.5, 4.5])
    rows, summary = zoo_phases.tabulate({"bert/small": _results(ours, theirs)})
    row = dict(zip(rows[0], rows[1]))
    s = summary["bert/small"]
    assert s["inductor_over_ours"]["forward"] == pytest.approx(2.0)  # ours twice as fast
    assert s["inductor_over_ours"]["backward"] == pytest.approx(0.5)  # 2 ms against 4 ms
    assert s["inductor_over_ours"]["optimizer"] == pytest.approx(0.5)
    assert s["inductor_over_ours"]["step"] == pytest.approx(0.75)
    assert s["host_share"]["step"] == pytest.approx(0.5)
    assert row["backward ms ours / Inductor"] == "4.00 / 2.00"
    assert row["step Inductor/ours"] == "0.75"
    assert row["loss diff vs Inductor"] == "3.0e-07"


def test_a_phase_within_noise_has_no_ratio():
    ours = _loops([1.0, 1.0, 1.0], [5.0, 5.0, 5.0], [6.0, 6.0, 6.0])
    theirs = _loops([2.0, 2.0, 2.0], [4.0, 4.0, 4.0], [3.9, 3.9, 3.9])  # its step timed below its fwd+bwd
    rows, summary = zoo_phases.tabulate({"cnn/small": _results(ours, theirs)})
    assert summary["cnn/small"]["inductor_over_ours"]["optimizer"] is None
    assert dict(zip(rows[0], rows[1]))["optimizer Inductor/ours"] == "n/a"


def test_a_model_whose_run_failed_is_an_error_row():
    rows, summary = zoo_phases.tabulate({"unet/small": {}})
    assert summary["unet/small"] is None
    assert rows[1][0] == "unet/small" and set(rows[1][1:]) == {"error"}


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _phase_on(device, phase):
    torch.manual_seed(0)
    model = _Tiny().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    x, y = torch.randn(4, 8).to(device), torch.tensor([0, 2, 1, 0]).to(device)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    body = zoo.training_step(model, opt, torch.nn.functional.cross_entropy, "eager", phase)
    loss = body((x,), y)
    return loss, before, model


@pytest.mark.parametrize("phase", zoo.PHASES)
def test_each_phase_does_its_work_and_nothing_more_like_cpu(phase):
    loss, before, model = _phase_on("tpu", phase)
    cpu_loss, _, cpu_model = _phase_on("cpu", phase)
    assert not loss.requires_grad
    torch.testing.assert_close(loss.cpu(), cpu_loss)
    params = list(model.parameters())
    if phase == "forward":
        assert all(p.grad is None for p in params)
    else:
        for p, q in zip(params, cpu_model.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)
    moved = [not torch.equal(p.detach().cpu(), b) for p, b in zip(params, before)]
    assert all(moved) if phase == "step" else not any(moved)
    for p, q in zip(params, cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="phase 'backward'"):
        zoo.training_step(_Tiny(), None, torch.nn.functional.cross_entropy, "eager", "backward")


def test_configs_take_name_or_name_and_size():
    assert zoo.configs("mlp,bert:small", "small,medium") == [("mlp", "small"), ("mlp", "medium"), ("bert", "small")]


def test_one_model_runs_every_phase_and_its_losses_agree_with_inductor():
    res = zoo_phases.run_one("mlp", "small", rounds=1, round_seconds=0.01)
    assert res["loss_rel_diff"] < 1e-4
    for backend in zoo_phases.BACKENDS:
        for phase in zoo.PHASES:
            run = res[f"{backend} {phase}"]
            assert len(run["all_ms"]) == 1 and run["all_ms"][0] > 0
            assert 0 < run["issue_ms"][0] <= run["all_ms"][0]
    rows, summary = zoo_phases.tabulate({"mlp/small": res})
    assert summary["mlp/small"] is not None and "error" not in rows[1]
