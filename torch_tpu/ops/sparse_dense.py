"""The original TorchTPU's ``sparse_dense_matmul`` family: the embedding lookups of recommendation
models (DLRM) and their backward fused with an SGD, Adagrad or Adam update of the table.

The sparse input is the coordinate lists SparseCore input preprocessing produces, one entry per
looked-up id: ``embedding_ids[i]`` (a row of the table), ``sample_ids[i]`` (a row of the
activations) and ``gains[i]`` (its weight). Our device has no SparseCore, so the table is this
device's whole table and every entry is read; ``row_pointers`` (where each partition's entries
start) is checked but not needed. An entry whose sample id is outside ``[0, device_batch_size)``
or whose embedding id is outside the table is padding and contributes nothing (preprocessing pads
partitions with such entries). ``max_ids_per_partition`` and ``max_unique_ids_per_partition``
size SparseCore's buffers: checked to be positive, nothing to size here. ``computation_name`` is
accepted (a name on SparseCore).

* ``sparse_dense_matmul``: ``activations[s] = sum of gains[i] * table[embedding_ids[i]]`` over
  the entries of sample ``s``, shape ``[device_batch_size, dim]``; differentiable in the table
  and the gains.
* ``sparse_dense_matmul_grad_with_{sgd,adagrad,adam}``: the table's gradient
  ``G[r] = sum of gains[i] * activations_grad[sample_ids[i]]`` over the entries of row ``r``,
  then an update of the rows that some entry looks up (the others, and their optimizer state,
  stay as they are):
  - SGD: ``table - learning_rate * G``;
  - Adagrad: ``a' = a + G^2`` (a row-wise, 1-D accumulator adds the row's mean of ``G^2``),
    ``table - learning_rate * G / (sqrt(a') + epsilon)``;
  - Adam: ``m' = beta_1 m + (1 - beta_1) G``, ``v' = beta_2 v + (1 - beta_2) G^2``,
    ``table - alpha_t * m' / (sqrt(v') + epsilon)`` (``alpha_t`` is the step's bias-corrected
    learning rate, as the original takes it).
  They are functional, as on SparseCore: the updated table and state are returned, the inputs
  are left as they were.
* ``sparse_dense_matmul_activation_unstack`` / ``_gradient_stack``: features stacked one after
  another along the rows (one SparseCore's interleaving), each in the first ``dim`` columns.

On tpu tensors each call is gathers and scatter-adds in one program, in every eager mode (a
Strict call records its ops as one Fused graph) and inside torch.compile; on CPU tensors it is
the same math.
"""

import torch
import torch.nn.functional as F

from ..execution_mode import EagerMode, get_mode, mode


def _one_program(fn, tensor):
    """``fn()``, recorded as one graph when ``tensor`` is on tpu in an eager mode that would run
    its ops one by one."""
    if tensor.device.type != "tpu" or torch.compiler.is_compiling() or get_mode() == EagerMode.FUSED:
        return fn()
    with mode(EagerMode.FUSED):
        return fn()


def _check_input(name, row_pointers, embedding_ids, sample_ids, gains, table, device_batch_size,
                 max_ids_per_partition, max_unique_ids_per_partition):
    if row_pointers.dim() != 1 or row_pointers.is_floating_point() or row_pointers.is_complex():
        raise ValueError(f"{name}: row_pointers must be a 1-D integer tensor, got {row_pointers.dtype} "
                         f"{tuple(row_pointers.shape)}")
    for arg, t in (("embedding_ids", embedding_ids), ("sample_ids", sample_ids)):
        if t.is_floating_point() or t.is_complex():
            raise TypeError(f"{name}: {arg} must be an integer tensor, got {t.dtype}")
    if not gains.is_floating_point():
        raise TypeError(f"{name}: gains must be a floating-point tensor, got {gains.dtype}")
    if embedding_ids.dim() != 1 or embedding_ids.shape != sample_ids.shape or embedding_ids.shape != gains.shape:
        raise ValueError(f"{name}: embedding_ids, sample_ids and gains must be 1-D and of one length, got "
                         f"{tuple(embedding_ids.shape)}, {tuple(sample_ids.shape)} and {tuple(gains.shape)}")
    if table.dim() != 2 or not table.is_floating_point():
        raise ValueError(f"{name}: embedding_table must be a 2-D floating-point tensor, got {table.dtype} "
                         f"{tuple(table.shape)}")
    for arg, value in (("device_batch_size", device_batch_size), ("max_ids_per_partition", max_ids_per_partition),
                       ("max_unique_ids_per_partition", max_unique_ids_per_partition)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name}: {arg} must be a positive int, got {value!r}")
    for arg, t in (("embedding_ids", embedding_ids), ("sample_ids", sample_ids), ("gains", gains)):
        if t.device != table.device:
            raise ValueError(f"{name}: {arg} is on {t.device}, the table on {table.device}: move it to "
                             f"{table.device} (no host read)")


def _entries(embedding_ids, sample_ids, rows, batch):
    """(valid mask, safe table rows, safe sample rows) of the entries; padding entries point at
    row 0 and are masked out."""
    valid = (sample_ids >= 0) & (sample_ids < batch) & (embedding_ids >= 0) & (embedding_ids < rows)
    zero = torch.zeros((), dtype=torch.long, device=embedding_ids.device)
    table_row = torch.where(valid, embedding_ids.long(), zero)
    sample_row = torch.where(valid, sample_ids.long(), zero)
    return valid, table_row, sample_row


def _masked(valid, values):
    return torch.where(valid.unsqueeze(1), values, torch.zeros((), dtype=values.dtype, device=values.device))


def sparse_dense_matmul(row_pointers, embedding_ids, sample_ids, gains, embedding_table, device_batch_size,
                        max_ids_per_partition, max_unique_ids_per_partition):
    """Looks up and combines embeddings: ``[device_batch_size, dim]`` (see the module docstring)."""
    _check_input("sparse_dense_matmul", row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                 device_batch_size, max_ids_per_partition, max_unique_ids_per_partition)

    def run():
        valid, table_row, sample_row = _entries(embedding_ids, sample_ids, embedding_table.shape[0],
                                                device_batch_size)
        rows = embedding_table.index_select(0, table_row) * gains.to(embedding_table.dtype).unsqueeze(1)
        out = embedding_table.new_zeros(device_batch_size, embedding_table.shape[1])
        return out.index_add(0, sample_row, _masked(valid, rows))

    return _one_program(run, embedding_table)


def _check_grad_input(name, row_pointers, embedding_ids, sample_ids, gains, table, activations_grad,
                      device_batch_size, max_ids_per_partition, max_unique_ids_per_partition):
    _check_input(name, row_pointers, embedding_ids, sample_ids, gains, table, device_batch_size,
                 max_ids_per_partition, max_unique_ids_per_partition)
    if activations_grad.dim() != 2 or activations_grad.shape[1] != table.shape[1]:
        raise ValueError(f"{name}: activations_grad must be [batch, {table.shape[1]}] (the table's width), "
                         f"got {tuple(activations_grad.shape)}")
    if activations_grad.shape[0] < device_batch_size:
        raise ValueError(f"{name}: activations_grad has {activations_grad.shape[0]} rows, fewer than "
                         f"device_batch_size {device_batch_size}")


def _table_grad(embedding_ids, sample_ids, gains, table, activations_grad, device_batch_size):
    """(G, touched rows [rows, 1] bool): the table's gradient and the rows some entry looks up."""
    valid, table_row, sample_row = _entries(embedding_ids, sample_ids, table.shape[0], device_batch_size)
    contrib = activations_grad.to(table.dtype).index_select(0, sample_row) * gains.to(table.dtype).unsqueeze(1)
    grad = table.new_zeros(table.shape).index_add(0, table_row, _masked(valid, contrib))
    hits = table.new_zeros(table.shape[0]).index_add(0, table_row, valid.to(table.dtype))
    return grad, (hits > 0).unsqueeze(1)


def _scalar(value, like):
    return value.to(device=like.device, dtype=like.dtype) if isinstance(value, torch.Tensor) else value


def _check_state(name, arg, state, table, row_wise_ok=False):
    shapes = [tuple(table.shape)] + ([(table.shape[0],)] if row_wise_ok else [])
    if tuple(state.shape) not in shapes or state.device != table.device or not state.is_floating_point():
        raise ValueError(f"{name}: {arg} must be a floating-point tensor of shape "
                         f"{' or '.join(str(s) for s in shapes)} on {table.device}, got {state.dtype} "
                         f"{tuple(state.shape)} on {state.device}")


def sparse_dense_matmul_grad_with_sgd(row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                                      activations_grad, learning_rate, device_batch_size, max_ids_per_partition,
                                      max_unique_ids_per_partition, computation_name):
    """The table after an SGD step on the rows the input looks up."""
    name = "sparse_dense_matmul_grad_with_sgd"
    _check_grad_input(name, row_pointers, embedding_ids, sample_ids, gains, embedding_table, activations_grad,
                      device_batch_size, max_ids_per_partition, max_unique_ids_per_partition)

    def run():
        grad, touched = _table_grad(embedding_ids, sample_ids, gains, embedding_table, activations_grad,
                                    device_batch_size)
        stepped = embedding_table - _scalar(learning_rate, embedding_table) * grad
        return torch.where(touched, stepped, embedding_table)

    return _one_program(run, embedding_table)


def sparse_dense_matmul_grad_with_adagrad(row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                                          accumulator, activations_grad, learning_rate, epsilon, device_batch_size,
                                          max_ids_per_partition, max_unique_ids_per_partition, computation_name):
    """(table, accumulator) after an Adagrad step on the rows the input looks up; the accumulator
    is per element (the table's shape) or per row (1-D)."""
    name = "sparse_dense_matmul_grad_with_adagrad"
    _check_grad_input(name, row_pointers, embedding_ids, sample_ids, gains, embedding_table, activations_grad,
                      device_batch_size, max_ids_per_partition, max_unique_ids_per_partition)
    _check_state(name, "accumulator", accumulator, embedding_table, row_wise_ok=True)

    def run():
        grad, touched = _table_grad(embedding_ids, sample_ids, gains, embedding_table, activations_grad,
                                    device_batch_size)
        squares = grad * grad
        if accumulator.dim() == 1:
            acc = accumulator.to(grad.dtype) + squares.mean(dim=1)
            new_acc = torch.where(touched.squeeze(1), acc, accumulator.to(grad.dtype)).to(accumulator.dtype)
            denom = acc.sqrt().unsqueeze(1) + epsilon
        else:
            acc = accumulator.to(grad.dtype) + squares
            new_acc = torch.where(touched, acc, accumulator.to(grad.dtype)).to(accumulator.dtype)
            denom = acc.sqrt() + epsilon
        stepped = embedding_table - _scalar(learning_rate, embedding_table) * grad / denom
        return torch.where(touched, stepped, embedding_table), new_acc

    return _one_program(run, embedding_table)


def sparse_dense_matmul_grad_with_adam(row_pointers, embedding_ids, sample_ids, gains, embedding_table, momentum,
                                       velocity, activations_grad, alpha_t, beta_1, beta_2, epsilon,
                                       device_batch_size, max_ids_per_partition, max_unique_ids_per_partition,
                                       computation_name):
    """(table, momentum, velocity) after an Adam step on the rows the input looks up."""
    name = "sparse_dense_matmul_grad_with_adam"
    _check_grad_input(name, row_pointers, embedding_ids, sample_ids, gains, embedding_table, activations_grad,
                      device_batch_size, max_ids_per_partition, max_unique_ids_per_partition)
    _check_state(name, "momentum", momentum, embedding_table)
    _check_state(name, "velocity", velocity, embedding_table)

    def run():
        grad, touched = _table_grad(embedding_ids, sample_ids, gains, embedding_table, activations_grad,
                                    device_batch_size)
        m = beta_1 * momentum + (1 - beta_1) * grad
        v = beta_2 * velocity + (1 - beta_2) * grad * grad
        stepped = embedding_table - _scalar(alpha_t, embedding_table) * m / (v.sqrt() + epsilon)
        return (torch.where(touched, stepped, embedding_table), torch.where(touched, m, momentum),
                torch.where(touched, v, velocity))

    return _one_program(run, embedding_table)


def _check_features(name, batch_sizes, dims):
    batch_sizes, dims = list(batch_sizes), list(dims)
    if len(batch_sizes) != len(dims) or any(not isinstance(v, int) or v < 0 for v in batch_sizes + dims):
        raise ValueError(f"{name}: per-feature batch sizes and dims must be lists of one length of "
                         f"non-negative ints, got {batch_sizes} and {dims}")
    return batch_sizes, dims


def sparse_dense_matmul_activation_unstack(stacked_activations, per_feature_batch_sizes, per_feature_dims):
    """Each feature's ``[batch, dim]`` activations out of the stacked ones (differentiable; the
    gradient is ``sparse_dense_matmul_gradient_stack``'s layout)."""
    name = "sparse_dense_matmul_activation_unstack"
    batch_sizes, dims = _check_features(name, per_feature_batch_sizes, per_feature_dims)
    rows, width = stacked_activations.shape if stacked_activations.dim() == 2 else (-1, -1)
    if rows != sum(batch_sizes) or any(d > width for d in dims):
        raise ValueError(f"{name}: stacked_activations {tuple(stacked_activations.shape)} do not hold features of "
                         f"batch sizes {batch_sizes} and dims {dims} (rows = their sum, columns >= each dim)")
    out, start = [], 0
    for batch, dim in zip(batch_sizes, dims):
        out.append(stacked_activations[start:start + batch, :dim])
        start += batch
    return out


def sparse_dense_matmul_gradient_stack(unstacked_gradients, stacked_batch_size, stacked_feature_dim):
    """The features' gradients stacked into ``[stacked_batch_size, stacked_feature_dim]`` (zeros
    elsewhere): the inverse of ``sparse_dense_matmul_activation_unstack``."""
    name = "sparse_dense_matmul_gradient_stack"
    grads = list(unstacked_gradients)
    if not grads or any(g.dim() != 2 for g in grads):
        raise ValueError(f"{name}: expected a non-empty list of 2-D gradients")
    if sum(g.shape[0] for g in grads) > stacked_batch_size or any(g.shape[1] > stacked_feature_dim for g in grads):
        raise ValueError(f"{name}: gradients of shapes {[tuple(g.shape) for g in grads]} do not fit "
                         f"[{stacked_batch_size}, {stacked_feature_dim}]")
    padded = [F.pad(g, (0, stacked_feature_dim - g.shape[1])) for g in grads]
    rest = stacked_batch_size - sum(g.shape[0] for g in grads)
    if rest:
        padded.append(grads[0].new_zeros(rest, stacked_feature_dim))
    return torch.cat(padded)
