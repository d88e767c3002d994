"""TorchRec on the tpu device (unsharded modules built with device="tpu"): EmbeddingBagCollection,
KeyedJaggedTensor/KeyedTensor operations, the fbgemm sparse/jagged ops they call, and a DLRM
training step - each compared with the same computation (same weights, same batches) on the CPU,
with no op falling back to the CPU."""

import os

# Offline: tests/conftest.py sets HF_HUB_OFFLINE and friends for every test and subprocess.

import subprocess  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: E402  (registers tpu before torchrec loads fbgemm_gpu)

torchrec = pytest.importorskip("torchrec", reason="TorchRec 1.8 (with fbgemm-gpu-cpu 1.8) is not installed")

from helpers import assert_close  # noqa: E402
from torchrec import (  # noqa: E402
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    JaggedTensor,
    KeyedJaggedTensor,
    KeyedTensor,
)
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.modules.embedding_configs import PoolingType  # noqa: E402

warnings.filterwarnings("ignore", message=".*is_fx_tracing.*")

_FBGEMM = torch.ops.fbgemm


def _tables(dims=(4, 8, 6)):
    """Three tables: sum and mean pooling, different widths; t2 serves two features."""
    return [
        EmbeddingBagConfig(name="t1", embedding_dim=dims[0], num_embeddings=10, feature_names=["f1"],
                           pooling=PoolingType.SUM),
        EmbeddingBagConfig(name="t2", embedding_dim=dims[1], num_embeddings=12, feature_names=["f2", "f3"],
                           pooling=PoolingType.MEAN),
        EmbeddingBagConfig(name="t3", embedding_dim=dims[2], num_embeddings=7, feature_names=["f4"],
                           pooling=PoolingType.SUM),
    ]


_SIZES = {"f1": 10, "f2": 12, "f3": 12, "f4": 7}


def _random_kjt(keys, batch, seed, weighted=False, device="cpu"):
    """A KeyedJaggedTensor with random lengths (empty bags included) and ids, built from lengths."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (len(keys) * batch,), generator=g)
    values = torch.cat([
        torch.randint(0, _SIZES[k], (int(lengths[i * batch:(i + 1) * batch].sum()),), generator=g)
        for i, k in enumerate(keys)
    ])
    weights = torch.rand(values.numel(), generator=g) if weighted else None
    move = (lambda t: t.to(device)) if device != "cpu" else (lambda t: t)
    return KeyedJaggedTensor(keys=keys, values=move(values), lengths=move(lengths),
                             weights=None if weights is None else move(weights))


def _ebc_pair(tables, is_weighted=False):
    torch.manual_seed(0)
    cpu = EmbeddingBagCollection(tables=tables, device=torch.device("cpu"), is_weighted=is_weighted)
    tpu = EmbeddingBagCollection(tables=tables, device=torch.device("tpu"), is_weighted=is_weighted)
    tpu.load_state_dict(cpu.state_dict())
    return tpu, cpu


def _assert_params_close(tpu_module, cpu_module, grads=False):
    cpu_params = dict(cpu_module.named_parameters())
    for name, p in tpu_module.named_parameters():
        if grads:
            assert p.grad is not None and cpu_params[name].grad is not None, name
            assert_close(p.grad, cpu_params[name].grad, rtol=1e-5, atol=1e-6)
        else:
            assert_close(p.detach(), cpu_params[name].detach(), rtol=1e-5, atol=1e-6)


# ---- EmbeddingBagCollection ----------------------------------------------------------------


def test_ebc_pooled_embeddings_grads_and_sgd_match_cpu(no_fallback):
    tpu, cpu = _ebc_pair(_tables())
    keys = ["f1", "f2", "f3", "f4"]
    opt_tpu = torch.optim.SGD(tpu.parameters(), lr=0.5)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.5)
    for step in range(3):
        kjt = _random_kjt(keys, batch=3, seed=step)
        out_tpu, out_cpu = tpu(kjt.to("tpu")), cpu(kjt)
        assert out_tpu.keys() == out_cpu.keys() == keys
        assert out_tpu.values().device.type == "tpu"
        assert_close(out_tpu.values(), out_cpu.values())
        d_tpu, d_cpu = out_tpu.to_dict(), out_cpu.to_dict()
        assert d_tpu.keys() == d_cpu.keys()
        for k in keys:
            assert_close(d_tpu[k], d_cpu[k])
        # a loss that weighs every pooled column differently, so each table's gradient differs
        scale = torch.randn(out_cpu.values().shape, generator=torch.Generator().manual_seed(10 + step))
        opt_tpu.zero_grad()
        opt_cpu.zero_grad()
        (out_tpu.values() * scale.to("tpu")).sum().backward()
        (out_cpu.values() * scale).sum().backward()
        _assert_params_close(tpu, cpu, grads=True)
        opt_tpu.step()
        opt_cpu.step()
    _assert_params_close(tpu, cpu)


def test_ebc_with_kjt_built_on_device_matches_cpu(no_fallback):
    """Lengths and ids created on the device: offsets are computed there (fbgemm cumsum)."""
    tpu, cpu = _ebc_pair(_tables())
    keys = ["f1", "f2", "f3", "f4"]
    kjt_cpu = _random_kjt(keys, batch=4, seed=5)
    kjt_tpu = _random_kjt(keys, batch=4, seed=5, device="tpu")
    assert_close(kjt_tpu.offsets(), kjt_cpu.offsets())
    assert_close(tpu(kjt_tpu).values(), cpu(kjt_cpu).values())


def test_weighted_ebc_matches_cpu(no_fallback):
    """Per-id weights (embedding_bag with per_sample_weights) forward and backward."""
    tables = [
        EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=10, feature_names=["f1"]),
        EmbeddingBagConfig(name="t2", embedding_dim=6, num_embeddings=12, feature_names=["f2", "f3"]),
    ]
    tpu, cpu = _ebc_pair(tables, is_weighted=True)
    kjt = _random_kjt(["f1", "f2", "f3"], batch=3, seed=7, weighted=True)
    out_tpu, out_cpu = tpu(kjt.to("tpu")), cpu(kjt)
    assert_close(out_tpu.values(), out_cpu.values())
    (out_tpu.values() ** 2).sum().backward()
    (out_cpu.values() ** 2).sum().backward()
    _assert_params_close(tpu, cpu, grads=True)


# ---- KeyedJaggedTensor / KeyedTensor operations (fbgemm ops) -----------------------------


def _assert_kjt_close(kjt_tpu, kjt_cpu):
    assert kjt_tpu.keys() == kjt_cpu.keys()
    assert_close(kjt_tpu.values(), kjt_cpu.values())
    assert_close(kjt_tpu.lengths(), kjt_cpu.lengths())
    assert_close(kjt_tpu.offsets(), kjt_cpu.offsets())
    if kjt_cpu.weights_or_none() is not None:
        assert_close(kjt_tpu.weights(), kjt_cpu.weights())


def test_kjt_operations_match_cpu(no_fallback):
    keys = ["f1", "f2", "f3", "f4"]
    kjt_cpu = _random_kjt(keys, batch=3, seed=11, weighted=True)
    kjt_tpu = _random_kjt(keys, batch=3, seed=11, weighted=True, device="tpu")
    _assert_kjt_close(kjt_tpu, kjt_cpu)
    for order in ([3, 1, 0, 2], [2, 2, 0]):  # a reorder and a selection with a repeat
        _assert_kjt_close(kjt_tpu.permute(order), kjt_cpu.permute(order))
    assert kjt_tpu.length_per_key() == kjt_cpu.length_per_key()
    for k in keys:
        jt_tpu, jt_cpu = kjt_tpu[k], kjt_cpu[k]
        assert_close(jt_tpu.offsets(), jt_cpu.offsets())
        assert_close(jt_tpu.to_padded_dense(), jt_cpu.to_padded_dense())
        assert_close(jt_tpu.to_padded_dense(desired_length=2, padding_value=-1),
                     jt_cpu.to_padded_dense(desired_length=2, padding_value=-1))
        assert_close(jt_tpu.to_padded_dense_weights(), jt_cpu.to_padded_dense_weights())
        for a, b in zip(jt_tpu.to_dense(), jt_cpu.to_dense()):
            assert_close(a, b)


def test_variable_batch_kjt_matches_cpu(no_fallback):
    """Variable stride per key (segment_sum_csr and per-key cumsums)."""
    def build(device):
        return KeyedJaggedTensor(keys=["f1", "f2"], values=torch.tensor([1, 2, 3, 4, 5, 6], device=device),
                                 lengths=torch.tensor([2, 1, 0, 1, 2], device=device),
                                 stride_per_key_per_rank=[[2], [3]])
    kjt_tpu, kjt_cpu = build("tpu"), build("cpu")
    assert kjt_tpu.length_per_key() == kjt_cpu.length_per_key()
    d_tpu, d_cpu = kjt_tpu.to_dict(), kjt_cpu.to_dict()
    for k in ("f1", "f2"):
        assert_close(d_tpu[k].values(), d_cpu[k].values())
        assert_close(d_tpu[k].offsets(), d_cpu[k].offsets())


def test_keyed_tensor_regroup_forward_and_backward_match_cpu(no_fallback):
    def run(device):
        g = torch.Generator().manual_seed(3)
        a = torch.randn(4, 5, generator=g).to(device).requires_grad_()
        b = torch.randn(4, 4, generator=g).to(device).requires_grad_()
        kts = [KeyedTensor(keys=["a", "b"], length_per_key=[2, 3], values=a),
               KeyedTensor(keys=["c"], length_per_key=[4], values=b)]
        groups = KeyedTensor.regroup(kts, [["c", "b"], ["a"]])
        weights = [torch.randn(t.shape, generator=g).to(device) for t in groups]
        sum((t * w).sum() for t, w in zip(groups, weights)).backward()
        return groups, a.grad, b.grad
    (g_tpu, a_tpu, b_tpu), (g_cpu, a_cpu, b_cpu) = run("tpu"), run("cpu")
    for x, y in zip(g_tpu, g_cpu):
        assert_close(x, y)
    assert_close(a_tpu, a_cpu)
    assert_close(b_tpu, b_cpu)


def test_keyed_tensor_regroup_in_inference_mode_matches_cpu(no_fallback):
    """Below autograd (inference mode) the regroup op itself runs on the device."""
    def run(device):
        g = torch.Generator().manual_seed(4)
        kts = [KeyedTensor(keys=["a", "b"], length_per_key=[3, 1], values=torch.randn(2, 4, generator=g).to(device)),
               KeyedTensor(keys=["c"], length_per_key=[2], values=torch.randn(2, 2, generator=g).to(device))]
        with torch.inference_mode():
            return KeyedTensor.regroup(kts, [["b"], ["c", "a"]])
    for x, y in zip(run("tpu"), run("cpu")):
        assert_close(x, y)


def _i32(values):
    return torch.tensor(values, dtype=torch.int32)


def _both(fn, *args):
    """fn on CPU arguments and on their tpu copies (tensors and lists of tensors)."""
    def to_tpu(a):
        if isinstance(a, torch.Tensor):
            return a.to("tpu")
        if isinstance(a, list) and a and isinstance(a[0], torch.Tensor):
            return [t.to("tpu") for t in a]
        return a
    return fn(*[to_tpu(a) for a in args]), fn(*args)


def _assert_outputs_close(out_tpu, out_cpu):
    if isinstance(out_cpu, (tuple, list)):
        assert len(out_tpu) == len(out_cpu)
        for x, y in zip(out_tpu, out_cpu):
            _assert_outputs_close(x, y)
    elif out_cpu is None:
        assert out_tpu is None
    else:
        assert_close(out_tpu, out_cpu)


_LENGTHS_2D = _i32([[2, 1], [0, 3], [1, 3]])
_VALUES = torch.arange(10) * 3
_WEIGHTS = torch.rand(10, generator=torch.Generator().manual_seed(0))

_FBGEMM_CASES = {
    "complete_cumsum_1d": (_FBGEMM.asynchronous_complete_cumsum, (_i32([2, 0, 3, 1]),)),
    "complete_cumsum_2d_int64": (_FBGEMM.asynchronous_complete_cumsum, (_LENGTHS_2D.long(),)),
    "complete_cumsum_empty": (_FBGEMM.asynchronous_complete_cumsum, (_i32([]),)),
    "inclusive_cumsum": (_FBGEMM.asynchronous_inclusive_cumsum, (_i32([2, 0, 3, 1]),)),
    "exclusive_cumsum": (_FBGEMM.asynchronous_exclusive_cumsum, (torch.tensor([2, 0, 3, 1]),)),
    "permute_2d": (_FBGEMM.permute_2D_sparse_data, (_i32([2, 0]), _LENGTHS_2D, _VALUES, _WEIGHTS)),
    "permute_2d_repeat_sum_given": (_FBGEMM.permute_2D_sparse_data,
                                    (_i32([2, 0, 2]), _LENGTHS_2D, _VALUES, None, 11)),
    "permute_2d_int64_lengths": (_FBGEMM.permute_2D_sparse_data,
                                 (_i32([1, 2, 0]), _LENGTHS_2D.long(), _VALUES.float(), _WEIGHTS)),
    "permute_1d": (_FBGEMM.permute_1D_sparse_data, (_i32([2, 0, 5]), _LENGTHS_2D.flatten(), _VALUES, _WEIGHTS)),
    "permute_2d_input1d": (_FBGEMM.permute_2D_sparse_data_input1D, (_i32([2, 0]), _LENGTHS_2D.flatten(), _VALUES, 2)),
    "segment_sum_csr": (_FBGEMM.segment_sum_csr, (2, _i32([0, 1, 3, 3]), torch.arange(8.0))),
    "offsets_range": (_FBGEMM.offsets_range, (torch.tensor([0, 2, 2, 3]), 7)),
    "jagged_to_padded_dense_2d_values": (_FBGEMM.jagged_to_padded_dense,
                                         (torch.arange(10.0).view(5, 2), [torch.tensor([0, 2, 2, 5])], [2], -1.0)),
    "jagged_to_padded_dense_1d_values": (_FBGEMM.jagged_to_padded_dense,
                                         (torch.arange(5.0), [torch.tensor([0, 2, 2, 5])], [4], 0.5)),
    "jagged_2d_to_dense": (_FBGEMM.jagged_2d_to_dense, (torch.arange(10.0).view(5, 2), torch.tensor([0, 2, 2, 5]), 3)),
    "jagged_1d_to_dense": (_FBGEMM.jagged_1d_to_dense, (torch.arange(5), torch.tensor([0, 2, 2, 5]), 3, -1)),
    "dense_to_jagged": (_FBGEMM.dense_to_jagged, (torch.arange(12.0).view(3, 2, 2), [torch.tensor([0, 2, 2, 5])])),
    "permute_pooled_embs": (_FBGEMM.permute_pooled_embs,
                            (torch.arange(12.0).view(2, 6), torch.tensor([0, 1, 3, 6]), torch.tensor([2, 0, 1]),
                             torch.tensor([0, 3, 4, 6]), torch.tensor([1, 2, 0]))),
}


@pytest.mark.parametrize("case", list(_FBGEMM_CASES))
def test_fbgemm_op_matches_cpu(case, no_fallback):
    op, args = _FBGEMM_CASES[case]
    out_tpu, out_cpu = _both(op, *args)
    _assert_outputs_close(out_tpu, out_cpu)


def test_jagged_dense_conversions_backward_match_cpu(no_fallback):
    def run(device):
        values = torch.arange(10.0).view(5, 2).to(device).requires_grad_()
        dense = torch.arange(12.0).view(3, 2, 2).to(device).requires_grad_()
        offsets = [torch.tensor([0, 2, 2, 5], device=device)]
        padded = _FBGEMM.jagged_to_padded_dense(values, offsets, [2], 0.0)
        jagged, _ = _FBGEMM.dense_to_jagged(dense, offsets)
        g = torch.Generator().manual_seed(1)
        ((padded * torch.randn(padded.shape, generator=g).to(device)).sum()
         + (jagged * torch.randn(jagged.shape, generator=g).to(device)).sum()).backward()
        return values.grad, dense.grad
    for x, y in zip(run("tpu"), run("cpu")):
        assert_close(x, y)


def test_fbgemm_bad_input_raises_clearly():
    lengths = _LENGTHS_2D.to("tpu")
    with pytest.raises(RuntimeError, match="permute holds an index outside"):
        _FBGEMM.permute_2D_sparse_data(_i32([0, 7]).to("tpu"), lengths, _VALUES.to("tpu"), None)
    with pytest.raises(RuntimeError, match="one jagged dimension"):
        offsets = torch.tensor([0, 1, 2], device="tpu")
        _FBGEMM.jagged_to_padded_dense(torch.ones(2, 2, device="tpu"), [offsets, offsets], [1, 1], 0.0)
    with pytest.raises(RuntimeError, match="1-D or 2-D"):
        _FBGEMM.asynchronous_complete_cumsum(torch.ones(2, 2, 2, dtype=torch.int32, device="tpu"))


def test_kernels_register_whichever_loads_first():
    """fbgemm_gpu loaded before torch_tpu (the opposite of this file's order) still finds the tpu
    kernels."""
    code = (
        "import torch, fbgemm_gpu, torch_tpu\n"
        "torch_tpu.reset_fallback_counts()\n"
        "out = torch.ops.fbgemm.asynchronous_complete_cumsum(torch.tensor([1, 2], device='tpu'))\n"
        "assert out.cpu().tolist() == [0, 1, 3], out\n"
        "assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()\n"
    )
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---- DLRM training step ----------------------------------------------------------------------


_READER_KEYS = ["f4", "f2", "f1", "f3"]  # the order the batches arrive in
_MODEL_KEYS = ["f1", "f2", "f3", "f4"]


def _dlrm(device):
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables=_tables(dims=(4, 4, 4)), device=torch.device(device))
    return DLRM(embedding_bag_collection=ebc, dense_in_features=5, dense_arch_layer_sizes=[8, 4],
                over_arch_layer_sizes=[8, 1], dense_device=torch.device(device))


def _dlrm_batch(step, device):
    """Dense features, labels and a KJT built on `device` from lengths, in reader order."""
    g = torch.Generator().manual_seed(100 + step)
    dense = torch.randn(4, 5, generator=g).to(device)
    labels = torch.randint(0, 2, (4,), generator=g).float().to(device)
    return dense, _random_kjt(_READER_KEYS, batch=4, seed=200 + step, device=device), labels


def _dlrm_train_step(model, opt, dense, kjt, labels):
    # the input pipeline's work on the device: reorder features to the model's order
    order = [_READER_KEYS.index(k) for k in _MODEL_KEYS]
    features = kjt.permute(order)
    logits = model(dense, features).squeeze(-1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


def test_dlrm_training_matches_cpu_without_fallback():
    model_tpu, model_cpu = _dlrm("tpu"), _dlrm("cpu")
    model_tpu.load_state_dict(model_cpu.state_dict())
    opt_tpu = torch.optim.SGD(model_tpu.parameters(), lr=0.1)
    opt_cpu = torch.optim.SGD(model_cpu.parameters(), lr=0.1)
    for step in range(3):
        torch_tpu.reset_fallback_counts()
        loss_tpu = _dlrm_train_step(model_tpu, opt_tpu, *_dlrm_batch(step, "tpu"))
        torch.tpu.synchronize()
        assert torch_tpu.fallback_counts() == {}, f"ops fell back to the CPU: {torch_tpu.fallback_counts()}"
        loss_cpu = _dlrm_train_step(model_cpu, opt_cpu, *_dlrm_batch(step, "cpu"))
        assert_close(loss_tpu, loss_cpu, rtol=1e-5, atol=1e-6)
    _assert_params_close(model_tpu, model_cpu)
