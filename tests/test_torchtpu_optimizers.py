"""torch.tpu.optimizers: the functional AdamW, Sgd and Muon against torch.optim on the CPU, and
SingleTraceTrainer - a whole training step (forward, loss, backward, update) as one program per
batch shape, updating the model's parameters, optimizer state and buffers in place."""

import warnings

import pytest
import torch

import torch_tpu
from helpers import assert_close

opt_mod = torch.tpu.optimizers


def _counts(stats):
    """The counters of CapturedPrograms.stats (not the time spent in captures)."""
    return {k: v for k, v in stats.items() if k != "capture_seconds"}


def _mlp(seed=0, norm=torch.nn.LayerNorm):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 24), norm(24), torch.nn.GELU(), torch.nn.Linear(24, 4))


def _batches(n, batch=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 12, generator=g), torch.randn(batch, 4, generator=g)) for _ in range(n)]


def _torch_reference(model, make_opt, batches):
    opt = make_opt(model.parameters())
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


OPTIMIZERS = {
    "adamw": (lambda: opt_mod.AdamW(lr=1e-2, weight_decay=0.05, use_bfloat16_moments=False),
              lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05)),
    "adamw_maximize": (lambda: opt_mod.AdamW(lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-6, maximize=True,
                                             use_bfloat16_moments=False),
                       lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, maximize=True)),
    "sgd": (lambda: opt_mod.Sgd(lr=0.05),
            lambda ps: torch.optim.SGD(ps, lr=0.05)),
    "sgd_momentum": (lambda: opt_mod.Sgd(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
                     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (lambda: opt_mod.Sgd(lr=0.05, momentum=0.9, nesterov=True),
                     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_single_trace_step_equals_torch_optim_on_cpu(name):
    ours, theirs = OPTIMIZERS[name]
    batches = _batches(6)
    ref_model = _mlp()
    ref_losses = _torch_reference(ref_model, theirs, batches)
    model = _mlp().to("tpu")
    trainer = opt_mod.SingleTraceTrainer(model, ours())
    step = trainer.make_compiled_train_step(batches[0][0].to("tpu"), batches[0][1].to("tpu"))
    before = torch.tpu.compilation_cache_stats()["executions"]
    losses = [step(x.to("tpu"), y.to("tpu")) for x, y in batches]  # launched back to back
    executions = torch.tpu.compilation_cache_stats()["executions"] - before
    torch.testing.assert_close(torch.stack(losses).cpu(), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)  # the model holds the trained weights
    assert _counts(trainer.stats) == {"captures": 1, "replays": 5, "rerecorded_steps": 0}
    # One program per step after the capture (the capture itself uploads the step's inputs too).
    assert executions - 1 <= len(batches), executions
    assert set(trainer.params) == {n for n, _ in model.named_parameters()}


def test_optimizers_step_in_eager_code_and_on_cpu():
    """The functional API on its own, as the original documents it, on tpu and CPU tensors."""
    torch.manual_seed(0)
    w = torch.randn(6, 5)
    grads = [torch.randn(6, 5) for _ in range(3)]
    results = {}
    for device in ("cpu", "tpu"):
        opt = opt_mod.AdamW(lr=0.1)  # bfloat16 moments (the default)
        group = opt.init_param_group({"w": w.clone().to(device)})
        assert group.opt_state_m["w"].dtype == torch.bfloat16
        for g in grads:
            assert opt(group, {"w": g.to(device)}) is group
        results[device] = group
    assert_close(results["tpu"].params["w"], results["cpu"].params["w"], rtol=1e-5, atol=1e-6)
    assert_close(results["tpu"].opt_state_v["w"], results["cpu"].opt_state_v["w"])
    assert results["tpu"].opt_steps["w"].item() == 3
    assert dict(opt_mod.AdamW(lr=0.5).defaults)["lr"] == 0.5


def test_muon_equals_torch_muon():
    torch.manual_seed(0)
    ws = [torch.randn(8, 6), torch.randn(5, 9)]
    grads = [[torch.randn_like(w) for w in ws] for _ in range(3)]
    ref = [w.clone().requires_grad_() for w in ws]
    torch_opt = torch.optim.Muon(ref, lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=True)
    for gs in grads:
        for p, g in zip(ref, gs):
            p.grad = g.clone()
        torch_opt.step()
    ours = opt_mod.Muon(lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=True)
    group = ours.init_param_group({f"w{i}": w.clone().to("tpu") for i, w in enumerate(ws)})
    for gs in grads:
        ours.step(group, {f"w{i}": g.to("tpu") for i, g in enumerate(gs)})
    for i, p in enumerate(ref):
        # Newton-Schulz runs in bfloat16 in both: compare at its precision.
        assert_close(group.params[f"w{i}"], p.detach(), rtol=2e-2, atol=2e-3)
    with pytest.raises(ValueError, match="matrices"):
        ours.init_param_group({"b": torch.zeros(3, device="tpu")})


def _check_step_fills_grads(compile_fn=None):
    """A trainer without an optimizer: each step's loss and .grad equal CPU autograd's."""
    batches = _batches(2)
    ref = _mlp()
    model = _mlp().to("tpu")
    trainer = opt_mod.SingleTraceTrainer(model, compile_fn=compile_fn)
    step = trainer.make_compiled_train_step(batches[0][0].to("tpu"), batches[0][1].to("tpu"))
    for x, y in batches:
        loss = step(x.to("tpu"), y.to("tpu"))
        ref.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(ref(x), y)
        ref_loss.backward()
        assert_close(loss, ref_loss.detach(), rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_without_optimizer_the_step_fills_grads():
    _check_step_fills_grads()


def test_buffers_are_updated_in_the_model():
    batches = _batches(4)
    ref = _mlp(norm=torch.nn.BatchNorm1d)
    _torch_reference(ref, lambda ps: torch.optim.SGD(ps, lr=0.1), batches)
    model = _mlp(norm=torch.nn.BatchNorm1d).to("tpu")
    trainer = opt_mod.SingleTraceTrainer(model, opt_mod.Sgd(lr=0.1))
    step = trainer.make_compiled_train_step(batches[0][0].to("tpu"), batches[0][1].to("tpu"))
    for x, y in batches:
        step(x.to("tpu"), y.to("tpu"))
    for (name, b), (_, rb) in zip(model.named_buffers(), ref.named_buffers()):
        assert_close(b, rb, rtol=1e-5, atol=1e-6)
    assert trainer.stats["replays"] == 3


class _Out:
    def __init__(self, loss):
        self.loss = loss


class _WithLoss(torch.nn.Module):
    """A model that computes its own loss from keyword inputs (as Transformers models do)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(12, 4)

    def forward(self, x, labels):
        return _Out(torch.nn.functional.cross_entropy(self.body(x), labels))


def test_dict_inputs_model_loss_and_compute_loss_fn():
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(8, 12, generator=g) for _ in range(3)]
    labels = [torch.randint(0, 4, (8,), generator=g) for _ in range(3)]
    ref = _WithLoss()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ref_losses = []
    for x, lab in zip(xs, labels):
        opt.zero_grad()
        loss = ref(x=x, labels=lab).loss
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    for compute in (None, lambda m, args, kwargs: m(*args, **kwargs).loss * 1.0):
        model = _WithLoss().to("tpu")
        trainer = opt_mod.SingleTraceTrainer(model, opt_mod.Sgd(lr=0.1), compute_loss_fn=compute)
        step = trainer.make_compiled_train_step({"x": xs[0].to("tpu"), "labels": labels[0].to("tpu")})
        losses = [step({"x": x.to("tpu"), "labels": lab.to("tpu")}).item() for x, lab in zip(xs, labels)]
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)


def test_new_batch_shape_captures_again_and_dropout_rerecords():
    model = _mlp().to("tpu")
    trainer = opt_mod.SingleTraceTrainer(model, opt_mod.Sgd(lr=0.01))
    x, y = torch.randn(8, 12, device="tpu"), torch.randn(8, 4, device="tpu")
    step = trainer.make_compiled_train_step(x, y)
    step(x, y)
    step(x[:4], y[:4])
    step(x, y)
    assert _counts(trainer.stats) == {"captures": 2, "replays": 1, "rerecorded_steps": 0}
    dropout = torch.nn.Sequential(torch.nn.Linear(12, 12), torch.nn.Dropout(0.5), torch.nn.Linear(12, 4)).to("tpu")
    trainer = opt_mod.SingleTraceTrainer(dropout, opt_mod.Sgd(lr=0.01))
    step = trainer.make_compiled_train_step(x, y)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        losses = [step(x, y).item() for _ in range(3)]
    assert all(l == l for l in losses)  # finite: each step is still one program, recorded again
    assert trainer.stats["replays"] == 0


def test_bad_calls_are_clear_errors():
    model = _mlp().to("tpu")
    trainer = opt_mod.SingleTraceTrainer(model, opt_mod.Sgd(lr=0.01))
    x, y = torch.randn(8, 12, device="tpu"), torch.randn(8, 4, device="tpu")
    step = trainer.make_compiled_train_step(x, y)
    with pytest.raises(ValueError, match="targets"):
        step(x)
    with pytest.raises(ValueError, match="on tpu"):
        step(x.cpu(), y.cpu())
    with pytest.raises(ValueError, match="amsgrad"):
        opt_mod.AdamW(amsgrad=True)
    with pytest.raises(ValueError, match="Nesterov"):
        opt_mod.Sgd(nesterov=True)
    with pytest.raises(TypeError, match="nn.Module"):
        opt_mod.SingleTraceTrainer(lambda x: x)


def test_compile_fn_gets_the_whole_step_as_one_graph():
    """As in the original: the step - forward, loss, backward and the update - traced into one FX
    graph per batch layout and handed to compile_fn, whose result runs every step."""
    seen = []

    def compile_fn(graph, example_inputs):
        seen.append((graph, len(example_inputs)))
        return graph  # run the traced graph as it is

    ours, theirs = OPTIMIZERS["sgd_momentum"]  # (Adam would amplify the float noise of the bias BatchNorm cancels)
    batches = _batches(4)
    ref = _mlp(norm=torch.nn.BatchNorm1d)
    ref_losses = _torch_reference(ref, theirs, batches)
    model = _mlp(norm=torch.nn.BatchNorm1d).to("tpu")
    trainer = opt_mod.SingleTraceTrainer(model, ours(), compile_fn=compile_fn)
    step = trainer.make_compiled_train_step(batches[0][0].to("tpu"), batches[0][1].to("tpu"))
    losses = [step(x.to("tpu"), y.to("tpu")).item() for x, y in batches]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
    for b, rb in zip(model.buffers(), ref.buffers()):
        assert_close(b, rb, rtol=1e-5, atol=1e-6)
    assert len(seen) == 1  # traced once for the batch layout
    graph, n_inputs = seen[0]
    assert isinstance(graph, torch.fx.GraphModule)
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == n_inputs
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert sum(t in ("aten.mm.default", "aten.addmm.default") for t in targets) >= 5  # forward and backward
    assert "aten.mse_loss_backward.default" in targets
    assert any(t.split(".")[1].endswith("_") for t in targets if t.startswith("aten.")), targets  # in-place update
    step(batches[0][0][:4].to("tpu"), batches[0][1][:4].to("tpu"))
    assert len(seen) == 2  # a new batch shape is traced again


def test_compile_fn_of_one_argument_and_torch_compile_without_optimizer():
    graphs = []
    _check_step_fills_grads(lambda graph: graphs.append(graph) or graph)
    _check_step_fills_grads(lambda graph, example: torch.compile(graph, backend="tpu"))
    assert len(graphs) == 1 and isinstance(graphs[0], torch.fx.GraphModule)
