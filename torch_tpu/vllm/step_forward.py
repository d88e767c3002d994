"""The device side of one vLLM step: everything between the packed metadata and the sampled
tokens, recorded once per bucket as one program (``torch_tpu.serving.step_program``).

From the packed rows (first token, token count, first position, state slot per request) and
block tables it derives, on the device: the decode and prefill attention groups (query grids,
positions, block tables), each token's position and KV slot (slot mapping), the input ids
(host ids, or the slot's last sampled token where the host does not know it yet), and the
logits rows (each request's last token). Then it runs vLLM's model forward under vLLM's forward
context (our attention backend reads the groups), the logits projection and the sampler, and
updates the slot state: the last sampled token, and penalty counts when the batch uses them.
Nothing here depends on a host value of the step - only on the bucket and the input tensors.
"""

import torch
from vllm.forward_context import set_forward_context

from torch_tpu.serving import sampler

from .attention import TpuTorchAttentionMetadata, _Group
from .step_batch import FRESH, REAL


class StepForward:
    """Callable(packed, last_tokens, *penalty_state, *kv_caches) -> outputs, for one bucket."""

    def __init__(self, runner, key, layout):
        self.runner = runner
        self.key = key
        self.layout = layout

    def _groups(self, v, tokens):
        """Attention groups and the per-token position and KV slot (padding: position 0, slot 0)."""
        key, bs = self.key, self.runner.block_size
        rows = v["rows"].long()
        qstart, qlen, start = rows[:, 0], rows[:, 1], rows[:, 2]
        device = rows.device
        groups, cells = [], []  # cells: (token index, position, valid, block table row of each cell)
        if key.decodes:
            d = key.decodes
            valid = qlen[:d] > 0
            index = torch.arange(d, device=device)
            position = torch.where(valid, start[:d], 0)
            table = v["bt_decode"].long()
            groups.append(_Group(token_index=index[:, None], write_index=torch.where(valid, index, -1),
                                 position=position[:, None], block_table=table))
            cells.append((index, position, valid, table))
        if key.prefills:
            d, length = key.decodes, key.prefill_len
            j = torch.arange(length, device=device)[None, :]
            valid = j < qlen[d:, None]
            index = torch.where(valid, qstart[d:, None] + j, 0)
            position = torch.where(valid, start[d:, None] + j, 0)
            table = v["bt_prefill"].long()
            groups.append(_Group(token_index=index, write_index=torch.where(valid, index, -1).reshape(-1),
                                 position=position, block_table=table))
            cells.append((index.reshape(-1), position.reshape(-1), valid.reshape(-1),
                          table.repeat_interleave(length, dim=0)))
        positions = torch.zeros(tokens + 1, dtype=torch.int64, device=device)
        slots = torch.zeros(tokens + 1, dtype=torch.int64, device=device)
        for index, position, valid, table in cells:
            target = torch.where(valid, index, tokens)
            block = table.gather(1, (position // bs)[:, None]).squeeze(1)
            positions.index_copy_(0, target, position)
            slots.index_copy_(0, target, block * bs + position % bs)
        return groups, positions[:tokens], slots[:tokens]

    def __call__(self, packed, last_tokens, *tensors):
        r = self.runner
        key = self.key
        v = self.layout.device_views(packed)
        penalty = sampler.PenaltyState(*tensors[:2]) if key.variant.penalties else None
        t = key.tokens
        groups, positions, slot_mapping = self._groups(v, t)
        rows = v["rows"]
        slot = rows[:, 3].long()
        flags = v["flags"]
        ids = v["ids"]
        if key.decodes:
            d = key.decodes
            dec = ids[:d]
            ids = torch.cat([torch.where(dec >= 0, dec, last_tokens[slot[:d]]), ids[d:]])
        metadata = TpuTorchAttentionMetadata(num_actual_tokens=t, slot_mapping=slot_mapping, groups=groups)
        with set_forward_context({name: metadata for name in r.attention_layers}, r.vllm_config,
                                 num_tokens=t, slot_mapping={name: slot_mapping for name in r.attention_layers}):
            hidden = r.model(input_ids=ids, positions=positions)
        last = []
        if key.decodes:
            last.append(hidden[: key.decodes])
        if key.prefills:
            q = rows[key.decodes:].long()
            last.append(hidden[(q[:, 0] + q[:, 1] - 1).clamp(min=0)])
        logits = r.model.compute_logits(torch.cat(last) if len(last) > 1 else last[0])
        if penalty is not None:
            sampler.prepare_penalty_state(penalty, v, slot, (flags & FRESH) != 0)
        tokens, logprobs = sampler.sample(logits, v, key.variant, penalty, slot)
        real = (flags & REAL) != 0
        last_tokens.index_copy_(0, torch.where(real, slot, last_tokens.shape[0] - 1), tokens)
        if penalty is not None:
            sampler.record_sampled(penalty, slot, tokens, real)
        return [tokens] + (list(logprobs) if logprobs is not None else [])
