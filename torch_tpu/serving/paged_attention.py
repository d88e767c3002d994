"""Decode attention read in place from the paged KV cache (one query token per request).

The portable formulation (``attention.grouped_attention``) gathers every request's keys and
values into a padded window and attends over it: per layer and step that writes and reads a
copy of the whole window, the largest cost of a decode step on the CPU plugin. Where the plugin
runs a kernel that reads the cache blocks where they lie, the step uses it instead:

* on the XLA CPU plugin, the host kernel ``torch_tpu_paged_decode_attention`` (C++, registered
  with the plugin as a typed FFI custom call; ``csrc/host_kernels/``). It reads only the tokens
  each query's request has (not the padded window), one query per task over every core,
  with an online softmax in float32. Any query can use it, not only a decode's: a ragged step
  (``step_batch``) passes every token of the step, each with its request's table row and its
  position;
* elsewhere (TPU and GPU plugins) nothing yet: ``available()`` is False and the engines keep the
  portable formulation. A Pallas kernel per plugin is the place to add one.

``paged_decode_attention`` is a custom op (``tpu::paged_decode_attention``) lowered to the
custom call, so it is one op in Strict mode and part of the step program in Fused Eager and
torch.compile, with the same cache as every other program. On CPU tensors it runs the portable
formulation (what the tests compare against).
"""

import functools
import struct

import torch

from .. import _C
from ..kernels._kernel_op import KernelOp
from ..kernels._mlir_text import tensor_type
from .attention import grouped_attention
from .buckets import bucket

TARGET = "torch_tpu_paged_decode_attention"


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether the tpu device's plugin runs the paged decode kernel."""
    return TARGET in _C._host_kernels()


def reads_in_place(max_rows: int, max_blocks: int) -> bool:
    """Whether an engine's steps should use the ragged layout (``step_batch``): every query reads
    its request's whole table row in place, and the kernel reads only that request's tokens, so
    the width costs only the table's upload (kept under 256 KB per step); one program then serves
    every sequence length and every mix of prompts and decodes of its size."""
    return available() and max_rows * bucket(max_blocks) <= 65536


def _spec_of(q, *, scale, soft_cap=None, window=None, k_offset=0, v_offset=0, v_dim=None):
    """The call's options as the op's spec string (the one normalisation of its defaults)."""
    v_dim = q.shape[-1] if v_dim is None else v_dim
    return f"{float(scale)!r};{float(soft_cap or 0.0)!r};{int(window or 0)};{int(k_offset)};{int(v_offset)};{int(v_dim)}"


def _parse(spec):
    scale, soft_cap, window, k_offset, v_offset, v_dim = spec.split(";")
    return float(scale), float(soft_cap), int(window), int(k_offset), int(v_offset), int(v_dim)


def _f32(x):
    return f"0x{struct.unpack('<I', struct.pack('<f', x))[0]:08X} : f32"


class _PagedDecodeSource:
    platform = None
    symbolic_shapes = True  # out_types only copies input sizes

    def out_types(self, spec, sig):
        (groups, heads, _), _ = sig[0]
        return [(groups, heads, _parse(spec)[5])], [torch.float32]

    def lower(self, spec, sig, platform):
        scale, soft_cap, window, k_offset, v_offset, v_dim = _parse(spec)
        name = "paged_decode_attention"
        ins = [tensor_type(s, d, name) for s, d in sig]
        out = tensor_type(self.out_types(spec, sig)[0][0], torch.float32, name)
        args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(ins))
        config = (f"k_offset = {k_offset} : i64, scale = {_f32(scale)}, soft_cap = {_f32(soft_cap)}, "
                  f"v_offset = {v_offset} : i64, window = {window} : i64")
        operands = ", ".join(f"%a{i}" for i in range(len(ins)))
        return (f"func.func public @main({args}) -> {out} {{\n"
                f'  %r = "stablehlo.custom_call"({operands}) {{call_target_name = "{TARGET}", '
                f"api_version = 4 : i32, backend_config = {{{config}}}}} : ({', '.join(ins)}) -> {out}\n"
                f"  return %r : {out}\n}}\n")

    def run_cpu(self, spec, tensors):
        q, k, v, table, position, *row = tensors
        return [reference(q, k, v, table, position, row[0] if row else None, *_parse(spec))]


_kernel = KernelOp("tpu::paged_decode_attention", _PagedDecodeSource())


def reference(q, k, v, table, position, row, scale, soft_cap, window, k_offset, v_offset, v_dim):
    """The portable formulation of the same call: gather the window, attend over it."""
    if row is not None:
        table = table[row.long()]
    groups, heads, qk_dim = q.shape
    blocks, block_size, kv_heads, _ = k.shape
    width = table.shape[1] * block_size
    keys = k[table.long()].reshape(groups, width, kv_heads, -1)[..., k_offset:k_offset + qk_dim]
    values = v[table.long()].reshape(groups, width, kv_heads, -1)[..., v_offset:v_offset + v_dim]
    out = grouped_attention(q[:, None], keys, values, position.long()[:, None], scale,
                            soft_cap or None, window or None)
    return out[:, 0]


def _operands(q, k, v, table, position, row):
    return [q, k, v, table, position] + ([] if row is None else [row])


def decode_attention(q, k, v, table, position, row=None, **options):
    """What the engines call for a group of queries read in place: the kernel where the plugin
    has one, the portable formulation (on the device) elsewhere. Arguments as
    ``paged_decode_attention``."""
    spec = _spec_of(q, **options)
    if available():
        return _kernel(_operands(q, k, v, table, position, row), spec)[0]
    return reference(q, k, v, table, position, row, *_parse(spec))


def paged_decode_attention(q, k, v, table, position, row=None, **options):
    """q [G, H, Dk]; k, v [blocks, block_size, kv_heads, width] (the cache; the key of a token is
    ``k[..., k_offset:k_offset + Dk]``, its value ``v[..., v_offset:v_offset + v_dim]``; vLLM passes
    its one K|V buffer twice); table [G, K] the requests' blocks, or [R, K] with ``row`` [G] naming
    each query's row (a ragged step: a request's several queries share its row); position [G]
    each query's position. Options: scale, soft_cap, window, k_offset, v_offset, v_dim (default
    Dk). Returns [G, H, v_dim] float32: attention over keys 0..position (within ``window``)."""
    return _kernel(_operands(q, k, v, table, position, row), _spec_of(q, **options))[0]
