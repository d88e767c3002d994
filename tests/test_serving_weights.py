"""Serving weight layout (torch_tpu/serving/weights.py): on the CPU plugin linear weights packed for
the packed matmul kernel (their layers' ``quant_method.apply`` calling it), or - without the kernel -
stored input-major with the same values; embedding tables left row-major, and the logits projection
of a tied head (vLLM's separate head module, SGLang's head that is the embedding module) given its
own copy - each checked against the same computation on CPU."""

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.serving import packed_matmul, weights


class Unquantized:  # the engines' unquantized method: F.linear
    def apply(self, layer, x, bias=None):
        return torch.nn.functional.linear(x, layer.weight, bias)


class Linear(torch.nn.Linear):  # the engines' linear layers go through their quant_method
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.quant_method = Unquantized()

    def forward(self, x):
        return self.quant_method.apply(self, x, self.bias)


class QuantizedLinear(torch.nn.Linear):
    quant_method = object()


class Embedding(torch.nn.Embedding):
    pass


class LMHead(Embedding):  # projects through its quant_method (vLLM's LogitsProcessor)
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.quant_method = Unquantized()


class Tiny(torch.nn.Module):
    def __init__(self, tied_module: bool):
        super().__init__()
        self.embed = Embedding(50, 8)
        self.proj = Linear(8, 12, bias=False)
        self.out = Linear(12, 8)
        self.quantized = QuantizedLinear(8, 8, bias=False)
        if tied_module:  # SGLang: the head is the embedding module
            self.lm_head = self.embed
        else:  # vLLM: a head module sharing the embedding's weight
            self.lm_head = LMHead(50, 8)
            self.lm_head.weight = self.embed.weight

    def forward(self, ids, head_weight):
        h = self.out(self.proj(self.embed(ids))) + self.quantized(self.embed(ids))
        return weights.project(h, head_weight)[..., :50]


def _input_major(w):
    return w.stride() == (1, w.shape[0])


def _packed(w):
    return w.dim() == 3 and w.shape[-1] == packed_matmul.PANEL


@pytest.fixture(params=["packed", "input-major"])
def layout(request, monkeypatch):
    """Both layouts: the CPU plugin's kernel, and the plugins without it."""
    if request.param == "input-major":
        monkeypatch.setattr(packed_matmul, "_registered", lambda: False)
    else:  # this test's weights are small: pack them all
        monkeypatch.setattr(weights, "PACK_MIN_ELEMENTS", 1)
    return {"packed": _packed, "input-major": _input_major}[request.param]


@pytest.mark.parametrize("tied_module", [False, True], ids=["head-module", "head-is-embedding"])
def test_layout_keeps_values_and_lookups(tied_module, layout):
    torch.manual_seed(0)
    cpu = Tiny(tied_module).eval()
    ids = torch.tensor([[1, 7, 49, 3]])
    with torch.no_grad():
        expected = cpu(ids, cpu.lm_head.weight)
    model = Tiny(tied_module).eval()
    model.load_state_dict(cpu.state_dict())
    model = model.to("tpu")
    moved = weights.lay_out_linear_weights(model, Linear, Unquantized, LMHead, Embedding)
    assert layout(model.proj.weight) and layout(model.out.weight)
    assert model.quantized.weight.is_contiguous()  # other quant methods own their layout
    assert model.embed.weight.is_contiguous() and model.embed.weight.dim() == 2  # a table looked up keeps its rows
    head = weights.logits_weight(model.lm_head.weight)
    assert layout(head)
    if tied_module:
        assert moved == 2 and head.data_ptr() != model.embed.weight.data_ptr()
    else:  # the head module got its own copy
        assert moved == 3 and layout(model.lm_head.weight)
    assert weights.logits_weight(head) is head  # already laid out: no second copy
    with torch.no_grad():
        torch.testing.assert_close(model(ids.to("tpu"), head).cpu(), expected)


def test_small_weights_keep_xla_s_dot():
    model = Tiny(tied_module=False).to("tpu")
    big = Linear(512, 512, bias=False).to("tpu")  # 256K elements: the packing threshold
    model.add_module("big", big)
    weights.lay_out_linear_weights(model, Linear, Unquantized, LMHead, Embedding)
    assert _input_major(model.proj.weight) and _input_major(model.out.weight)
    assert _packed(model.big.weight) == packed_matmul.available()
