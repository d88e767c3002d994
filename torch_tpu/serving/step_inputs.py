"""The device side of a step's input preparation and of its tail (engine-neutral).

``derive`` turns a step's packed metadata (``step_batch``) into what the model and the attention
need, on the device: the attention groups (split layout: the decode and prefill query grids;
ragged: one group of every token, each with its row) with their positions and KV table rows,
each token's position and KV slot, the input ids (the host's ids, or the slot's last sampled
token where the host does not know it yet) and each request's logits row. ``finish``
samples and updates the per-slot state. Both depend only on the bucket and the tensors' data,
so they are part of the step's one program.
"""

from dataclasses import dataclass

import torch

from . import sampler
from .attention import AttentionGroup
from .step_batch import FRESH, REAL


@dataclass
class StepInputs:
    groups: list  # AttentionGroups: decodes, then prefills
    positions: torch.Tensor  # [T] int64
    kv_slots: torch.Tensor  # [T] int64: where each token's K/V are written (padding: slot 0)
    input_ids: torch.Tensor  # [T] int32
    logits_rows: torch.Tensor  # [R] int64: each request's last token
    state_slots: torch.Tensor  # [R] int64
    real: torch.Tensor  # [R] bool: the row's sample is an output
    fresh: torch.Tensor  # [R] bool: the slot's state starts now


def derive(v: dict, key, block_size: int, last_tokens: torch.Tensor) -> StepInputs:
    rows = v["rows"].long()
    if key.ragged:
        return _derive_ragged(v, rows, key, block_size, last_tokens)
    qstart, qlen, start, slot = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    device = rows.device
    t = key.tokens
    groups, cells, last = [], [], []
    if key.decodes:
        d = key.decodes
        valid = qlen[:d] > 0
        index = torch.arange(d, device=device)
        position = torch.where(valid, start[:d], 0)
        table = v["bt_decode"].long()
        groups.append(AttentionGroup(token_index=index[:, None], write_index=torch.where(valid, index, -1),
                                     position=position[:, None], block_table=table))
        cells.append((index, position, valid, table, slot[:d]))
        last.append(index)
    if key.prefills:
        d, length = key.decodes, key.prefill_len
        j = torch.arange(length, device=device)[None, :]
        valid = j < qlen[d:, None]
        index = torch.where(valid, qstart[d:, None] + j, 0)
        position = torch.where(valid, start[d:, None] + j, 0)
        table = v["bt_prefill"].long()
        groups.append(AttentionGroup(token_index=index, write_index=torch.where(valid, index, -1).reshape(-1),
                                     position=position, block_table=table))
        cells.append((index.reshape(-1), position.reshape(-1), valid.reshape(-1), table.repeat_interleave(length, 0),
                      slot[d:].repeat_interleave(length, 0)))
        last.append((qstart[d:] + qlen[d:] - 1).clamp(min=0))
    # Per token: position, KV slot and state slot, scattered from the groups' cells (padding
    # tokens keep position 0 and slots 0; the spare row t takes the padding cells' writes).
    positions = torch.zeros(t + 1, dtype=torch.int64, device=device)
    kv_slots = torch.zeros(t + 1, dtype=torch.int64, device=device)
    token_state = torch.zeros(t + 1, dtype=torch.int64, device=device)
    for index, position, valid, table, state in cells:
        target = torch.where(valid, index, t)
        block = table.gather(1, (position // block_size)[:, None]).squeeze(1)
        positions.index_copy_(0, target, position)
        kv_slots.index_copy_(0, target, block * block_size + position % block_size)
        token_state.index_copy_(0, target, state)
    return _inputs(v, groups, positions[:t], kv_slots[:t], token_state[:t],
                   torch.cat(last) if len(last) > 1 else last[0], slot, last_tokens)


def _derive_ragged(v, rows, key, block_size, last_tokens):
    """The ragged layout: one attention group of every token, each query reading its row's
    table in place. Token j belongs to the last real row starting at or before it (real rows come
    first, in token order); past the row's tokens it is padding."""
    qstart, qlen, start, slot = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    t, device = key.tokens, rows.device
    j = torch.arange(t, device=device)
    starts = torch.zeros(t + 1, dtype=torch.int64, device=device)
    starts.index_add_(0, torch.where(qlen > 0, qstart, t), torch.ones_like(qstart))
    row = (starts[:t].cumsum(0) - 1).clamp(min=0)
    offset = j - qstart[row]
    valid = (offset >= 0) & (offset < qlen[row])
    position = torch.where(valid, start[row] + offset, 0)
    table = v["bt_decode"].long()
    block = table[row, position // block_size]
    kv_slots = torch.where(valid, block * block_size + position % block_size, 0)
    group = AttentionGroup(token_index=j[:, None], write_index=torch.where(valid, j, -1),
                           position=position[:, None], block_table=table, table_row=row)
    return _inputs(v, [group], position, kv_slots, slot[row], (qstart + qlen - 1).clamp(min=0), slot, last_tokens)


def _inputs(v, groups, positions, kv_slots, token_state, logits_rows, slot, last_tokens):
    # -1: the token sampled last for the row's slot (still on the device) - a decode row's token,
    # or a decode running as a 1-token prefill row.
    ids = v["ids"]
    ids = torch.where(ids >= 0, ids, last_tokens[token_state])
    flags = v["flags"]
    return StepInputs(groups=groups, positions=positions, kv_slots=kv_slots, input_ids=ids,
                      logits_rows=logits_rows, state_slots=slot, real=(flags & REAL) != 0,
                      fresh=(flags & FRESH) != 0)


def finish(logits: torch.Tensor, v: dict, key, inputs: StepInputs, last_tokens: torch.Tensor,
           penalty_state=None) -> list:
    """Samples each row and updates the slot state; returns the step's one output: int32
    [rows, 2 + 2 * (N + 1)] - token, rank of the token, then N + 1 log-prob token ids and the
    bits of their log-probs (only token and a zero rank without log-probs)."""
    slot = inputs.state_slots
    if penalty_state is not None:
        sampler.prepare_penalty_state(penalty_state, v, slot, inputs.fresh)
    tokens, logprobs = sampler.sample(logits, v, key.variant, penalty_state, slot)
    spare = last_tokens.shape[0] - 1
    last_tokens.index_copy_(0, torch.where(inputs.real, slot, spare), tokens)
    if penalty_state is not None:
        sampler.record_sampled(penalty_state, slot, tokens, inputs.real)
    col = tokens[:, None]
    if logprobs is None:
        return [torch.cat([col, torch.zeros_like(col)], 1)]
    ids, vals, rank = logprobs
    return [torch.cat([col, rank[:, None], ids, vals.contiguous().view(torch.int32)], 1)]


def unpack_output(out, rows, variant):
    """Host side of ``finish``'s output (a NumPy array read once): (tokens, logprobs or None)
    for ``rows``; logprobs = (token ids [R, N+1], log-probs [R, N+1] float32, ranks [R])."""
    import numpy as np

    out = out[rows]
    n = variant.logprobs
    if n < 0:
        return out[:, 0], None
    ids = np.ascontiguousarray(out[:, 2 : 3 + n])
    vals = np.ascontiguousarray(out[:, 3 + n : 4 + 2 * n]).view(np.float32)
    return out[:, 0], (ids, vals, np.ascontiguousarray(out[:, 1]))
