"""PyTorch's Transformer fast paths on tpu: nn.MultiheadAttention and nn.TransformerEncoderLayer /
nn.TransformerEncoder in eval mode under no_grad / inference_mode dispatch to
_native_multi_head_attention, _transformer_encoder_layer_fwd (and, with a key padding mask, to
nested tensors). They must run on the device (strict fallback mode, no CPU fallback), give the
same results as the same module on the CPU, and compile once and replay under torch.compile."""

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import torch_tpu
from helpers import assert_close

E, HEADS, B, L = 8, 2, 3, 5
TOL = dict(rtol=1e-4, atol=1e-5)


# Strict mode (an op without a tpu kernel raises) and no CPU fallback, for every test.
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


class TopLevelOps(TorchDispatchMode):
    """Records the aten ops a module calls (not the ops inside their kernels)."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def grad_off(kind):
    return torch.inference_mode() if kind == "inference_mode" else torch.no_grad()


def padding_mask(lengths, length=L):
    return torch.arange(length)[None, :] >= torch.tensor(lengths)[:, None]  # True = padding


def float_mask(bool_mask):
    return torch.zeros(bool_mask.shape).masked_fill(bool_mask, float("-inf"))


def run_on_both(module, *args, **kwargs):
    """(tpu result, cpu result) of the same eval-mode module, and the top-level ops the tpu run
    called."""
    module = module.eval()
    with torch.no_grad():
        cpu = module(*args, **kwargs)
        module.to("tpu")
        copies = {}  # the same CPU tensor becomes the same tpu tensor (self-attention checks `is`)

        def moved(v):
            if not isinstance(v, torch.Tensor):
                return v
            return copies.setdefault(id(v), v.to("tpu"))

        with TopLevelOps() as ops:
            tpu = module(*[moved(a) for a in args], **{k: moved(v) for k, v in kwargs.items()})
        module.to("cpu")
    return tpu, cpu, ops.names


# ---- nn.MultiheadAttention ----------------------------------------------------------------------

MHA_MASKS = {
    "none": lambda: {},
    "attn_mask": lambda: {"attn_mask": torch.triu(torch.ones(L, L, dtype=torch.bool), 1)},
    "attn_mask_3d": lambda: {"attn_mask": torch.rand(B * HEADS, L, L, generator=torch.Generator().manual_seed(1))
                             > 0.6},
    "key_padding_mask": lambda: {"key_padding_mask": padding_mask([5, 3, 1])},
    "both": lambda: {"attn_mask": torch.triu(torch.ones(L, L, dtype=torch.bool), 1),
                     "key_padding_mask": padding_mask([5, 3, 2])},
    "fully_masked_rows": lambda: {"attn_mask": torch.ones(L, L, dtype=torch.bool).triu(0).fliplr()},
}


@pytest.mark.parametrize("masks", sorted(MHA_MASKS))
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_multihead_attention_fast_path(masks, need_weights, average):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True)
    x = torch.randn(B, L, E)
    kwargs = dict(MHA_MASKS[masks](), need_weights=need_weights, average_attn_weights=average)
    (out, weights), (ref, ref_weights), ops = run_on_both(mha, x, x, x, **kwargs)
    assert "_native_multi_head_attention" in ops, ops
    assert_close(out, ref, **TOL)
    if need_weights:
        assert_close(weights, ref_weights, **TOL)
    else:
        assert weights is None and ref_weights is None


def test_multihead_attention_under_inference_mode():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    x, kpm = torch.randn(B, L, E), padding_mask([4, 5, 2])
    with torch.inference_mode():
        ref, ref_w = mha(x, x, x, key_padding_mask=kpm)
        mha.to("tpu")
        xt = x.to("tpu")
        out, w = mha(xt, xt, xt, key_padding_mask=kpm.to("tpu"))
    assert_close(out, ref, **TOL)
    assert_close(w, ref_w, **TOL)


@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_multihead_attention_on_a_nested_batch(need_weights, average):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    x, valid = torch.randn(B, L, E), ~padding_mask([5, 3, 1])
    kwargs = dict(need_weights=need_weights, average_attn_weights=average)
    with torch.no_grad():
        nested = torch._nested_tensor_from_mask(x, valid)
        ref, ref_weights = mha(nested, nested, nested, **kwargs)
        nested = torch._nested_tensor_from_mask(x.to("tpu"), valid.to("tpu"))
        out, weights = mha.to("tpu")(nested, nested, nested, **kwargs)
    assert out.is_nested and out.device.type == "tpu"
    assert_close(out.to_padded_tensor(0.0), ref.to_padded_tensor(0.0), **TOL)
    if need_weights:
        assert_close(weights, ref_weights, **TOL)
    else:
        assert weights is None and ref_weights is None


# ---- nn.TransformerEncoderLayer ------------------------------------------------------------------

LAYER_MASKS = {
    "none": lambda: {},
    "src_mask_bool": lambda: {"src_mask": torch.triu(torch.ones(L, L, dtype=torch.bool), 1)},
    "src_mask_float": lambda: {"src_mask": float_mask(torch.triu(torch.ones(L, L, dtype=torch.bool), 1))},
    "padding_bool": lambda: {"src_key_padding_mask": padding_mask([5, 2, 4])},
    "padding_float": lambda: {"src_key_padding_mask": float_mask(padding_mask([5, 2, 4]))},
    "both": lambda: {"src_mask": torch.triu(torch.ones(L, L, dtype=torch.bool), 1),
                     "src_key_padding_mask": padding_mask([3, 5, 4])},
}


@pytest.mark.parametrize("masks", sorted(LAYER_MASKS))
@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_encoder_layer_fast_path(masks, norm_first, activation):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, 16, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first)
    x = torch.randn(B, L, E)
    out, ref, ops = run_on_both(layer, x, **LAYER_MASKS[masks]())
    assert "_transformer_encoder_layer_fwd" in ops, ops
    assert_close(out, ref, **TOL)


@pytest.mark.parametrize("kind", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_gelu_relu_under_both_grad_modes(kind, activation):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, 16, dropout=0.0, activation=activation, batch_first=True).eval()
    x = torch.randn(B, L, E)
    with grad_off(kind):
        ref = layer(x)
        out = layer.to("tpu")(x.to("tpu"))
    assert_close(out, ref, **TOL)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_encoder_in_low_precision(dtype):
    model = encoder().to(dtype)
    x = torch.randn(B, L, E, dtype=dtype)
    out, ref, _ = run_on_both(model, x, src_key_padding_mask=padding_mask([5, 3, 1]))
    assert_close(out, ref)  # the helper's per-dtype tolerances
    out, ref, _ = run_on_both(model, x)
    assert_close(out, ref)


def test_layer_not_batch_first_takes_the_slow_path_and_still_matches():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, 16, dropout=0.0, batch_first=False)
    x = torch.randn(L, B, E)
    out, ref, ops = run_on_both(layer, x)
    assert "_transformer_encoder_layer_fwd" not in ops
    assert_close(out, ref, **TOL)


# ---- nn.TransformerEncoder (nested tensors with a key padding mask) --------------------------------

def encoder(norm_first=False, nested=True, layers=2, activation="relu"):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, 16, dropout=0.0, batch_first=True, norm_first=norm_first,
                                       activation=activation)
    return nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(E), enable_nested_tensor=nested)


@pytest.mark.parametrize("lengths", [[5, 3, 1], [2, 2, 2], [5, 5, 5]])
def test_encoder_with_padding_mask_goes_through_nested_tensors_on_the_device(lengths):
    x = torch.randn(B, L, E)
    out, ref, ops = run_on_both(encoder(), x, src_key_padding_mask=padding_mask(lengths))
    assert "_nested_tensor_from_mask" in ops and "to_padded_tensor" in ops, ops
    assert not out.is_nested and out.device.type == "tpu"
    assert_close(out, ref, **TOL)


def test_encoder_with_a_mask_that_is_not_left_aligned_or_no_nesting():
    x = torch.randn(B, L, E)
    gaps = torch.tensor([[False, True, False, False, True]] * B)
    out, ref, ops = run_on_both(encoder(), x, src_key_padding_mask=gaps)
    assert "_nested_tensor_from_mask" not in ops and "_transformer_encoder_layer_fwd" in ops, ops
    assert_close(out, ref, **TOL)
    for model in (encoder(nested=False), encoder(norm_first=True)):
        out, ref, _ = run_on_both(model, x, src_key_padding_mask=padding_mask([5, 3, 4]))
        assert_close(out, ref, **TOL)
    out, ref, _ = run_on_both(encoder(), x, mask=torch.triu(torch.ones(L, L, dtype=torch.bool), 1))
    assert_close(out, ref, **TOL)


def test_nested_tensor_ops_directly():
    x, valid = torch.randn(B, L, E), ~padding_mask([4, 1, 5])
    assert torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), valid.to("tpu"))
    assert not torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), valid.flip(1).to("tpu"))
    nt = torch._nested_tensor_from_mask(x.to("tpu"), valid.to("tpu"))
    ref = torch._nested_tensor_from_mask(x, valid)
    assert nt.is_nested and nt.device.type == "tpu"
    assert_close(nt.to_padded_tensor(0.0), ref.to_padded_tensor(0.0))
    assert_close(nt.to_padded_tensor(-1.0, (B + 1, L + 2, E + 1)), ref.to_padded_tensor(-1.0, (B + 1, L + 2, E + 1)))
    with pytest.raises(RuntimeError, match="left aligned"):
        torch._nested_tensor_from_mask(x.to("tpu"), valid.flip(1).to("tpu"))


# ---- the helper ops and bad input ------------------------------------------------------------------

@pytest.mark.parametrize("mask_type", [0, 1, 2])
def test_masked_softmax_and_transform_bias_rescale_qkv(mask_type):
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(B, HEADS, L, L, generator=gen)
    shape = {0: (L, L), 1: (B, L), 2: (B, HEADS, L, L)}[mask_type]
    mask = torch.rand(shape, generator=gen) > 0.5
    out = torch._masked_softmax(scores.to("tpu"), mask.to("tpu"), 3, mask_type)
    assert_close(out, torch._masked_softmax(scores, mask, 3, mask_type), **TOL)
    qkv, bias = torch.randn(B, L, 3 * E, generator=gen), torch.randn(3 * E, generator=gen)
    for got, want in zip(torch._transform_bias_rescale_qkv(qkv.to("tpu"), bias.to("tpu"), HEADS),
                         torch._transform_bias_rescale_qkv(qkv, bias, HEADS)):
        assert_close(got, want, **TOL)


def test_bad_input_is_a_clear_error():
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).to("tpu")
    args = (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)
    x = torch.randn(B, L, E + 2, device="tpu")
    with torch.no_grad(), pytest.raises(RuntimeError, match="embed_dim"):
        torch._native_multi_head_attention(x, x, x, E, HEADS, *args)
    y = torch.randn(B, L, E, device="tpu")
    with torch.no_grad(), pytest.raises(RuntimeError, match="attention mask of shape"):
        torch._native_multi_head_attention(y, y, y, E, HEADS, *args, torch.ones(2, 7, dtype=torch.bool, device="tpu"))


# ---- torch.compile ---------------------------------------------------------------------------------

@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu"), (True, "relu"),
                                                   (False, nn.functional.gelu)])
def test_compiled_encoder_compiles_once_and_replays(with_mask, norm_first, activation):
    """Every option combination of the eval-mode encoder (pre- and post-norm, the activation as a
    string or a function) compiles once and replays."""
    from torch_tpu.dynamo import graph_runner

    model = encoder(norm_first=norm_first, activation=activation).eval()
    compiled = torch.compile(model.to("tpu"), backend="tpu")
    gen = torch.Generator().manual_seed(3)
    for step in range(3):
        x = torch.randn(B, L, E, generator=gen)
        kwargs = {"src_key_padding_mask": padding_mask([5, 3, 2])} if with_mask else {}
        with torch.no_grad():
            out = compiled(x.to("tpu"), **{k: v.to("tpu") for k, v in kwargs.items()})
            model.to("cpu")
            ref = model(x, **kwargs)
            model.to("tpu")
        # CPU eager takes the nested-tensor path (zeros at padded positions); the compiled graph
        # cannot (PyTorch skips it under torch.compile), so only valid positions are compared.
        valid = ~kwargs["src_key_padding_mask"] if with_mask else torch.ones(B, L, dtype=torch.bool)
        assert_close(out[valid.to("tpu")], ref[valid], **TOL)
    assert graph_runner.stats["captures"] == 1, graph_runner.stats
    assert graph_runner.stats["replays"] == 2, graph_runner.stats
    assert graph_runner.stats["rerecorded_calls"] == 0 and graph_runner.stats["op_by_op_calls"] == 0


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("need_weights", [True, False])
def test_compiled_multihead_attention_replays(need_weights):
    from torch_tpu.dynamo import graph_runner

    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    kpm = padding_mask([5, 3, 1])

    def attend(module, x, mask):
        return module(x, x, x, key_padding_mask=mask, need_weights=need_weights)

    compiled = torch.compile(attend, backend="tpu")
    for _ in range(3):
        x = torch.randn(B, L, E)
        with torch.no_grad():
            ref = attend(mha.to("cpu"), x, kpm)
            out = compiled(mha.to("tpu"), x.to("tpu"), kpm.to("tpu"))
        assert_close(out[0], ref[0], **TOL)
        if need_weights:
            assert_close(out[1], ref[1], **TOL)
    assert graph_runner.stats["captures"] == 1 and graph_runner.stats["replays"] == 2, graph_runner.stats


@pytest.mark.parametrize("eager_mode", ["fused", "debug"])
def test_encoder_in_the_other_eager_modes(eager_mode):
    from torch_tpu.execution_mode import mode

    x = torch.randn(B, L, E)
    with mode(eager_mode):
        for kwargs in ({}, {"src_key_padding_mask": padding_mask([5, 3, 1])}):
            out, ref, _ = run_on_both(encoder(), x, **kwargs)
            assert_close(out, ref, **TOL)
