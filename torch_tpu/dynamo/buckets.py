"""Bounded dynamism for torch.compile(backend="tpu"): pad one dynamic dimension to a bucket.

XLA programs have static shapes. A graph traced with a symbolic size (``dynamic=True``,
``torch._dynamo.mark_dynamic`` or Dynamo's automatic dynamic shapes) would need one program
per concrete size. When the semantics allow, the graph instead runs on inputs padded with zeros
to the next power of two of that size (the *bucket*) and its outputs are sliced back, so sizes
3 and 4 share one program and 5..8 another.

Padding is exact only when no element of the real region depends on a padded one. The plan
below checks that on the graph (an inference graph, no input mutation) with a sufficient rule:

* there is exactly one size symbol, and in every tensor it appears in at most one dimension -
  the outermost one of size other than 1 - as the symbol itself or a multiple of it (a batch
  dimension, possibly merged with the dimensions after it by views);
* every op that touches such a tensor works row by row along that dimension: elementwise ops,
  views, matrix products that do not contract over it, reductions, softmax and normalizations
  over other dimensions, embeddings, convolutions and pooling over batches, concatenation and
  slicing along other dimensions;
* the size itself is only used as a shape (never as a number in the computation);
* no output is a view of an input or of another output (AOTAutograd rebuilds such an output
  from its unpadded base, with the strides of the padded one).

Everything else (reductions over the dynamic dimension, attention over a dynamic sequence,
BatchNorm statistics, losses, training graphs) keeps the per-shape programs of graph_runner.
``TORCH_TPU_COMPILE_BUCKETS=0`` turns bucketing off.
"""

import operator
import os

import torch
from torch.fx.experimental.symbolic_shapes import free_symbols
from torch.multiprocessing.reductions import StorageWeakRef

aten = torch.ops.aten
prims = torch.ops.prims

# Ops that act on each index of the outermost dimension separately, whatever that dimension is.
_ROW_LOCAL = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.alias.default,
    aten.detach.default, aten._to_copy.default, aten.embedding.default,
    aten.scalar_tensor.default, aten.ones.default, aten.zeros.default, aten.full.default,
    aten.empty.memory_format, aten.arange.default, aten.arange.start, aten.arange.start_step,
    aten.tril.default, aten.triu.default,
}
# Ops with a dimension (or dimensions) argument that must not be the dynamic one.
_DIM_ARG = {
    aten.mean.dim: 1, aten.sum.dim_IntList: 1, aten.amax.default: 1, aten.amin.default: 1,
    aten._softmax.default: 1, aten._log_softmax.default: 1, aten._safe_softmax.default: 1,
    aten.cat.default: 1, aten.slice.Tensor: 1, aten.select.int: 1, aten.narrow.default: 1,
    aten.transpose.int: None, aten.permute.default: None, aten.var.correction: 1,
    aten.max.dim: 1, aten.argmax.default: 1, aten.cumsum.default: 1, aten.flip.default: 1,
    aten.split.Tensor: 2, aten.split_with_sizes.default: 2, aten.unbind.int: 1,
}
# Matrix products: (position of the first operand, its contracted dimension). The second operand
# must be static, except for the shared batch dimension of bmm/baddbmm.
_MATMUL = {aten.mm.default: (0, 1), aten.bmm.default: (0, 2), aten.addmm.default: (1, 1),
           aten.baddbmm.default: (1, 2)}
# Ops over (N, C, ...) batches: fine when only N is dynamic.
_BATCHED = {aten.convolution.default, aten.max_pool2d_with_indices.default, aten.avg_pool2d.default,
            aten._adaptive_avg_pool2d.default, aten._native_batch_norm_legit_no_training.default,
            aten.native_layer_norm.default,
            # Attention over (N, H, L, E): each batch row attends within itself.
            aten._scaled_dot_product_fused_attention_overrideable.default,
            aten._scaled_dot_product_fused_attention_overrideable_backward.default}
# Arithmetic on sizes (its results are checked where they are used).
_SIZE_ARITHMETIC = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.neg}
# Reductions: an empty dimension list means every dimension.
_REDUCTIONS = {aten.mean.dim, aten.sum.dim_IntList, aten.amax.default, aten.amin.default, aten.var.correction}


def enabled() -> bool:
    return os.environ.get("TORCH_TPU_COMPILE_BUCKETS", "1") != "0"


def bucket(n: int) -> int:
    """The padded size for `n`: the next power of two."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _symbols_of(value):
    if isinstance(value, (tuple, list)):
        return set().union(*[_symbols_of(v) for v in value]) if value else set()
    if isinstance(value, torch.Tensor):
        syms = set()
        for s in value.shape:
            syms |= free_symbols(s) if isinstance(s, torch.SymInt) else set()
        return syms
    if isinstance(value, torch.SymInt):
        return free_symbols(value)
    return set()


def _symbolic_dims(t, symbol):
    return [d for d, s in enumerate(t.shape) if isinstance(s, torch.SymInt) and symbol in free_symbols(s)]


def _outermost(t, symbol):
    """The dynamic dimension of `t` when it is the outermost non-1 one, -1 when `t` has none, or
    None when the symbol is elsewhere."""
    dims = _symbolic_dims(t, symbol)
    if not dims:
        return -1
    if len(dims) > 1:
        return None
    d = dims[0]
    if any(isinstance(s, int) and s != 1 for s in t.shape[:d]) or any(isinstance(s, torch.SymInt) for s in t.shape[:d]):
        return None
    expr = t.shape[d].node.expr
    coefficient = expr / symbol
    return d if coefficient.is_Integer and coefficient > 0 else None


class Plan:
    """How to pad the inputs and slice the outputs of one graph."""

    def __init__(self, symbol, size_args, pad_dims, out_dims):
        self.symbol = symbol
        self.size_args = size_args  # argument positions holding the size itself
        self.pad_dims = pad_dims    # argument position -> dimension to pad
        self.out_dims = out_dims    # per output: the dimension to slice back, or -1

    def size_of(self, args):
        if self.size_args:
            return int(args[self.size_args[0]])
        i, d = next(iter(self.pad_dims.items()))
        return args[i].shape[d]

    def pad(self, args, n, b):
        out = list(args)
        for i in self.size_args:
            out[i] = b
        for i, d in self.pad_dims.items():
            t = args[i]
            shape = list(t.shape)
            shape[d] = b - n
            out[i] = torch.cat([t, t.new_zeros(shape)], dim=d)
        return out

    def unpad(self, outs, n):
        return [o.narrow(d, 0, n) if d >= 0 else o for o, d in zip(outs, self.out_dims)]


def plan(gm, kind):
    """(Plan, None) when the graph can run padded, else (None, why not)."""
    if kind != "inference":
        return None, "only inference graphs are padded"
    nodes = list(gm.graph.nodes)
    symbols = set()
    for node in nodes:
        symbols |= _symbols_of(node.meta.get("val"))
    if len(symbols) != 1:
        return None, f"the graph has {len(symbols)} size symbols (padding handles one)"
    (symbol,) = symbols
    size_args, pad_dims = [], {}
    for i, node in enumerate(n for n in nodes if n.op == "placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            if val.node.expr != symbol:
                return None, "a size argument is an expression of the dynamic size"
            size_args.append(i)
        elif isinstance(val, torch.Tensor) and _symbols_of(val):
            d = _outermost(val, symbol)
            if d is None or val.shape[d].node.expr != symbol:
                return None, "an input's dynamic dimension is not its outermost one"
            pad_dims[i] = d
    for node in nodes:
        if node.op != "call_function":
            continue
        why = _check(node, symbol)
        if why:
            return None, why
    if _outputs_share_storage(nodes):
        return None, "an output is a view of an input or of another output"
    out_dims = []
    for o in nodes[-1].args[0]:
        val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return None, "an output is not a tensor"
        d = _outermost(val, symbol)
        if d is None or (d >= 0 and val.shape[d].node.expr != symbol):
            return None, "an output's dynamic dimension is not its outermost one"
        out_dims.append(d)
    if not pad_dims and not size_args:
        return None, "no input has the dynamic size"
    return Plan(symbol, size_args, pad_dims, out_dims), None


def _outputs_share_storage(nodes):
    """Whether an output's (fake) storage is an input's or another output's."""
    seen = set()
    for n in nodes:
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor):
            seen.add(StorageWeakRef(n.meta["val"].untyped_storage()))
    for o in nodes[-1].args[0]:
        val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            ref = StorageWeakRef(val.untyped_storage())
            if ref in seen:
                return True
            seen.add(ref)
    return False


def _check(node, symbol):
    """Why `node` stops padding, or None."""
    target = node.target
    val = node.meta.get("val")
    if target in (operator.getitem,):
        return None
    if target in _SIZE_ARITHMETIC and isinstance(val, (torch.SymInt, int)):
        return None
    if not isinstance(target, torch._ops.OpOverload):
        return f"{target} computes with the dynamic size" if _symbols_of(val) else None
    if target._schema.is_mutable:
        return f"{target} writes into a tensor"
    for a in node.args:
        if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.SymInt):
            # arange(size) counts 0..size-1: the padded prefix is the same. Anything else would
            # compute with the padded size.
            if target not in (aten.arange.default, aten.arange.start, aten.arange.start_step):
                return f"{target} uses the dynamic size as a value"
    tensors = [a.meta.get("val") for a in node.all_input_nodes]
    outputs = list(val) if isinstance(val, (tuple, list)) else [val]
    touched = [t for t in tensors + outputs if isinstance(t, torch.Tensor) and _symbols_of(t)]
    if not touched:
        return None  # static computation
    for t in touched:
        if _outermost(t, symbol) is None:
            return f"{target} has the dynamic size in an inner dimension"
    if torch.Tag.pointwise in target.tags or target in _ROW_LOCAL or target in _BATCHED:
        if target is aten.native_layer_norm.default:
            normalized = len(node.args[1])
            if any(d >= tensors[0].dim() - normalized for d in _symbolic_dims(tensors[0], symbol)):
                return "layer_norm over the dynamic dimension"
        return None
    if target in _MATMUL:
        first, contracted = _MATMUL[target]
        a = node.args[first].meta["val"]
        b = node.args[first + 1].meta["val"]
        batch_only = {0} if contracted == 2 else set()
        if not set(_symbolic_dims(b, symbol)) <= batch_only or contracted in _symbolic_dims(a, symbol):
            return f"{target} contracts over the dynamic dimension"
        return None
    if target in _DIM_ARG:
        # The inputs (one tensor, or cat's list) share a rank; their dynamic dimension is the
        # one the dimension argument must avoid.
        inputs = [t for t in tensors if isinstance(t, torch.Tensor)]
        src = inputs[0]
        sdims = set().union(*[_symbolic_dims(t, symbol) for t in inputs])
        pos = _DIM_ARG[target]
        if pos is None:  # transpose / permute: the dynamic dimension must stay in place
            perm = (list(node.args[1]) if target is aten.permute.default
                    else _swap(src.dim(), node.args[1], node.args[2]))
            return None if all(perm[d] == d for d in sdims) else f"{target} moves the dynamic dimension"
        dims = node.args[pos] if len(node.args) > pos else node.kwargs.get("dim")
        if dims is None or (target in _REDUCTIONS and not dims):
            return f"{target} over every dimension"
        dims = [dims] if isinstance(dims, int) else list(dims)
        dims = [d % max(src.dim(), 1) for d in dims]
        return f"{target} along the dynamic dimension" if sdims & set(dims) else None
    return f"{target} is not known to work row by row"


def _swap(rank, a, b):
    perm = list(range(rank))
    a, b = a % rank, b % rank
    perm[a], perm[b] = perm[b], perm[a]
    return perm
