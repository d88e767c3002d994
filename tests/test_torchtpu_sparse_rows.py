"""torch.tpu.ops' SparseCore row ops on CSR inputs (sparse_gather, sparse_gather_backward,
sparse_iota), written from the original TorchTPU's documented signatures and checked against the
same math spelled out element by element on CPU."""

import pytest
import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode
from helpers import assert_close, assert_each_call_is_one_program

ops = torch.tpu.ops

ROWS, DIM, PER_ROW = 7, 5, 3
ROW_POINTERS = [0, 2, 2, 5]  # three CSR rows (one empty); four row pointers


def _indices():
    """len(ROW_POINTERS) * PER_ROW slots, repeated rows and three padding slots."""
    return torch.tensor([4, 0, 4, 6, ROWS, 1, -1, 2, 2, 0, 2**31 - 1, 3], dtype=torch.int32)


def _gather_reference(indices, operand):
    out = torch.zeros(len(indices), operand.shape[1], dtype=operand.dtype)
    for j, r in enumerate(indices.tolist()):
        if 0 <= r < operand.shape[0]:
            out[j] = operand[r]
    return out


def _scatter_reference(grad_output, indices, grad_operand):
    out = grad_operand.clone()
    for j, r in enumerate(indices.tolist()):
        if 0 <= r < grad_operand.shape[0]:
            out[r] += grad_output[j]
    return out


def _iota_reference(row_pointers, max_non_zeroes):
    out = []
    for k in range(max_non_zeroes):
        if row_pointers[0] <= k < row_pointers[-1]:
            start = max(p for p in row_pointers if p <= k)
            out.append(k - start)
        else:
            out.append(-1)
    return torch.tensor(out, dtype=torch.int32)


def test_sparse_gather_equals_the_rows_and_differentiates_as_its_backward():
    indices, operand = _indices(), torch.randn(ROWS, DIM)
    rp = torch.tensor(ROW_POINTERS, dtype=torch.int32)
    t_operand = operand.to("tpu").requires_grad_()
    out = ops.sparse_gather(rp.to("tpu"), indices.to("tpu"), t_operand, PER_ROW)
    assert out.shape == (len(indices), DIM) and out.device.type == "tpu"
    assert_close(out, _gather_reference(indices, operand))
    upstream = torch.randn(len(indices), DIM)
    out.backward(upstream.to("tpu"))
    expected_grad = _scatter_reference(upstream, indices, torch.zeros(ROWS, DIM))
    assert_close(t_operand.grad, expected_grad)
    # The documented backward op gives the same gradient, and leaves its input as it was.
    base = torch.randn(ROWS, DIM)
    t_base = base.to("tpu")
    back = ops.sparse_gather_backward(upstream.to("tpu"), indices.to("tpu"), t_base)
    assert_close(back, _scatter_reference(upstream, indices, base))
    assert_close(t_base, base)
    # The same calls on CPU tensors are the same math.
    torch.testing.assert_close(ops.sparse_gather(rp, indices, operand, PER_ROW), _gather_reference(indices, operand))


@pytest.mark.parametrize("row_pointers,max_non_zeroes", [
    (ROW_POINTERS, 8),  # an empty row, two padding slots
    ([0, 4], 4),  # one row, no padding
    ([3, 3, 6], 7),  # non-zeroes before the first row's start are padding too
    ([0, 0, 0], 3),  # no non-zeroes at all
])
def test_sparse_iota_is_each_non_zeros_position_in_its_row(row_pointers, max_non_zeroes):
    rp = torch.tensor(row_pointers, dtype=torch.int32)
    got = ops.sparse_iota(rp.to("tpu"), max_non_zeroes, PER_ROW)
    assert got.dtype == torch.int32 and got.device.type == "tpu"
    expected = _iota_reference(row_pointers, max_non_zeroes)
    assert torch.equal(got.cpu(), expected)
    assert torch.equal(ops.sparse_iota(rp, max_non_zeroes, PER_ROW), expected)


@pytest.mark.parametrize("eager", [EagerMode.STRICT, EagerMode.DEBUG])
def test_each_call_is_one_program(eager):
    rp, indices = torch.tensor(ROW_POINTERS, dtype=torch.int32, device="tpu"), _indices().to("tpu")
    operand, grad_out = torch.randn(ROWS, DIM, device="tpu"), torch.randn(len(_indices()), DIM, device="tpu")
    calls = [lambda: ops.sparse_gather(rp, indices, operand, PER_ROW),
             lambda: ops.sparse_gather_backward(grad_out, indices, operand),
             lambda: ops.sparse_iota(rp, 9, PER_ROW)]
    assert_each_call_is_one_program(calls, eager)


def test_inside_torch_compile_with_no_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    indices, operand = _indices(), torch.randn(ROWS, DIM)
    rp = torch.tensor(ROW_POINTERS, dtype=torch.int32)

    def fn(rp, indices, operand):
        gathered = ops.sparse_gather(rp, indices, operand, PER_ROW)
        return ops.sparse_gather_backward(gathered * 2, indices, operand), ops.sparse_iota(rp, 6, PER_ROW)

    expected = fn(rp, indices, operand)
    got = torch.compile(fn, backend="tpu")(rp.to("tpu"), indices.to("tpu"), operand.to("tpu"))
    assert_close(got[0], expected[0])
    assert torch.equal(got[1].cpu(), expected[1])


def test_bad_arguments_raise_clear_errors():
    rp, indices, operand = torch.tensor(ROW_POINTERS, dtype=torch.int32), _indices(), torch.randn(ROWS, DIM)
    with pytest.raises(ValueError, match=r"indices must hold len\(row_pointers\) \* max_non_zeroes_per_row"):
        ops.sparse_gather(rp, indices[:-1], operand, PER_ROW)
    with pytest.raises(ValueError, match="indices must be a 1-D integer tensor"):
        ops.sparse_gather(rp, indices.float(), operand, PER_ROW)
    with pytest.raises(ValueError, match="max_non_zeroes_per_row must be a positive int"):
        ops.sparse_gather(rp, indices, operand, 0)
    with pytest.raises(ValueError, match="operand must be 2-D"):
        ops.sparse_gather(rp, indices, operand.flatten(), PER_ROW)
    with pytest.raises(ValueError, match="move it to tpu"):
        ops.sparse_gather(rp, indices, operand.to("tpu"), PER_ROW)
    with pytest.raises(ValueError, match=r"grad_output must be \[len\(indices\), 5\]"):
        ops.sparse_gather_backward(torch.randn(3, DIM), indices, operand)
    with pytest.raises(ValueError, match="max_non_zeroes must be a non-negative int"):
        ops.sparse_iota(rp, -1, PER_ROW)
    with pytest.raises(ValueError, match="at least one entry"):
        ops.sparse_iota(rp[:0], 4, PER_ROW)


def test_sparse_map_row_checks_its_arguments_then_says_it_needs_sparsecore():
    # Code written for the original imports and calls it; its body runs on SparseCore only, and the
    # original refuses it on a device without one - as every device here is.
    rp = torch.tensor(ROW_POINTERS, dtype=torch.int32, device="tpu")
    cols, vals = _indices().to("tpu"), torch.randn(len(ROW_POINTERS) * PER_ROW, device="tpu")
    out = torch.empty(len(ROW_POINTERS) * PER_ROW, device="tpu")
    body = "module { func.func @main() { return } }"

    def call(csr=(rp, cols, vals), lengths=(3,), dummy=(out,), body=body, per_row=PER_ROW, index=0):
        return ops.sparse_map_row(list(csr), list(lengths), [], body, list(dummy), per_row, -1, 8, 0.5, index)

    with pytest.raises(NotImplementedError, match="SparseCore, which tpu:0 does not have.*sparse_gather"):
        call()
    with pytest.raises(RuntimeError):  # what code written for the original catches
        call()
    with pytest.raises(ValueError, match=r"csr_lengths add up to 2 tensors, but csr_tensors holds 3"):
        call(lengths=(2,))
    with pytest.raises(ValueError, match="csr_lengths must have at least one entry"):
        call(lengths=())
    with pytest.raises(ValueError, match="dummy_outputs must hold at least one tensor"):
        call(dummy=())
    with pytest.raises(ValueError, match="body_mlir must be the row program's MLIR text"):
        call(body="")
    with pytest.raises(ValueError, match="max_non_zeroes_per_row must be a positive int"):
        call(per_row=0)
    with pytest.raises(ValueError, match="result_row_pointer_op_index must name one of the 1 CSR matrices"):
        call(index=1)
