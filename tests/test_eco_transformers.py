"""Hugging Face Transformers (5.24) and Accelerate (1.15) on the tpu device, each result compared
with the same computation on the CPU: tiny models' logits, from_pretrained(device_map="tpu"),
greedy generation with the dynamic and the static KV cache (the latter through
torch.compile(backend="tpu")), the Trainer with bf16, and grouped-query SDPA and MoE experts
(torch._grouped_mm) without CPU fallback."""

import os
import subprocess
import sys

import pytest
import torch

import torch_tpu

from eco_hf_models import NAMES, model_class, tiny_model, token_ids  # noqa: I001  (sets the offline env)
from helpers import assert_close
import transformers

BF16_TOL = dict(rtol=3e-2, atol=3e-2)


@pytest.fixture
def strict_fallback(strict_no_fallback):
    """Any op that would run on the CPU raises instead (strict mode; conftest.py)."""
    yield


# ---- detection --------------------------------------------------------------------------------


def test_transformers_detects_tpu(tmp_path):
    from accelerate.state import AcceleratorState
    from transformers.utils.import_utils import get_device_type, is_torch_tpu_available

    assert is_torch_tpu_available()
    assert get_device_type() == "tpu"
    # With the Trainer's device logic, a tpu-only process trains on tpu:0.
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[])
    assert args.device == torch.device("tpu", 0)
    AcceleratorState._reset_state(reset_partial_state=True)


def test_detection_when_transformers_is_imported_first():
    # A fresh process that never imports torch_tpu: PyTorch's backend autoload (the torch.backends
    # entry point) must register tpu before Transformers caches its device checks at import.
    code = (
        "import transformers\n"
        "from transformers import LlamaForCausalLM\n"
        "from transformers.utils import import_utils as iu\n"
        "assert iu.is_torch_tpu_available() and not iu.is_torch_flex_attn_available()\n"
        "args = transformers.TrainingArguments(output_dir='unused', report_to=[])\n"
        "assert str(args.device) == 'tpu:0', args.device\n"
    )
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


# ---- 1. logits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_to_tpu_logits_match_cpu(name, no_fallback):
    model = tiny_model(name)
    ids = token_ids(2, 12)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        model.to("tpu")
        assert next(model.parameters()).device.type == "tpu"
        got = model(input_ids=ids.to("tpu")).logits
    assert_close(got, expected)


@pytest.mark.parametrize("name", NAMES)
def test_from_pretrained_device_map_bf16(name, tmp_path, no_fallback):
    tiny_model(name).save_pretrained(tmp_path)
    cls = model_class(name)
    on_cpu = cls.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    on_tpu = cls.from_pretrained(tmp_path, device_map="tpu", dtype=torch.bfloat16).eval()
    params = list(on_tpu.parameters())
    assert {p.device for p in params} == {torch.device("tpu", 0)}
    assert {p.dtype for p in params} == {torch.bfloat16}
    ids = token_ids(2, 12)
    with torch.no_grad():
        got = on_tpu(input_ids=ids.to("tpu")).logits
        expected = on_cpu(input_ids=ids).logits
    assert_close(got, expected, **BF16_TOL)


# ---- 2. generation -----------------------------------------------------------------------------

GENERATE = dict(max_new_tokens=6, do_sample=False)


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_generate_dynamic_cache(name, no_fallback):
    model = tiny_model(name)
    prompt = token_ids(2, 5)
    expected = model.generate(prompt, **GENERATE)
    got = model.to("tpu").generate(prompt.to("tpu"), **GENERATE)
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("name", ["llama", "qwen3", "qwen3_moe"])
def test_generate_static_cache_compiles_with_tpu_backend(name, fresh_dynamo, no_fallback):
    from torch._dynamo.utils import counters

    from torch_tpu.dynamo import graph_runner

    model = tiny_model(name)
    prompt = token_ids(1, 5)
    expected = model.generate(prompt, cache_implementation="static", **GENERATE)
    model.to("tpu")
    counters.clear()
    got = model.generate(prompt.to("tpu"), cache_implementation="static", **GENERATE)
    assert torch.equal(got.cpu(), expected)
    # Transformers compiled the decoding forward with its default config for tpu...
    assert model._last_compile_config.backend == "tpu"
    assert counters["frames"]["ok"] >= 1
    # ...and the decode steps ran as our captured XLA program: one capture, replayed after.
    assert graph_runner.stats["captures"] >= 1
    assert graph_runner.stats["replays"] >= GENERATE["max_new_tokens"] - 2
    assert graph_runner.stats["op_by_op_calls"] == 0


# ---- 3. Trainer --------------------------------------------------------------------------------


def _train(device, output_dir, monkeypatch, optim, learning_rate):
    """A few bf16 Trainer steps of tiny Llama on one repeated batch; (losses, trained weights)."""
    from accelerate.state import AcceleratorState

    # Accelerate keeps its device in a process-wide singleton; each run chooses again.
    AcceleratorState._reset_state(reset_partial_state=True)
    # No override: torch_tpu's accelerate hook makes accelerate pick tpu (use_cpu picks the CPU).
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    ids = token_ids(4, 16, seed=3)
    dataset = [{"input_ids": row, "labels": row.clone()} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=4, max_steps=4, bf16=True,
        use_cpu=device == "cpu", optim=optim, learning_rate=learning_rate, logging_steps=1, report_to=[],
        save_strategy="no", seed=0, disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=tiny_model("llama"), args=args, train_dataset=dataset)
    assert trainer.accelerator.device.type == device and args.device.type == device
    trainer.train()
    assert {p.device.type for p in trainer.model.parameters()} == {device}
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    weights = {k: v.detach() for k, v in trainer.model.state_dict().items()}
    AcceleratorState._reset_state(reset_partial_state=True)
    return losses, weights


# SGD: trained weights compared element by element. The Trainer's default, fused AdamW (its
# step runs on the device, csrc/aten/fused_adam_ops.cc): Adam's normalised steps turn bf16
# rounding differences of near-zero gradients into lr-sized ones, so losses are compared instead.
@pytest.mark.parametrize("optim,learning_rate", [("sgd", 0.5), ("adamw_torch_fused", 1e-2)])
def test_trainer_bf16_matches_cpu(optim, learning_rate, tmp_path, monkeypatch, no_fallback):
    losses, weights = _train("tpu", tmp_path / "tpu", monkeypatch, optim, learning_rate)
    cpu_losses, cpu_weights = _train("cpu", tmp_path / "cpu", monkeypatch, optim, learning_rate)
    assert len(losses) == 4
    assert losses[-1] < losses[0], losses
    torch.testing.assert_close(losses[0], cpu_losses[0], rtol=1e-2, atol=0)
    torch.testing.assert_close(losses, cpu_losses, rtol=3e-2, atol=0)
    if optim == "sgd":
        for key, value in weights.items():
            assert_close(value, cpu_weights[key], **BF16_TOL)


# ---- 4. grouped-query SDPA and MoE experts without CPU fallback ---------------------------------


def _forward_backward(model, ids, mask):
    """(logits, {name: grad}) of one training forward/backward pass on the model's device."""
    device = next(model.parameters()).device
    model.zero_grad()
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=ids.to(device))
    out.loss.backward()
    return out.logits, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _compare_training_pass(model, ids, mask):
    model.train()
    expected_logits, expected_grads = _forward_backward(model, ids, mask)
    expected_grads = {k: g.clone() for k, g in expected_grads.items()}
    model.to("tpu")
    logits, grads = _forward_backward(model, ids, mask)
    assert_close(logits, expected_logits)
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        assert_close(grad, expected_grads[name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padded,force_gqa", [(False, False), (True, False), (True, True)])
def test_sdpa_grouped_query_attention_no_fallback(padded, force_gqa, monkeypatch, strict_fallback):
    # Without a mask Transformers passes enable_gqa=True to SDPA; with one it repeats the key/value
    # heads, unless TRANSFORMERS_SDPA_FORCE_GQA=1.
    if force_gqa:
        monkeypatch.setenv("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gqa_flags = []

    def recording_sdpa(*args, **kwargs):
        gqa_flags.append(kwargs.get("enable_gqa", False))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    model = tiny_model("llama")
    assert model.config._attn_implementation == "sdpa"
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    ids = token_ids(2, 8)
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0  # left padding
    _compare_training_pass(model, ids, mask)
    assert gqa_flags and set(gqa_flags) == {not padded or force_gqa}


def test_moe_grouped_mm_no_fallback(strict_fallback):
    model = tiny_model("qwen3_moe")
    assert model.config._experts_implementation == "grouped_mm"
    calls = []
    grouped_mm = torch._grouped_mm

    def recording_grouped_mm(*args, **kwargs):
        calls.append(args[0].device.type)
        return grouped_mm(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.nn.functional, "grouped_mm", recording_grouped_mm)
        ids = token_ids(2, 8)
        _compare_training_pass(model, ids, torch.ones_like(ids))
    assert "tpu" in calls and "cpu" in calls


# ---- ops Transformers relies on: torch._grouped_mm, histc on integers -------------------------


def _offsets(*ends):
    return torch.tensor(ends, dtype=torch.int32)


# (a shape, b shape, offsets): uneven groups, an empty group, rows past the last offset. Last
# dimensions are multiples of 8: PyTorch's CPU kernel needs 16-byte row strides.
GROUPED_MM_CASES = {
    "2d_3d": ((24, 8), (4, 8, 16), _offsets(5, 5, 13, 20)),
    "2d_2d": ((8, 24), (24, 16), _offsets(4, 4, 12, 24)),
    "3d_2d": ((3, 8, 16), (16, 24), _offsets(4, 12, 24)),
    "3d_3d": ((3, 8, 16), (3, 16, 8), None),
}


def _grouped_mm_inputs(case, dtype):
    shape_a, shape_b, offs = GROUPED_MM_CASES[case]
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(shape_a, generator=generator).to(dtype)
    b = torch.randn(shape_b, generator=generator).to(dtype)
    return a, b, offs


def _valid_rows(case, out):
    # CPU leaves rows past the last offset uninitialised: compare the covered rows only.
    return out[: GROUPED_MM_CASES[case][2][-1]] if case == "2d_3d" else out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(GROUPED_MM_CASES))
def test_grouped_mm_matches_cpu(case, dtype, no_fallback):
    a, b, offs = _grouped_mm_inputs(case, dtype)
    expected = torch._grouped_mm(a, b, offs=offs)
    got = torch._grouped_mm(a.to("tpu"), b.to("tpu"), offs=None if offs is None else offs.to("tpu"))
    tol = {} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert_close(_valid_rows(case, got), _valid_rows(case, expected), **tol)
    if case == "2d_3d":
        assert torch.count_nonzero(got[offs[-1] :].cpu()) == 0


def test_grouped_mm_backward_matches_cpu(no_fallback):
    a, b, offs = _grouped_mm_inputs("2d_3d", torch.float32)
    rows = int(offs[-1])
    grads = []
    for device in ("cpu", "tpu"):
        a_d = a.detach().to(device).requires_grad_()
        b_d = b.detach().to(device).requires_grad_()
        out = torch._grouped_mm(a_d, b_d, offs=offs.to(device))
        (out[:rows] * torch.arange(out.shape[1], device=device)).sum().backward()
        grads.append((a_d.grad, b_d.grad))
    (cpu_a, cpu_b), (tpu_a, tpu_b) = grads
    assert_close(tpu_a[:rows], cpu_a[:rows], rtol=1e-4, atol=1e-5)
    assert_close(tpu_b, cpu_b, rtol=1e-4, atol=1e-5)


def test_grouped_mm_new_offsets_reuse_the_program():
    a, b, offs = (t.to("tpu") for t in _grouped_mm_inputs("2d_3d", torch.float32))
    torch._grouped_mm(a, b, offs=offs)
    torch.tpu.synchronize()
    before = torch.tpu.compilation_cache_stats()["misses"]
    other = _offsets(1, 9, 9, 24).to("tpu")
    got = torch._grouped_mm(a, b, offs=other)
    torch.tpu.synchronize()
    # Group sizes live on the device: no host read, no new program for new sizes.
    assert torch.tpu.compilation_cache_stats()["misses"] == before
    assert_close(got, torch._grouped_mm(a.cpu(), b.cpu(), offs=other.cpu()))


def test_grouped_mm_bad_input_raises():
    a, b, offs = (t.to("tpu") for t in _grouped_mm_inputs("2d_3d", torch.float32))
    with pytest.raises(RuntimeError, match="int32"):
        torch._grouped_mm(a, b, offs=offs.long())
    with pytest.raises(RuntimeError, match="offsets"):
        torch._grouped_mm(a, b)
    with pytest.raises(RuntimeError, match="contraction"):
        torch._grouped_mm(a[:, :4], b, offs=offs)


def test_histc_on_integers_counts_like_float(no_fallback):
    # MoE routing counts tokens per expert with histc on int32 ids off the CPU (as on CUDA).
    ids = torch.randint(0, 6, (40,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    got = torch.histc(ids.to("tpu"), bins=6, min=0, max=5)
    assert got.dtype == torch.int32
    assert torch.equal(got.cpu(), torch.histc(ids.float(), bins=6, min=0, max=5).int())


@pytest.mark.parametrize("amsgrad,tensor_lr", [(False, False), (True, True)])
@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.Adam])
def test_fused_adam_matches_cpu(optimizer, amsgrad, tensor_lr, no_fallback):
    generator = torch.Generator().manual_seed(0)
    initial = [torch.randn(5, 3, generator=generator), torch.randn(7, generator=generator)]
    results = []
    for device in ("cpu", "tpu"):
        params = [p.detach().clone().to(device).requires_grad_() for p in initial]
        lr = torch.tensor(1e-2) if tensor_lr else 1e-2
        opt = optimizer(params, lr=lr, weight_decay=0.1, amsgrad=amsgrad, fused=True)
        for step in range(3):
            for i, p in enumerate(params):
                p.grad = torch.sin(p.detach() * (step + 1 + i))
            opt.step()
        results.append((params, opt.state_dict()["state"]))
    (cpu_params, cpu_state), (params, state) = results
    for p, expected in zip(params, cpu_params):
        assert_close(p.detach(), expected.detach(), rtol=1e-5, atol=1e-6)
    for key in ("exp_avg", "exp_avg_sq"):
        assert_close(state[0][key], cpu_state[0][key], rtol=1e-5, atol=1e-6)
