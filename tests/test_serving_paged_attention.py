"""The paged decode-attention kernel (torch_tpu.serving.paged_attention): on the XLA CPU plugin a
host kernel the plugin calls as a typed FFI custom call, reading each request's keys and values
where they lie in the paged cache. Every result is compared with the portable formulation (the
gathered window and grouped_attention) computed on the CPU."""

import pytest
import torch

import torch_tpu
from helpers import check_host_kernel_switch
from torch_tpu.execution_mode import EagerMode, mode
from torch_tpu.serving import paged_attention as pa

DEV = "tpu"


def _case(groups, heads, kv_heads, dk, dv, blocks, block_size, table_width, dtype, seed, shared=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(groups, heads, dk, generator=g).to(dtype)
    if shared:  # vLLM: one [.., K | V] buffer passed twice
        k = v = torch.randn(blocks, block_size, kv_heads, dk + dv, generator=g).to(dtype)
        offsets = dict(k_offset=0, v_offset=dk)
    else:  # SGLang: separate key and value buffers
        k = torch.randn(blocks, block_size, kv_heads, dk, generator=g).to(dtype)
        v = torch.randn(blocks, block_size, kv_heads, dv, generator=g).to(dtype)
        offsets = dict(k_offset=0, v_offset=0)
    table = torch.randint(1, blocks, (groups, table_width), generator=g)
    limit = table_width * block_size
    # Edges: the first key, a block's last and next token, the last position the table covers.
    edges = [0, block_size - 1, block_size, limit - 1]
    position = torch.tensor([edges[i] if i < len(edges) else int(torch.randint(0, limit, (1,), generator=g))
                             for i in range(groups)])
    return q, k, v, table, position, dict(offsets, v_dim=dv)


def _both(q, k, v, table, position, row=None, **opts):
    cpu = pa.paged_decode_attention(q, k, v, table, position, row, **opts)
    moved = [t.to(DEV) for t in (q, k, v, table, position)]
    if k is v:
        moved[2] = moved[1]
    dev = pa.paged_decode_attention(*moved, None if row is None else row.to(DEV), **opts)
    assert dev.device.type == "tpu" and dev.dtype == torch.float32 and dev.shape == cpu.shape
    return dev.cpu(), cpu


def test_the_cpu_plugin_registers_the_kernel():
    assert pa.TARGET in torch_tpu._C._host_kernels()
    assert pa.available()


@pytest.mark.parametrize("heads,kv_heads", [(8, 8), (8, 2), (4, 1)])
@pytest.mark.parametrize("block_size", [1, 16])
def test_matches_the_gathered_window(heads, kv_heads, block_size, no_fallback):
    args = _case(6, heads, kv_heads, 64, 64, blocks=48, block_size=block_size, table_width=8 if block_size > 1 else 96,
                 dtype=torch.float32, seed=heads * 10 + block_size)
    *tensors, opts = args
    dev, cpu = _both(*tensors, scale=0.125, **opts)
    torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("extra", [dict(soft_cap=20.0), dict(window=7), dict(window=1), dict(soft_cap=5.0, window=20)])
def test_soft_cap_and_sliding_window(extra):
    *tensors, opts = _case(5, 8, 2, 32, 32, blocks=30, block_size=8, table_width=6, dtype=torch.float32, seed=3)
    dev, cpu = _both(*tensors, scale=0.3, **opts, **extra)
    torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("extra", [{}, dict(soft_cap=5.0, window=20)])
@pytest.mark.parametrize("head_size", [16, 32, 48, 128])
def test_every_head_size(head_size, extra, dtype):
    """Caches of head size 32, 64 or 128 take the kernel's 16-wide path on a CPU with AVX-512 (16
    cache elements converted per load, its own exp, the query and output held in registers),
    other sizes the portable one: both equal the gathered window, over runs of keys that end
    inside a block and runs that begin the window partway into one."""
    *tensors, opts = _case(7, 8, 2, head_size, head_size, blocks=40, block_size=16, table_width=5,
                           dtype=dtype, seed=head_size)
    dev, cpu = _both(*tensors, scale=head_size ** -0.5, **opts, **extra)
    tol = 1e-5 if dtype == torch.float32 else 1e-4  # half caches: both compute in float32 from the same values
    torch.testing.assert_close(dev, cpu, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_caches(dtype):
    *tensors, opts = _case(4, 4, 2, 64, 64, blocks=20, block_size=16, table_width=4, dtype=dtype, seed=5)
    dev, cpu = _both(*tensors, scale=0.125, **opts)
    # Both compute in float32 from the same half-precision values.
    torch.testing.assert_close(dev, cpu, rtol=1e-4, atol=1e-4)


def test_separate_key_and_value_buffers_of_different_widths():
    *tensors, opts = _case(4, 6, 3, 48, 32, blocks=64, block_size=1, table_width=40, dtype=torch.float32,
                           seed=7, shared=False)
    dev, cpu = _both(*tensors, scale=0.2, **opts)
    torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)


def test_int32_tables_and_positions():
    q, k, v, table, position, opts = _case(4, 4, 4, 32, 32, blocks=16, block_size=4, table_width=5,
                                           dtype=torch.float32, seed=9)
    dev, cpu = _both(q, k, v, table.int(), position.int(), scale=0.5, **opts)
    torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_queries_sharing_table_rows_match_each_carrying_its_own(index_dtype):
    """A ragged step: several queries per request (a prompt's tokens at consecutive positions),
    each naming its request's table row, equal the same queries with the rows copied out."""
    q, k, v, table, _, opts = _case(7, 8, 2, 32, 32, blocks=40, block_size=4, table_width=6,
                                    dtype=torch.float32, seed=17)
    row = torch.tensor([0, 0, 0, 2, 1, 1, 2], dtype=index_dtype)
    position = torch.tensor([0, 1, 2, 23, 5, 6, 9], dtype=index_dtype)
    tables = table[:3]
    dev, cpu = _both(q, k, v, tables, position, row, scale=0.2, **opts)
    torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)
    own, _ = _both(q, k, v, tables[row.long()], position, scale=0.2, **opts)
    torch.testing.assert_close(dev, own, rtol=0, atol=0)
    bad = row.index_fill(0, torch.tensor([3]), 5)
    with pytest.raises(RuntimeError, match="query 3 reads table row 5 of 3"):
        pa.paged_decode_attention(*(t.to(DEV) for t in (q, k, v, tables, position, bad)), scale=0.2, **opts).cpu()


@pytest.mark.parametrize("extra", [{}, dict(window=7), dict(soft_cap=5.0, window=20), dict(dtype=torch.bfloat16)])
def test_a_ragged_steps_prompt_tokens_match_the_gathered_window(extra):
    """A ragged step: runs of queries of one row at consecutive positions (prompt chunks), across
    block edges, beside a decode of another row, with windows, soft caps and half caches."""
    dtype = extra.pop("dtype", torch.float32)
    q, k, v, table, _, opts = _case(60, 8, 2, 32, 32, blocks=40, block_size=4, table_width=12, dtype=dtype, seed=19)
    # Row 0: a 37-token prompt chunk from position 5; row 1: one decode; row 2: 22 tokens from 0.
    row = torch.tensor([0] * 37 + [1] + [2] * 22)
    position = torch.cat([torch.arange(5, 42), torch.tensor([30]), torch.arange(22)])
    dev, cpu = _both(q, k, v, table[:3], position, row, scale=0.3, **opts, **extra)
    tol = 1e-4 if dtype != torch.float32 else 1e-5
    torch.testing.assert_close(dev, cpu, rtol=tol, atol=tol)


@pytest.mark.parametrize("how", ["fused", "compile"])
def test_inside_a_fused_graph_and_compiled_code(how, fresh_dynamo):
    q, k, v, table, position, opts = _case(4, 8, 2, 32, 32, blocks=24, block_size=8, table_width=4,
                                           dtype=torch.float32, seed=11)

    def step(q, cache, table, position):
        out = pa.paged_decode_attention(q * 2, cache, cache, table, position, scale=0.25, **opts)
        return out.sum(-1) + 1

    expected = step(q, k, table, position)
    args = [t.to(DEV) for t in (q, k, table, position)]
    if how == "fused":
        with mode(EagerMode.FUSED):
            got = step(*args)
    else:
        got = torch.compile(step, backend="tpu")(*args)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_a_block_outside_the_cache_is_an_error_not_a_read_outside_it():
    q, k, v, table, position, opts = _case(2, 4, 4, 32, 32, blocks=8, block_size=4, table_width=3,
                                           dtype=torch.float32, seed=13)
    table[1, 0] = 1000
    with pytest.raises(RuntimeError, match="reads block 1000 of a cache with 8 blocks"):
        pa.paged_decode_attention(*(t.to(DEV) for t in (q, k, k, table, position)), scale=0.1, **opts).cpu()
    # The device goes on working.
    table[1, 0] = 1
    dev, cpu = _both(q, k, k, table, position, scale=0.1, **opts)
    torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)


_DUMP_SCRIPT = """
import json, torch, torch_tpu
from torch_tpu.execution_mode import EagerMode, mode
from torch_tpu.serving import paged_attention as pa
q = torch.randn(2, 4, 32, device="tpu"); cache = torch.randn(6, 4, 2, 64, device="tpu")
table = torch.randint(0, 6, (2, 3), device="tpu"); pos = torch.tensor([3, 9], device="tpu")
out = pa.decode_attention(q, cache, cache, table, pos, scale=0.2, v_offset=32)
ref = pa.reference(q.cpu(), cache.cpu(), cache.cpu(), table.cpu(), pos.cpu(), None, 0.2, 0.0, 0, 0, 32, 32)
print("RESULT " + json.dumps({"available": pa.available(), "diff": float((out.cpu() - ref).abs().max())}))
"""


def test_the_program_calls_the_kernel_instead_of_gathering(tmp_path):
    check_host_kernel_switch(tmp_path, _DUMP_SCRIPT, pa.TARGET, 1e-5)


def test_without_host_kernels_the_portable_formulation_runs(tmp_path):
    check_host_kernel_switch(tmp_path, _DUMP_SCRIPT, pa.TARGET, 1e-5, enabled=False)
