"""The device side of one vLLM step, recorded once per bucket as one program
(``torch_tpu.captured``).

``torch_tpu.serving.step_inputs`` derives the step's attention groups, positions, KV slots,
input ids and logits rows from the packed metadata; this runs vLLM's model forward under vLLM's
forward context (our attention backend reads the groups, ``do_kv_cache_update`` writes the KV
slots), the logits projection, and the shared sampler and slot-state update. Nothing here
depends on a host value of the step - only on the bucket and the input tensors.
"""

from vllm.forward_context import set_forward_context

from torch_tpu.serving import step_inputs
from torch_tpu.serving.sampler import PenaltyState

from .attention import TpuTorchAttentionMetadata


class StepForward:
    """Callable(packed, last_tokens, *penalty_state, *kv_caches) -> [packed output], for one bucket."""

    def __init__(self, runner, key, layout):
        self.runner = runner
        self.key = key
        self.layout = layout

    def __call__(self, packed, last_tokens, *tensors):
        r, key = self.runner, self.key
        v = self.layout.device_views(packed)
        penalty = PenaltyState(*tensors[:2]) if key.variant.penalties else None
        inputs = step_inputs.derive(v, key, r.limits.block_size, last_tokens)
        t = key.tokens
        metadata = TpuTorchAttentionMetadata(num_actual_tokens=t, slot_mapping=inputs.kv_slots, groups=inputs.groups)
        layers = r.attention_layers
        with set_forward_context({name: metadata for name in layers}, r.vllm_config, num_tokens=t,
                                 slot_mapping={name: inputs.kv_slots for name in layers}):
            hidden = r.model(input_ids=inputs.input_ids, positions=inputs.positions)
        logits = r.model.compute_logits(hidden[inputs.logits_rows])
        return step_inputs.finish(logits, v, key, inputs, last_tokens, penalty)
