"""Sums of gradients scattered into disjoint parts of one tensor, written as one concatenation.

The backward of code that takes a tensor apart by indexing or slicing - a packed query/key/value
projection read as ``qkv[0], qkv[1], qkv[2]`` (as ``nn.MultiheadAttention`` does), rotary
embeddings' halves ``x[..., :h], x[..., h:]`` - adds one ``select_backward`` or ``slice_backward``
per part (``unbind`` and ``chunk`` have their own backwards, ``stack`` and ``cat``), each a zero
tensor of the full shape with the part's gradient in its place. Lowered as written, that is one
padded full-size buffer per part and their sum; XLA's CPU compiler keeps each pad a loop of its own
(a compiled BERT step's backward spent ~10% of its kernel time there). When every term of such a
sum covers a different part along the same dimension of the same shape, the sum is the parts
concatenated in order (zeros where no part lands), which is what this pass writes instead: equal
values (only a zero's sign can differ: -0 + 0 is +0), no padding and no adds (one add where the
sum also has one dense term, as a gradient that flows both through the parts and around them does).
"""

import torch

_aten = torch.ops.aten


def _norm(index, size):
    return index + size if index < 0 else index


def _part(node):
    """(sizes, dim, start, end, grad, is_select) for a select/slice backward node, else None."""
    if node.op != "call_function" or node.kwargs:
        return None
    args = node.args
    if node.target is _aten.select_backward.default and len(args) == 4:
        grad, sizes, dim, index = args
        if not all(isinstance(s, int) for s in sizes) or not isinstance(index, int):
            return None
        dim = _norm(dim, len(sizes))
        start = _norm(index, sizes[dim])
        return tuple(sizes), dim, start, start + 1, grad, True
    if node.target is _aten.slice_backward.default and len(args) == 6:
        grad, sizes, dim, start, end, step = args
        if step != 1 or not all(isinstance(s, int) for s in (*sizes, start, end)):
            return None
        dim = _norm(dim, len(sizes))
        n = sizes[dim]
        start, end = (min(max(_norm(v, n), 0), n) for v in (start, end))
        if start >= end:
            return None
        return tuple(sizes), dim, start, end, grad, False
    return None


def _terms(node, root):
    """The leaves of the tree of single-use ``aten.add.Tensor`` nodes under ``node``."""
    if (node.op == "call_function" and node.target is _aten.add.Tensor and len(node.args) == 2
            and not node.kwargs and (node is root or len(node.users) == 1)):
        a, b = node.args
        if isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node):
            return _terms(a, root) + _terms(b, root)
    return [node]


def _dtype(node):
    val = node.meta.get("val")
    return getattr(val, "dtype", None)


def fold_scatter_sums(gm) -> int:
    """Rewrites in place every sum of disjoint select/slice backwards of ``gm``; returns how many."""
    graph = gm.graph
    folded = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _aten.add.Tensor:
            continue
        # Only the top of an add tree: an add whose single user is another add is part of it.
        if len(node.users) == 1 and next(iter(node.users)).target is _aten.add.Tensor:
            continue
        terms = [(_part(t), t) for t in _terms(node, node)]
        parts = [(p, t) for p, t in terms if p is not None]
        dense = [t for p, t in terms if p is None]
        # With one other term d the sum is d + concatenation exactly (each element adds d to one
        # part's value and zeros); with more, regrouping them would change the rounding.
        if len(parts) < 2 or len(dense) > 1:
            continue
        sizes, dim = parts[0][0][0], parts[0][0][1]
        dtype = _dtype(node)
        if dtype is None or any(p[0] != sizes or p[1] != dim or _dtype(t) != dtype for p, t in parts):
            continue
        if dense and (_dtype(dense[0]) != dtype or tuple(getattr(dense[0].meta.get("val"), "shape", ())) != sizes):
            continue
        parts = sorted((p for p, _ in parts), key=lambda p: p[2])
        if any(a[3] > b[2] for a, b in zip(parts, parts[1:])):
            continue  # overlapping parts add up: not a concatenation
        with graph.inserting_before(node):
            pieces, at = [], 0
            for _, _, start, end, grad, is_select in parts:
                if start > at:
                    pieces.append(_zeros(graph, grad, sizes, dim, start - at))
                pieces.append(graph.call_function(_aten.unsqueeze.default, (grad, dim)) if is_select else grad)
                at = end
            if at < sizes[dim]:
                pieces.append(_zeros(graph, parts[0][4], sizes, dim, sizes[dim] - at))
            total = graph.call_function(_aten.cat.default, (pieces, dim))
            if dense:
                total.meta["val"] = node.meta.get("val")
                total = graph.call_function(_aten.add.Tensor, (dense[0], total))
        total.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(total)
        _erase_unused(graph, node)
        folded += 1
    if folded:
        gm.recompile()
    return folded


def _erase_unused(graph, node):
    """Erases ``node`` once nothing uses it, then the adds and backwards that only it used."""
    if node.users:
        return
    inputs = [a for a in node.args if isinstance(a, torch.fx.Node)]
    graph.erase_node(node)
    for a in inputs:
        if a.target is _aten.add.Tensor or _part(a) is not None:
            _erase_unused(graph, a)


def _zeros(graph, like, sizes, dim, length):
    shape = list(sizes)
    shape[dim] = length
    return graph.call_function(_aten.new_zeros.default, (like, shape))

