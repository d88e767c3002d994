"""Serving weight layout (torch_tpu/serving/weights.py): linear weights stored input-major with the
same values, embedding tables left row-major, and the logits projection of a tied head (vLLM's
separate head module, SGLang's head that is the embedding module) given an input-major copy on the
CPU plugin - each checked against the same computation on CPU."""

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.serving import weights


class Unquantized:
    pass


class Linear(torch.nn.Linear):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.quant_method = Unquantized()


class QuantizedLinear(torch.nn.Linear):
    quant_method = object()


class Embedding(torch.nn.Embedding):
    pass


class LMHead(Embedding):
    pass


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
        return torch.nn.functional.linear(h, head_weight)


def _input_major(w):
    return w.stride() == (1, w.shape[0])


@pytest.mark.parametrize("tied_module", [False, True], ids=["head-module", "head-is-embedding"])
def test_layout_keeps_values_and_lookups(tied_module):
    torch.manual_seed(0)
    cpu = Tiny(tied_module).eval()
    ids = torch.tensor([[1, 7, 49, 3]])
    with torch.no_grad():
        expected = cpu(ids, cpu.lm_head.weight)
    model = Tiny(tied_module).eval()
    model.load_state_dict(cpu.state_dict())
    model = model.to("tpu")
    moved = weights.lay_out_linear_weights(model, Linear, Unquantized, LMHead, Embedding)
    assert _input_major(model.proj.weight) and _input_major(model.out.weight)
    assert model.quantized.weight.is_contiguous()  # other quant methods own their layout
    assert model.embed.weight.is_contiguous()  # a table looked up keeps its rows
    head = weights.logits_weight(model.lm_head.weight)
    assert _input_major(head)
    if tied_module:
        assert moved == 2 and head.data_ptr() != model.embed.weight.data_ptr()
    else:  # the head module got its own input-major copy
        assert moved == 3 and _input_major(model.lm_head.weight)
    assert weights.logits_weight(head) is head  # already input-major: no second copy
    with torch.no_grad():
        torch.testing.assert_close(model(ids.to("tpu"), head).cpu(), expected)
