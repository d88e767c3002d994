"""PyTorch versions of the Triton kernels vLLM's model runner launches, run on the device.

vLLM routes a kernel launch to a platform's implementation through
``vllm.triton_utils.dispatcher.register_kernels``; these take the kernel's launch arguments.
"""

import torch

_registered = False


def compute_slot_mapping(
    num_tokens,
    max_num_tokens,
    query_start_loc,  # [num_reqs + 1] int32
    positions,  # [>= num_tokens] int64
    block_table,  # [max_num_reqs, max_blocks_per_req] int32
    block_table_stride,
    slot_mapping,  # [max_num_tokens] int64, written
    KV_CACHE_BLOCK_SIZE,
    TOTAL_CP_WORLD_SIZE=1,
    TOTAL_CP_RANK=0,
    CP_KV_CACHE_INTERLEAVE_SIZE=1,
    PAD_ID=-1,
    BLOCK_SIZE=1024,
):
    """slot of token t = block_table[request(t), pos // block] * block + pos % block."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("context parallelism is not supported on tpu")
    num_tokens = int(num_tokens)
    if num_tokens > 0:
        device = slot_mapping.device
        tokens = torch.arange(num_tokens, device=device, dtype=torch.int64)
        ends = query_start_loc[1:].to(torch.int64)
        request = torch.searchsorted(ends, tokens, right=True)
        pos = positions[:num_tokens].to(torch.int64)
        block_index = torch.div(pos, KV_CACHE_BLOCK_SIZE, rounding_mode="floor")
        blocks = block_table[request, block_index].to(torch.int64)
        slot_mapping[:num_tokens] = blocks * KV_CACHE_BLOCK_SIZE + (pos - block_index * KV_CACHE_BLOCK_SIZE)
    if int(max_num_tokens) > num_tokens:
        slot_mapping[num_tokens:int(max_num_tokens)] = PAD_ID


def register_native_kernels():
    global _registered
    if _registered:
        return
    from vllm.triton_utils.dispatcher import register_kernels

    register_kernels(
        {"vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping}
    )
    _registered = True
