"""torch.tpu.ops' sparse_dense_matmul family (the original TorchTPU's embedding lookups and their
fused optimizer updates), written from its documented signatures and checked against the same math
done on CPU as dense matrices: the input's entries as a [batch, rows] matrix A, the activations
A @ table, the table's gradient A^T @ activations_grad, and each optimizer's formula on the rows
some entry looks up."""

import pytest
import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, mode
from helpers import assert_close, assert_each_call_is_one_program

ops = torch.tpu.ops

ROWS, DIM, BATCH = 12, 6, 5
BIG = 2**31 - 1  # preprocessing's padding id


def _input(seed=0, entries=17):
    """Entries with repeated rows and samples, a zero gain, and three padding entries."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, ROWS - 3, (entries,), generator=g, dtype=torch.int32)  # the last rows stay unused
    samples = torch.randint(0, BATCH, (entries,), generator=g, dtype=torch.int32)
    gains = torch.rand(entries, generator=g) + 0.5
    gains[3] = 0.0
    ids = torch.cat([ids, torch.tensor([BIG, 2, -1], dtype=torch.int32)])
    samples = torch.cat([samples, torch.tensor([BIG, BATCH, 1], dtype=torch.int32)])
    gains = torch.cat([gains, torch.tensor([1.0, 1.0, 1.0])])
    row_pointers = torch.tensor([0, entries, entries + 3], dtype=torch.int32)
    return row_pointers, ids, samples, gains


def _dense(ids, samples, gains):
    """(A [BATCH, ROWS] of summed gains, touched rows [ROWS] bool), skipping padding entries."""
    a = torch.zeros(BATCH, ROWS, dtype=torch.float64)
    touched = torch.zeros(ROWS, dtype=torch.bool)
    for r, s, w in zip(ids.tolist(), samples.tolist(), gains.tolist()):
        if 0 <= r < ROWS and 0 <= s < BATCH:
            a[s, r] += w
            touched[r] = True
    return a, touched


def _tpu(*tensors):
    return [t.to("tpu") for t in tensors]


def test_lookup_matches_the_dense_product_and_differentiates():
    rp, ids, samples, gains = _input()
    table = torch.randn(ROWS, DIM)
    a, _ = _dense(ids, samples, gains)
    t_rp, t_ids, t_samples, t_gains = _tpu(rp, ids, samples, gains)
    t_table = table.to("tpu").requires_grad_()
    out = ops.sparse_dense_matmul(t_rp, t_ids, t_samples, t_gains, t_table, BATCH, 16, 16)
    assert out.shape == (BATCH, DIM) and out.device.type == "tpu"
    assert_close(out, (a @ table.double()).float())
    upstream = torch.randn(BATCH, DIM)
    out.backward(upstream.to("tpu"))
    assert_close(t_table.grad, (a.t() @ upstream.double()).float())
    cpu = ops.sparse_dense_matmul(rp, ids, samples, gains, table, BATCH, 16, 16)  # the same math on CPU
    assert_close(out, cpu)


def test_sgd_adagrad_and_adam_update_only_the_rows_looked_up():
    rp, ids, samples, gains = _input(1)
    table, grad_out = torch.randn(ROWS, DIM), torch.randn(BATCH, DIM)
    a, touched = _dense(ids, samples, gains)
    g = (a.t() @ grad_out.double()).float()
    mask = touched.unsqueeze(1)
    args = _tpu(rp, ids, samples, gains)
    t_table, t_grad_out = _tpu(table, grad_out)
    lr = torch.tensor(0.05)

    sgd = ops.sparse_dense_matmul_grad_with_sgd(*args, t_table, t_grad_out, lr.to("tpu"), BATCH, 16, 16, "sgd")
    assert_close(sgd, torch.where(mask, table - 0.05 * g, table))
    assert_close(t_table, table)  # functional: the input is unchanged

    acc = torch.rand(ROWS, DIM)
    new_table, new_acc = ops.sparse_dense_matmul_grad_with_adagrad(*args, t_table, acc.to("tpu"), t_grad_out,
                                                                   lr.to("tpu"), 1e-6, BATCH, 16, 16, "adagrad")
    expect_acc = acc + g * g
    assert_close(new_acc, torch.where(mask, expect_acc, acc))
    assert_close(new_table, torch.where(mask, table - 0.05 * g / (expect_acc.sqrt() + 1e-6), table))

    row_acc = torch.rand(ROWS)
    new_table, new_acc = ops.sparse_dense_matmul_grad_with_adagrad(*args, t_table, row_acc.to("tpu"), t_grad_out,
                                                                   0.05, 1e-6, BATCH, 16, 16, "adagrad")
    expect_row = row_acc + (g * g).mean(dim=1)
    assert_close(new_acc, torch.where(touched, expect_row, row_acc))
    assert_close(new_table, torch.where(mask, table - 0.05 * g / (expect_row.sqrt().unsqueeze(1) + 1e-6), table))

    m, v = torch.randn(ROWS, DIM), torch.rand(ROWS, DIM)
    alpha_t = torch.tensor(0.01)
    out = ops.sparse_dense_matmul_grad_with_adam(*args, t_table, m.to("tpu"), v.to("tpu"), t_grad_out,
                                                 alpha_t.to("tpu"), 0.9, 0.999, 1e-8, BATCH, 16, 16, "adam")
    m2, v2 = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    assert_close(out[1], torch.where(mask, m2, m))
    assert_close(out[2], torch.where(mask, v2, v))
    assert_close(out[0], torch.where(mask, table - 0.01 * m2 / (v2.sqrt() + 1e-8), table))


@pytest.mark.parametrize("eager", [EagerMode.STRICT, EagerMode.DEBUG])
def test_each_call_is_one_program(eager):
    rp, ids, samples, gains = _tpu(*_input(2))
    table, grad_out, m, v = _tpu(torch.randn(ROWS, DIM), torch.randn(BATCH, DIM), torch.zeros(ROWS, DIM),
                                 torch.zeros(ROWS, DIM))
    calls = [
        lambda: ops.sparse_dense_matmul(rp, ids, samples, gains, table, BATCH, 8, 8),
        lambda: ops.sparse_dense_matmul_grad_with_sgd(rp, ids, samples, gains, table, grad_out, 0.1, BATCH, 8, 8, "s"),
        lambda: ops.sparse_dense_matmul_grad_with_adam(rp, ids, samples, gains, table, m, v, grad_out, 0.1, 0.9,
                                                       0.99, 1e-8, BATCH, 8, 8, "a"),
    ]
    assert_each_call_is_one_program(calls, eager)


def test_a_dlrm_style_step_in_fused_eager_and_compile_equals_cpu():
    rp, ids, samples, gains = _input(3)
    table, dense_w = torch.randn(ROWS, DIM), torch.randn(DIM, 1)

    def step(rp, ids, samples, gains, table, dense_w):
        act = ops.sparse_dense_matmul(rp, ids, samples, gains, table, BATCH, 16, 16)
        act = act.detach().requires_grad_()
        loss = (act @ dense_w).square().mean()
        (grad,) = torch.autograd.grad(loss, act)
        return ops.sparse_dense_matmul_grad_with_sgd(rp, ids, samples, gains, table, grad, 0.1, BATCH, 16, 16, "s")

    expected = step(rp, ids, samples, gains, table, dense_w)
    args = _tpu(rp, ids, samples, gains, table, dense_w)
    with mode(EagerMode.FUSED):
        assert_close(step(*args), expected)
    assert_close(torch.compile(step, backend="tpu")(*args), expected)


def test_unstack_and_gradient_stack_are_inverse():
    stacked = torch.randn(3 + 4, 8)
    t = stacked.to("tpu").requires_grad_()
    first, second = ops.sparse_dense_matmul_activation_unstack(t, [3, 4], [5, 8])
    assert_close(first, stacked[:3, :5])
    assert_close(second, stacked[3:, :8])
    g1, g2 = torch.randn(3, 5), torch.randn(4, 8)
    (first * g1.to("tpu")).sum().backward(retain_graph=True)
    (second * g2.to("tpu")).sum().backward()
    restacked = ops.sparse_dense_matmul_gradient_stack([g1.to("tpu"), g2.to("tpu")], 7, 8)
    assert_close(t.grad, restacked.cpu())
    expected = torch.zeros(7, 8)
    expected[:3, :5], expected[3:] = g1, g2
    assert_close(restacked, expected)
    padded = ops.sparse_dense_matmul_gradient_stack([g1.to("tpu")], 5, 6)
    assert padded.shape == (5, 6) and torch.count_nonzero(padded[3:].cpu()) == 0


def test_bad_arguments_raise_clear_errors():
    rp, ids, samples, gains = _input()
    table = torch.randn(ROWS, DIM)
    with pytest.raises(TypeError, match="embedding_ids must be an integer tensor"):
        ops.sparse_dense_matmul(rp, ids.float(), samples, gains, table, BATCH, 16, 16)
    with pytest.raises(ValueError, match="one length"):
        ops.sparse_dense_matmul(rp, ids[:-1], samples, gains, table, BATCH, 16, 16)
    with pytest.raises(ValueError, match="max_ids_per_partition must be a positive int"):
        ops.sparse_dense_matmul(rp, ids, samples, gains, table, BATCH, 0, 16)
    with pytest.raises(ValueError, match="move it to tpu"):
        ops.sparse_dense_matmul(rp, ids, samples, gains, table.to("tpu"), BATCH, 16, 16)
    with pytest.raises(ValueError, match="activations_grad must be"):
        ops.sparse_dense_matmul_grad_with_sgd(rp, ids, samples, gains, table, torch.randn(BATCH, DIM + 1), 0.1,
                                              BATCH, 16, 16, "s")
    with pytest.raises(ValueError, match="accumulator must be"):
        ops.sparse_dense_matmul_grad_with_adagrad(rp, ids, samples, gains, table, torch.zeros(ROWS, 2),
                                                  torch.randn(BATCH, DIM), 0.1, 1e-6, BATCH, 16, 16, "a")
    with pytest.raises(ValueError, match="do not hold features"):
        ops.sparse_dense_matmul_activation_unstack(torch.randn(6, 4), [3, 4], [4, 4])
