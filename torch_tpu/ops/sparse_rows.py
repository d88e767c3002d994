"""The original TorchTPU's SparseCore row ops on CSR inputs: ``sparse_gather``, its backward
``sparse_gather_backward`` and ``sparse_iota``, written from their documented signatures.

Our device has no SparseCore: each op is the same math as gathers, scatter-adds and comparisons,
in one program on tpu tensors (in every eager mode and inside torch.compile) and as plain ops on
CPU tensors.

* ``sparse_gather(row_pointers, indices, operand, max_non_zeroes_per_row)``: row ``j`` of the
  result is ``operand[indices[j]]``; ``indices`` holds ``len(row_pointers) *
  max_non_zeroes_per_row`` entries (each CSR row's slots), so the result is ``[len(indices),
  operand.shape[1]]``. An index outside ``[0, operand.shape[0])`` is a padding slot and gathers a
  row of zeros (the convention of the ``sparse_dense_matmul`` family). Differentiable in
  ``operand``: the gradient is ``sparse_gather_backward``.
* ``sparse_gather_backward(grad_output, indices, grad_operand)``: ``grad_operand`` plus the rows
  of ``grad_output`` added at ``indices`` (padding slots add nothing), returned as a new tensor
  (``grad_operand`` is not modified).
* ``sparse_iota(row_pointers, max_non_zeroes, max_non_zeroes_per_row)``: for each non-zero
  ``k < max_non_zeroes``, its position within its CSR row, ``k - row_pointers[r]`` where row
  ``r`` holds ``k`` (``row_pointers[r] <= k < row_pointers[r + 1]``; ``row_pointers`` is the
  usual CSR array, one more entry than rows, non-decreasing). Slots past the last non-zero
  (``k >= row_pointers[-1]``) are padding and get -1. int32. ``max_non_zeroes_per_row`` sizes
  SparseCore's row buffers: checked to be positive, nothing to size here.

``sparse_map_row`` checks its arguments as the original does and then raises: its ``body_mlir`` is
a row program for SparseCore's own compiler, in a calling convention the original does not
document, and the original itself refuses the op on a device without SparseCore - which every
device this backend drives is (docs/migrating_from_torchtpu.md).
"""

import torch

from .sparse_dense import _masked, _one_program


def _check_index(name, arg, t):
    if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name}: {arg} must be a 1-D integer tensor, got {t.dtype} {tuple(t.shape)}")


def _is_int(value):
    """A Python int (not a bool, which is one in Python's eyes)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_max_per_row(name, value):
    if not _is_int(value) or value <= 0:
        raise ValueError(f"{name}: max_non_zeroes_per_row must be a positive int, got {value!r}")


def _check_same_device(name, arg, t, like):
    if t.device != like.device:
        raise ValueError(f"{name}: {arg} is on {t.device}, the operand on {like.device}: move it to {like.device}")


def _slots(indices, rows):
    """(valid [n] bool, safe row per slot): padding slots point at row 0 and are masked out."""
    valid = (indices >= 0) & (indices < rows)
    zero = torch.zeros((), dtype=torch.long, device=indices.device)
    return valid, torch.where(valid, indices.long(), zero)


def sparse_gather(row_pointers, indices, operand, max_non_zeroes_per_row):
    """``operand``'s rows at ``indices`` (zeros at padding slots): ``[len(indices), dim]``."""
    name = "sparse_gather"
    _check_index(name, "row_pointers", row_pointers)
    _check_index(name, "indices", indices)
    _check_max_per_row(name, max_non_zeroes_per_row)
    if operand.dim() != 2:
        raise ValueError(f"{name}: operand must be 2-D, got shape {tuple(operand.shape)}")
    if indices.numel() != row_pointers.numel() * max_non_zeroes_per_row:
        raise ValueError(f"{name}: indices must hold len(row_pointers) * max_non_zeroes_per_row = "
                         f"{row_pointers.numel()} * {max_non_zeroes_per_row} = "
                         f"{row_pointers.numel() * max_non_zeroes_per_row} entries, got {indices.numel()}")
    _check_same_device(name, "indices", indices, operand)

    def run():
        valid, rows = _slots(indices, operand.shape[0])
        return _masked(valid, operand.index_select(0, rows))

    return _one_program(run, operand)


def sparse_gather_backward(grad_output, indices, grad_operand):
    """``grad_operand`` with ``grad_output``'s rows added at ``indices`` (a new tensor)."""
    name = "sparse_gather_backward"
    _check_index(name, "indices", indices)
    if grad_operand.dim() != 2:
        raise ValueError(f"{name}: grad_operand must be 2-D, got shape {tuple(grad_operand.shape)}")
    if grad_output.shape != (indices.numel(), grad_operand.shape[1]):
        raise ValueError(f"{name}: grad_output must be [len(indices), {grad_operand.shape[1]}] = "
                         f"[{indices.numel()}, {grad_operand.shape[1]}], got {tuple(grad_output.shape)}")
    for arg, t in (("indices", indices), ("grad_output", grad_output)):
        _check_same_device(name, arg, t, grad_operand)

    def run():
        valid, rows = _slots(indices, grad_operand.shape[0])
        return grad_operand.index_add(0, rows, _masked(valid, grad_output.to(grad_operand.dtype)))

    return _one_program(run, grad_operand)


def sparse_iota(row_pointers, max_non_zeroes, max_non_zeroes_per_row):
    """Each non-zero's position within its CSR row, ``[max_non_zeroes]`` int32 (-1 past the last)."""
    name = "sparse_iota"
    _check_index(name, "row_pointers", row_pointers)
    _check_max_per_row(name, max_non_zeroes_per_row)
    if not _is_int(max_non_zeroes) or max_non_zeroes < 0:
        raise ValueError(f"{name}: max_non_zeroes must be a non-negative int, got {max_non_zeroes!r}")
    if row_pointers.numel() == 0:
        raise ValueError(f"{name}: row_pointers must hold at least one entry (the CSR start of row 0)")

    def run():
        starts = row_pointers.long()
        k = torch.arange(max_non_zeroes, dtype=torch.long, device=row_pointers.device)
        # The row holding k is the last one starting at or before it (row pointers are
        # non-decreasing, so an empty row's start equals the next row's and is skipped).
        row = (torch.searchsorted(starts, k, right=True) - 1).clamp(min=0)
        start = starts.index_select(0, row)
        inside = (k >= starts[0]) & (k < starts[-1])
        return torch.where(inside, k - start, torch.full((), -1, dtype=torch.long, device=k.device)).to(torch.int32)

    return _one_program(run, row_pointers)


def sparse_map_row(csr_tensors, csr_lengths, dense_args, body_mlir, dummy_outputs, max_non_zeroes_per_row,
                   pad_value, max_pad_per_row, wait_threshold, result_row_pointer_op_index):
    """The original's SparseCore row map: its arguments are checked, then it raises
    ``NotImplementedError`` (a ``RuntimeError``), as the original does on a device without
    SparseCore."""
    name = "sparse_map_row"
    csr_tensors, csr_lengths, dummy_outputs = list(csr_tensors), list(csr_lengths), list(dummy_outputs)
    if not csr_lengths:
        raise ValueError(f"{name}: csr_lengths must have at least one entry (the tensors of each CSR matrix)")
    if not all(_is_int(n) and n > 0 for n in csr_lengths):
        raise ValueError(f"{name}: csr_lengths must hold positive ints, got {csr_lengths!r}")
    if sum(csr_lengths) != len(csr_tensors):
        raise ValueError(f"{name}: the csr_lengths add up to {sum(csr_lengths)} tensors, but csr_tensors holds "
                         f"{len(csr_tensors)}: give each CSR matrix's tensors in order and their count in csr_lengths")
    if not dummy_outputs:
        raise ValueError(f"{name}: dummy_outputs must hold at least one tensor (the shape and dtype of each output)")
    for arg, ts in (("csr_tensors", csr_tensors), ("dense_args", list(dense_args)), ("dummy_outputs", dummy_outputs)):
        if not all(isinstance(t, torch.Tensor) for t in ts):
            raise ValueError(f"{name}: {arg} must be a list of tensors")
    if not isinstance(body_mlir, str) or not body_mlir.strip():
        raise ValueError(f"{name}: body_mlir must be the row program's MLIR text")
    _check_max_per_row(name, max_non_zeroes_per_row)
    index = result_row_pointer_op_index  # negative: the outputs are not CSR rows of an input
    if not _is_int(index) or index >= len(csr_lengths):
        raise ValueError(f"{name}: result_row_pointer_op_index must name one of the {len(csr_lengths)} CSR "
                         f"matrices (or be negative), got {index!r}")
    device = (csr_tensors + dummy_outputs)[0].device
    raise NotImplementedError(
        f"{name} runs its body_mlir on a TPU's SparseCore, which {device} does not have (the original TorchTPU "
        "raises the same on a device without SparseCore). Write the row computation with ordinary ops on the "
        "CSR tensors - sparse_gather, sparse_iota, index_add / scatter_add - which run as one program here")
