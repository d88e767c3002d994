"""Weight layout for serving on the XLA CPU plugin (engine-neutral).

A decode step reads every weight once, for a few rows, and on the CPU plugin that is most of
its time. Where the plugin runs the packed matmul host kernel (``packed_matmul``),
``lay_out_linear_weights`` packs each unquantized float32 linear weight of at least
``PACK_MIN_ELEMENTS`` once into the kernel's column panels and points its layer's
``quant_method.apply`` at the kernel (XLA's own dot lays a weight out on every call). Without the
kernel (or for other dtypes, or smaller weights) each weight is stored
input-major instead: a transposed view of an [in, out] storage, same values (``F.linear``'s
transposes cancel in the program), which XLA's dot streams about twice as fast as ``F.linear``'s
[out, in] for a decode step's rows.

A weight an embedding lookup also reads (tied embeddings) keeps its rows; on the CPU plugin its
logits projection gets its own copy in the fast layout instead (vocab x hidden more host
memory), else XLA would copy the whole table on every step. On accelerator plugins layouts are
XLA's business and nothing is changed. An engine that projects the logits itself takes its
weight from ``logits_weight`` and projects with ``project`` (SGLang's tied Llama, whose head is
the embedding module itself).
"""

import collections
import os

import torch

from . import packed_matmul

# How many weights this process laid out each way ("packed", "input_major"): serving stats, tests.
LAYOUTS = collections.Counter()


def lay_out_linear_weights(model, linear, unquantized, lm_head, embedding) -> int:
    """The engine's classes: ``linear`` layers whose ``quant_method`` is ``unquantized`` go
    through F.linear, ``lm_head`` is the logits projection (also through its ``quant_method``),
    ``embedding`` a lookup table. Returns how many weights changed layout."""
    def is_linear(m):
        return isinstance(m, linear) and isinstance(getattr(m, "quant_method", None), unquantized)

    def is_lm_head(m):
        return isinstance(m, lm_head)

    def is_embedding(m):
        return isinstance(m, embedding)

    on_host = _on_host()
    looked_up = {id(m.weight) for m in model.modules()
                 if is_embedding(m) and not is_lm_head(m) and getattr(m, "weight", None) is not None}
    moved = 0
    for m in model.modules():
        w = getattr(m, "weight", None)
        if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_contiguous():
            continue
        if not (is_linear(m) or is_lm_head(m)):
            continue
        if id(w) in looked_up and not (on_host and is_lm_head(m)):
            continue
        with torch.no_grad():
            if _packs(w) and hasattr(getattr(m, "quant_method", None), "apply"):
                m.weight = torch.nn.Parameter(packed_matmul.pack(w.detach()), requires_grad=False)
                m.packed_out_features = w.shape[0]
                m.quant_method.apply = _packed_apply
                LAYOUTS["packed"] += 1
            else:
                if id(w) not in looked_up:
                    w.data = _input_major(w.data)
                else:
                    m.weight = torch.nn.Parameter(_input_major(w.data), requires_grad=False)
                LAYOUTS["input_major"] += 1
        moved += 1
    return moved


def _packed_apply(layer, x, bias=None):
    """A packed layer's ``quant_method.apply``: F.linear(x, weight, bias) through the kernel."""
    return packed_matmul.linear(x, layer.weight, layer.packed_out_features, bias)


def project(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Logits of ``hidden`` with a weight from ``logits_weight``; a packed weight's padding
    columns (up to the next multiple of 32) come out as zeros, for the caller to drop with the
    columns past the vocabulary."""
    if weight.dim() == 3:
        return packed_matmul.linear(hidden, weight, weight.shape[0] * packed_matmul.PANEL)
    return torch.nn.functional.linear(hidden, weight)


def logits_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight to project logits with (``project``): ``weight`` when already laid out (or on an
    accelerator plugin), else - an embedding table's rows, kept for lookups - a packed or
    input-major copy on the CPU plugin."""
    if weight.dim() == 2 and weight.is_contiguous() and _on_host():
        packs = _packs(weight)
        LAYOUTS["packed" if packs else "input_major"] += 1
        return packed_matmul.pack(weight.detach()) if packs else _input_major(weight.detach())
    return weight


# Below this many elements (1 MB of float32) XLA's own dot is faster: a small weight stays in
# cache across calls, and a custom call has a fixed cost of its own (the tiny benchmark model
# decoded 10-20% slower packed). TORCH_TPU_PACK_MIN_ELEMENTS overrides it (tests pack tiny models).
PACK_MIN_ELEMENTS = int(os.environ.get("TORCH_TPU_PACK_MIN_ELEMENTS", str(1 << 18)))


def _packs(w: torch.Tensor) -> bool:
    """Whether ``w`` goes to the packed kernel: a float32 weight of at least PACK_MIN_ELEMENTS on a
    plugin that has the kernel."""
    return w.dtype == torch.float32 and w.numel() >= PACK_MIN_ELEMENTS and packed_matmul.available()


def _input_major(w: torch.Tensor) -> torch.Tensor:
    return w.t().contiguous().t()


def _on_host() -> bool:
    return torch.tpu.memory_sources()["total_memory"] == "host"
