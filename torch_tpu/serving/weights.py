"""Weight layout for serving on the XLA CPU plugin (engine-neutral).

XLA's CPU dot streams a weight about twice as fast as a plain row-major [in, out] matrix as as
the ``W^T`` of ``F.linear``'s [out, in] weight, for the few rows of a decode step - and a decode
step reads every weight once, so this is most of its time. ``lay_out_linear_weights`` stores each
unquantized linear weight input-major: a transposed view of an [in, out] storage, same values
(``F.linear``'s transposes cancel in the program). A weight an embedding lookup also reads
(tied embeddings) keeps its rows contiguous; on the CPU plugin its logits projection gets its own
input-major copy instead (vocab x hidden more host memory), else XLA would copy the whole table
on every step. On accelerator plugins layouts are XLA's business and nothing is copied.
An engine that projects the logits itself takes its weight from ``logits_weight``, the same rule
for a tied head that is the embedding module itself (SGLang's tied Llama).
"""

import torch


def lay_out_linear_weights(model, linear, unquantized, lm_head, embedding) -> int:
    """The engine's classes: ``linear`` layers whose ``quant_method`` is ``unquantized`` go
    through F.linear, ``lm_head`` is the logits projection, ``embedding`` a lookup table.
    Returns how many weights moved."""
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
        with torch.no_grad():
            if id(w) not in looked_up:
                w.data = _input_major(w.data)
            elif on_host and is_lm_head(m):
                m.weight = torch.nn.Parameter(_input_major(w.data), requires_grad=False)
            else:
                continue
        moved += 1
    return moved


def logits_weight(weight: torch.Tensor) -> torch.Tensor:
    """The [vocab, hidden] weight to project logits with: ``weight`` when already input-major (or
    on an accelerator plugin), else - an embedding table's rows, kept for lookups - an input-major
    copy on the CPU plugin."""
    if weight.dim() == 2 and weight.is_contiguous() and _on_host():
        return _input_major(weight.detach())
    return weight


def _input_major(w: torch.Tensor) -> torch.Tensor:
    return w.t().contiguous().t()


def _on_host() -> bool:
    return torch.tpu.memory_sources()["total_memory"] == "host"
