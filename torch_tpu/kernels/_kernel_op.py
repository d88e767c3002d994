"""The torch side of a custom kernel: one torch.library.custom_op
``ns::name(Tensor[] tensors, str spec) -> Tensor[]`` whose tpu implementation runs a registered
StableHLO function through the "custom_kernel" lowering (so Strict, Fused and torch.compile all
compile it through the one compilation cache), with a fake implementation for tracing.

``spec`` names how the flat tensors map to the user's call (pytrees, static arguments); a
``KernelSource`` turns (spec, input types) into StableHLO text, output types and a CPU runner.

With ``aliases`` ((input index, output index) pairs) the op writes those outputs into their
inputs: its schema is ``ns::name(Tensor(a!)[] written, Tensor[] tensors, str spec) -> ()``
(``written``: the aliased inputs, then empty tensors for the other outputs; functionalization
supports mutated lists but not list returns), so functionalization and torch.compile see the
mutation; callers get the full output list with the input tensors in the aliased places."""

import torch

from .. import _C
from . import _mlir_text, _platform


class KernelTraceError(RuntimeError):
    """The kernel could not be traced or lowered for the given inputs."""


class Lowered:
    def __init__(self, symbol, out_shapes, out_dtypes):
        self.symbol = symbol
        self.out_shapes = out_shapes
        self.out_dtypes = out_dtypes


def signature(tensors):
    """((shape, dtype), ...) of the tensors. Under torch.compile with dynamic shapes the sizes are
    symbolic: ``int`` specializes the graph on them (a guard), as a kernel traced for concrete
    shapes needs; sources with ``symbolic_shapes = True`` get the symbolic sizes instead."""
    return tuple((tuple(int(d) for d in t.shape), t.dtype) for t in tensors)


def _symbolic_signature(tensors):
    return tuple((tuple(t.shape), t.dtype) for t in tensors)


def register_text(label, text):
    """Registers a module's functions with the runtime; returns the entry symbol."""
    _platform.check_custom_calls(label, text, _platform.device_platform())
    prefix = "tpuk_" + _mlir_text.text_hash(text)
    symbol, functions = _mlir_text.prepare(text, prefix)
    if not _C._has_custom_kernel(symbol):
        _C._register_custom_kernel(symbol, functions, label)
    return symbol


class KernelOp:
    """A custom op backed by `source` (an object with out_types(spec, sig), lower(spec, sig,
    platform) -> text and run_cpu(spec, tensors) -> tensors)."""

    def __init__(self, qualname, source, aliases=()):
        if not isinstance(qualname, str) or qualname.count("::") != 1:
            raise ValueError(f"a kernel name must look like 'mylib::name', got {qualname!r}")
        self.qualname = qualname
        self.source = source
        self.aliases = tuple(sorted(aliases))  # (input index, output index)
        self._alias_in = [i for i, _ in self.aliases]
        self._lowered = {}
        self._types = {}
        self.lowerings = 0  # how many signatures were lowered (tests, benchmarks)
        # Sources of kernels with collectives name the group they run over (jax_op(mesh=...)).
        self._group = source.group_backend if getattr(source, "holds_collectives", False) else None
        if self.aliases:
            self._make_mutating_op(qualname)
        else:
            self._make_functional_op(qualname)

    def _make_functional_op(self, qualname):
        def impl(tensors: list[torch.Tensor], spec: str) -> list[torch.Tensor]:
            return self._run(tensors, spec)

        self.op = torch.library.custom_op(qualname, impl, mutates_args=())

        def fake(tensors, spec):
            return self._fake_outputs(tensors, spec)

        self.op.register_fake(fake)

    def _make_mutating_op(self, qualname):
        # A mutated argument cannot also be returned, and functionalization does not take list
        # returns: every output is written into a tensor of `written`, the op returns nothing.
        def impl(written: list[torch.Tensor], tensors: list[torch.Tensor], spec: str) -> None:
            n = len(self.aliases)
            self._run(self._merge(written[:n], tensors), spec, written[n:])

        self.op = torch.library.custom_op(qualname, impl, mutates_args=("written",))

        def fake(written, tensors, spec):
            return None

        self.op.register_fake(fake)

    def _merge(self, mutated, tensors):
        """The kernel's inputs in call order from the op's (mutated, other) lists."""
        full, m, o = [], iter(mutated), iter(tensors)
        for i in range(len(mutated) + len(tensors)):
            full.append(next(m) if i in self._alias_in else next(o))
        return full

    def _fake_outputs(self, tensors, spec):
        shapes, dtypes = self.out_types(spec, tensors)
        device = tensors[0].device if tensors else torch.device("tpu")
        aliased = {j for _, j in self.aliases}
        return [torch.empty(s, dtype=d, device=device)
                for j, (s, d) in enumerate(zip(shapes, dtypes)) if j not in aliased]

    def out_types(self, spec, tensors):
        if getattr(self.source, "symbolic_shapes", False) and any(
                isinstance(d, torch.SymInt) for t in tensors for d in t.shape):
            # Traced with dynamic shapes (torch.compile's fake tensors), for a source whose output
            # types follow its inputs' sizes: no specialization, and nothing to cache.
            sig = _symbolic_signature(tensors)
            types = self.source.out_types(spec, sig)
            self._check_aliases(sig, types)
            return types
        key = (spec, signature(tensors))
        types = self._types.get(key)
        if types is None:
            types = self.source.out_types(spec, key[1])
            self._check_aliases(key[1], types)
            self._types[key] = types
        return types

    def _check_aliases(self, sig, types):
        shapes, dtypes = types
        for i, j in self.aliases:
            if i >= len(sig) or j >= len(shapes):
                raise ValueError(f"{self.qualname}: input_output_aliases {{{i}: {j}}} is out of range: the call "
                                 f"has {len(sig)} tensor inputs and {len(shapes)} outputs")
            (ishape, idtype), oshape, odtype = sig[i], tuple(shapes[j]), dtypes[j]
            if tuple(ishape) != oshape or idtype != odtype:
                raise ValueError(
                    f"{self.qualname}: input_output_aliases {{{i}: {j}}}: output {j} is "
                    f"{str(odtype).replace('torch.', '')}{list(oshape)} but input {i} is "
                    f"{str(idtype).replace('torch.', '')}{list(ishape)}; an output written into an input "
                    "must have its shape and dtype")

    def lowered(self, spec, tensors):
        key = (spec, signature(tensors))
        low = self._lowered.get(key)
        if low is None:
            platform = self.source.platform or _platform.device_platform()
            text = self.source.lower(spec, key[1], platform)
            symbol = register_text(self.qualname, text)
            shapes, dtypes = self.out_types(spec, tensors)
            low = Lowered(symbol, [list(s) for s in shapes], list(dtypes))
            self._lowered[key] = low
            self.lowerings += 1
        return low

    def _targets(self, tensors, n_outputs, donated=None):
        """Per output: the input it is written into (aliases, then donated inputs), or None."""
        targets = [None] * n_outputs
        for i, j in self.aliases:
            targets[j] = tensors[i]
        for i, j in (donated or {}).items():
            targets[j] = tensors[i]
        return targets

    def _run(self, tensors, spec, outs=None):
        """The op's implementation. With aliases every output is written: into its input, or
        into `outs` (the others, in order)."""
        devices = {t.device.type for t in tensors}
        if devices == {"cpu"}:
            results = self.source.run_cpu(spec, tensors)
            if not self.aliases:
                return results
            for target, value in zip(self._with_targets(outs, self._targets(tensors, len(results))), results):
                target.copy_(value)
            return None
        if devices != {"tpu"}:
            raise RuntimeError(f"{self.qualname}: inputs must all be tpu tensors or all CPU tensors, "
                               f"got {sorted(devices)}")
        low = self.lowered(spec, tensors)
        if not self.aliases:
            return self._launch(low, tensors)
        targets = self._with_targets(outs, self._targets(tensors, len(low.out_shapes)))
        self._launch(low, tensors, targets)
        return None

    def _launch(self, low, tensors, targets=()):
        """Runs the lowered kernel: over the ranks of its group when it holds collectives."""
        backend = self._group() if self._group is not None else None
        if backend is None:
            return _C._run_custom_kernel(low.symbol, list(tensors), low.out_shapes, low.out_dtypes, list(targets))
        return _C._run_custom_kernel_over_group(backend, low.symbol, list(tensors), low.out_shapes,
                                                low.out_dtypes, list(targets))

    def _with_targets(self, fresh, targets):
        """The full output list: the written-into inputs in their places, the fresh outputs around them."""
        it = iter(fresh)
        return [t if t is not None else next(it) for t in targets]

    def __call__(self, tensors, spec):
        """All outputs, aliased ones being the (updated) input tensors."""
        tensors = list(tensors)
        if not self.aliases:
            return self.op(tensors, spec)
        shapes, dtypes = self.out_types(spec, tensors)
        targets = self._targets(tensors, len(shapes))
        device = tensors[0].device
        fresh = [torch.empty(s, dtype=d, device=device)
                 for s, d, t in zip(shapes, dtypes, targets) if t is None]
        mutated = [tensors[i] for i in self._alias_in]
        others = [t for i, t in enumerate(tensors) if i not in self._alias_in]
        self.op(mutated + fresh, others, spec)
        return self._with_targets(fresh, targets)

    def run_direct(self, tensors, spec, sig, donated=None):
        """The tpu implementation without the custom-op dispatch (callers check it may be
        skipped: no autograd, tracing or dispatch modes involved). ``donated`` maps inputs nobody
        else can read to the outputs written into their buffers."""
        low = self._lowered.get((spec, sig))
        if low is None:
            low = self.lowered(spec, tensors)
        if not self.aliases and not donated:
            if self._group is None:  # the common call, without another Python frame
                return _C._run_custom_kernel(low.symbol, tensors, low.out_shapes, low.out_dtypes)
            return self._launch(low, tensors)
        targets = self._targets(tensors, len(low.out_shapes), donated)
        fresh = self._launch(low, tensors, targets)
        # What the custom op's ADInplaceOrView kernel does for dispatched calls.
        torch.autograd.graph.increment_version([t for t in targets if t is not None])
        return self._with_targets(fresh, targets)


def may_skip_dispatch(tensors):
    """Whether a call on `tensors` can go straight to the tpu implementation: plain tpu tensors,
    no gradient to record, no torch.compile tracing, no Python dispatch or function modes."""
    if torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled():
        return False
    if torch._C._len_torch_dispatch_stack() > 0:
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if type(t) is not torch.Tensor or t.device.type != "tpu" or (grad and t.requires_grad):
            return False
    return bool(tensors)
