"""``jax_op``: a JAX (or Pallas) function as a PyTorch custom op on tpu tensors.

The function is traced once per input signature (shapes, dtypes, static values), lowered to
StableHLO text (``jax.jit(f).trace(...).lower(lowering_platforms=(platform,))``) and run as a
func.call inside whatever program torch_tpu builds (a per-op program in Strict mode, the
deferred graph in Fused mode, the compiled graph under torch.compile). Backward is ``jax.vjp``
lowered the same way unless a backward is registered."""

import functools
import inspect

import torch
import torch.utils._pytree as pytree

from . import _donation, _jax_bridge, _mlir_text, _rank_program
from . import mesh as _mesh
from ._kernel_op import KernelOp, KernelTraceError, may_skip_dispatch
from ._kernel_op import signature as signature_of


class _Spec:
    """How one call's flat tensors map back to the function's arguments."""

    def __init__(self, treedef, leaves, statics):
        self.treedef = treedef
        self.leaves = leaves    # per leaf: None (a tensor) or ("const", value)
        self.statics = statics  # ((position or name, value), ...)


class _JaxSource:
    def __init__(self, name, fn, platform, mesh=None, in_specs=None, out_specs=None):
        self.name = name
        self.fn = fn
        self.platform = platform
        self.specs = {}      # spec id -> _Spec
        self.spec_ids = {}   # hashable key -> spec id
        # A kernel over a mesh of ranks (see mesh.py): the partition spec of each flat tensor
        # input (None: the same on every rank) and, when given, of each output (checked).
        self.mesh = mesh
        self.in_specs = in_specs
        self.out_specs = out_specs

    def spec_id(self, treedef, leaves, statics):
        try:
            key = (str(treedef), tuple(leaves), statics)
            hash(key)
        except TypeError as e:
            raise TypeError(f"{self.name}: static arguments and non-tensor leaves must be hashable "
                            f"({e})") from None
        sid = self.spec_ids.get(key)
        if sid is None:
            sid = str(len(self.specs))
            self.spec_ids[key] = sid
            self.specs[sid] = _Spec(treedef, leaves, statics)
        return sid

    # -- the function of flat arrays
    def call_flat(self, spec_id, arrays):
        jax = _jax_bridge.jax()
        spec = self.specs[spec_id]
        it = iter(arrays)
        leaves = [next(it) if leaf is None else leaf[1] for leaf in spec.leaves]
        dyn_args, dyn_kwargs = pytree.tree_unflatten(leaves, spec.treedef)
        args, kwargs = list(dyn_args), dict(dyn_kwargs)
        for where, value in spec.statics:
            if isinstance(where, int):
                args.insert(where, value)
            else:
                kwargs[where] = value
        out = self.fn(*args, **kwargs)
        flat, treedef = jax.tree_util.tree_flatten(out)
        return flat, treedef

    def _avals(self, sig):
        jax = _jax_bridge.jax()
        if self.mesh is None:
            return [jax.ShapeDtypeStruct(shape, _jax_bridge.jax_dtype(dtype)) for shape, dtype in sig]
        # A rank's tensor is its shard of the global array the function is written for.
        specs = self.in_specs if self.in_specs is not None else [None] * len(sig)
        if len(specs) != len(sig):
            raise ValueError(f"{self.name}: input_partition_specs has {len(specs)} entries but the call "
                             f"has {len(sig)} tensor inputs; give one spec (or None) per tensor")
        sizes = _mesh.axis_sizes(self.mesh)
        P = jax.sharding.PartitionSpec
        return [jax.ShapeDtypeStruct(
                    _mesh.global_shape(shape, spec, sizes, f"{self.name}: input {i}"), _jax_bridge.jax_dtype(dtype),
                    sharding=jax.sharding.NamedSharding(self.mesh, P(*(spec or ()))))
                for i, ((shape, dtype), spec) in enumerate(zip(sig, specs))]

    def _trace(self, spec_id, sig, what):
        jax = _jax_bridge.jax()
        treedefs = []

        def flat_fn(*arrays):
            flat, treedef = self.call_flat(spec_id, arrays)
            treedefs.append(treedef)
            return flat

        try:
            with _jax_bridge.x64_scope([d for _, d in sig]):
                result = what(jax.jit(flat_fn), self._avals(sig))
        except KernelTraceError:
            raise
        except Exception as e:
            types = ", ".join(f"{str(d).replace('torch.', '')}{list(s)}" for s, d in sig)
            hint = ""
            if "Linearization failed" in str(e) or "pallas" in str(e).lower() and "differentiat" in str(e):
                hint = (" (JAX cannot differentiate a pallas_call: give the function a jax.custom_vjp, "
                        "or register a backward with .register_autograd)")
            elif "Concretization" in type(e).__name__ or "TracerBool" in type(e).__name__:
                hint = (" (output shapes must not depend on input values: pass such values as "
                        "static_argnums / static_argnames)")
            raise KernelTraceError(
                f"{self.name}: tracing the JAX function failed for inputs ({types}): "
                f"{type(e).__name__}: {e}{hint}") from e
        return result, treedefs[-1]

    def out_tree(self, spec_id, sig):
        return self._out_info(spec_id, sig)[2]

    @functools.lru_cache(maxsize=None)
    def _out_info(self, spec_id, sig):
        if self.mesh is not None:
            # Each rank returns its shard: the types of the shard_map body's results (one trace).
            return self._rank_lowering(spec_id, sig, self.platform_or_device())[1:]
        jax = _jax_bridge.jax()
        outs, treedef = self._trace(spec_id, sig, lambda f, avals: jax.eval_shape(f, *avals))
        if not outs:
            raise KernelTraceError(f"{self.name}: the JAX function returned no arrays")
        shapes, dtypes = [], []
        for i, o in enumerate(outs):
            if not hasattr(o, "shape") or not hasattr(o, "dtype"):
                raise KernelTraceError(f"{self.name}: output {i} is a {type(o).__name__}, not an array")
            shapes.append(tuple(o.shape))
            dtypes.append(_jax_bridge.torch_dtype(o.dtype))
        return shapes, dtypes, treedef

    def platform_or_device(self):
        from . import _platform
        return self.platform or _platform.device_platform()

    @functools.lru_cache(maxsize=None)
    def _rank_lowering(self, spec_id, sig, platform):
        """(module text, output shapes, output dtypes, output treedef) of one rank's program of a
        kernel over a mesh."""
        text, treedef = self._trace(
            spec_id, sig,
            lambda f, avals: f.trace(*avals).lower(lowering_platforms=(platform,)).as_text())
        try:
            module, types, specs = _rank_program.rank_program(text, self.name, self.mesh.axis_names)
        except _rank_program.NotOneShardMap as e:
            raise KernelTraceError(str(e)) from None
        if self.out_specs is not None:
            given = [_mesh.spec_axes(spec, len(found)) for spec, found in zip(self.out_specs, specs)]
            if len(self.out_specs) != len(specs) or given != specs:
                raise KernelTraceError(f"{self.name}: output_partition_specs {list(self.out_specs)} do not match "
                                       f"the shard_map's out_specs {specs}")
        shapes, dtypes = zip(*(_mlir_text.parse_tensor_type(t, self.name) for t in types))
        return module, list(shapes), list(dtypes), treedef

    def out_types(self, spec_id, sig):
        shapes, dtypes, _ = self._out_info(spec_id, sig)
        return shapes, dtypes

    def lower(self, spec_id, sig, platform):
        if self.mesh is not None:
            return self._rank_lowering(spec_id, sig, platform)[0]
        text, _ = self._trace(
            spec_id, sig,
            lambda f, avals: f.trace(*avals).lower(lowering_platforms=(platform,)).as_text())
        return text

    @property
    def holds_collectives(self):
        return self.mesh is not None

    def group_backend(self):
        """The tpu_dist backend over whose ranks the kernel's collectives run."""
        return _mesh.group_backend(self.name, self.mesh)

    def run_cpu(self, spec_id, tensors):
        if self.mesh is not None:
            raise RuntimeError(f"{self.name}: a kernel over a mesh of ranks runs on the ranks' tpu devices; "
                               "got CPU tensors")
        sig = tuple((tuple(t.shape), t.dtype) for t in tensors)
        with _jax_bridge.x64_scope([d for _, d in sig]):
            f = self._cpu_fns(spec_id)
            outs = f(*[_jax_bridge.to_jax(t) for t in tensors])
        return [_jax_bridge.from_jax(o) for o in outs]

    @functools.lru_cache(maxsize=None)
    def _cpu_fns(self, spec_id):
        jax = _jax_bridge.jax()
        return jax.jit(lambda *a: self.call_flat(spec_id, a)[0])  # runs where its inputs are: the CPU


class _VjpSource:
    """Backward of a _JaxSource: inputs are all primals then the cotangents of the floating
    outputs; outputs are the gradients of the floating inputs."""

    def __init__(self, fwd, n_primals_of):
        self.fwd = fwd
        self.name = fwd.name + " (backward)"
        self.platform = fwd.platform
        self.n_primals_of = n_primals_of  # spec id -> number of primal inputs
        self.specs = fwd.specs
        self.mesh = None  # a kernel over a mesh has no JAX-derived backward (JaxOp)

    def call_flat(self, spec_id, arrays):
        jax = _jax_bridge.jax()
        import jax.numpy as jnp
        n = self.n_primals_of(spec_id)
        prim, cts = list(arrays[:n]), list(arrays[n:])
        floats = [i for i, p in enumerate(prim) if jnp.issubdtype(p.dtype, jnp.inexact)]

        def g(*fp):
            full = list(prim)
            for i, v in zip(floats, fp):
                full[i] = v
            outs, _ = self.fwd.call_flat(spec_id, full)
            return [o for o in outs if jnp.issubdtype(o.dtype, jnp.inexact)]

        _, vjp = jax.vjp(g, *[prim[i] for i in floats])
        grads = vjp(cts)
        return list(grads), jax.tree_util.tree_structure(list(grads))

    _avals = _JaxSource._avals
    _trace = _JaxSource._trace
    _out_info = _JaxSource._out_info
    out_types = _JaxSource.out_types
    lower = _JaxSource.lower
    run_cpu = _JaxSource.run_cpu
    _cpu_fns = _JaxSource._cpu_fns


def _floating(dtype):
    return dtype.is_floating_point


class JaxOp:
    """The object ``jax_op`` returns: call it like the JAX function, with tensors."""

    def __init__(self, name, fn, static_argnums, static_argnames, platform, input_output_aliases=None,
                 donate_argnums=(), mesh=None, input_partition_specs=None, output_partition_specs=None):
        self.name = name
        self.fn = fn
        self.static_argnums = tuple(sorted(static_argnums))
        self.static_argnames = tuple(static_argnames)
        self.input_output_aliases = dict(input_output_aliases or {})
        self.donate_argnums = tuple(sorted(donate_argnums))
        self.mesh = mesh
        self._source = _JaxSource(name, fn, platform, mesh, input_partition_specs, output_partition_specs)
        self._kernel = KernelOp(name, self._source, aliases=self.input_output_aliases.items())
        self._n_primals = {}
        self._vjp = KernelOp(name + "_vjp", _VjpSource(self._source, self._n_primals.__getitem__))
        self._user_backward = False
        self._positional = {}  # argument count -> spec of an all-tensor positional call
        self._trees = {}       # (spec, signature) -> output treedef
        if not self.input_output_aliases and mesh is None:
            self._kernel.op.register_autograd(self._backward, setup_context=self._setup_context)

    @property
    def custom_op(self):
        """The torch.library custom op ``name(Tensor[] tensors, str spec) -> Tensor[]``."""
        return self._kernel.op

    @property
    def lowerings(self):
        return self._kernel.lowerings

    # -- autograd through jax.vjp
    def _setup_context(self, ctx, inputs, output):
        tensors, spec = inputs
        ctx.save_for_backward(*tensors)
        ctx.spec = spec
        ctx.out_meta = [(o.shape, o.dtype) for o in output]

    def _backward(self, ctx, grads):
        prim = list(ctx.saved_tensors)
        self._n_primals[ctx.spec] = len(prim)
        cts = []
        for g, (shape, dtype) in zip(grads, ctx.out_meta):
            if _floating(dtype):
                cts.append(g if g is not None else torch.zeros(shape, dtype=dtype, device=prim[0].device))
        if not any(_floating(p.dtype) for p in prim):
            return [None] * len(prim), None
        res = iter(self._vjp(prim + cts, ctx.spec))
        return [next(res) if _floating(p.dtype) else None for p in prim], None

    def register_autograd(self, backward, setup_context=None):
        """Replaces the JAX vjp: ``setup_context(ctx, tensors, outputs)`` and
        ``backward(ctx, grads) -> grads of tensors`` work on the flat tensor lists (inputs in call
        order, pytrees flattened; outputs in JAX's flattening order)."""
        if self.input_output_aliases:
            raise NotImplementedError(_no_autograd_message(self.name))

        def wrapped_setup(ctx, inputs, output):
            if setup_context is not None:
                setup_context(ctx, inputs[0], output)

        def wrapped_backward(ctx, grads):
            return list(backward(ctx, grads)), None

        self._kernel.op.register_autograd(wrapped_backward, setup_context=wrapped_setup)
        self._user_backward = True

    # -- calls
    def _split(self, args, kwargs):
        statics = []
        for i in self.static_argnums:
            if i >= len(args):
                raise TypeError(f"{self.name}: static_argnums names argument {i} but only "
                                f"{len(args)} positional arguments were given")
        dyn_args = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                statics.append((i, a))
            else:
                dyn_args.append(a)
        dyn_kwargs = {}
        for k, v in kwargs.items():
            if k in self.static_argnames:
                statics.append((k, v))
            else:
                dyn_kwargs[k] = v
        leaves, treedef = pytree.tree_flatten((tuple(dyn_args), dyn_kwargs))
        tensors, kinds = [], []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                tensors.append(leaf)
                kinds.append(None)
            elif isinstance(leaf, (int, float, bool, str, type(None))):
                kinds.append(("const", leaf))
            else:
                raise TypeError(f"{self.name}: argument leaf of type {type(leaf).__name__} is neither a "
                                "tensor nor a Python number; pass it as a static argument")
        spec = self._source.spec_id(treedef, kinds, tuple(statics))
        return tensors, spec

    def __call__(self, *args, _donated=(), **kwargs):
        """``_donated``: argument tensors the caller found consumable (see _donation.py)."""
        jax = _jax_bridge.jax()  # a clear error when JAX is missing, before anything else
        if not kwargs and all(type(a) is torch.Tensor for a in args) and not self.static_argnums:
            # The common call (tensors only): its spec is computed once per argument count.
            tensors = list(args)
            spec = self._positional.get(len(args))
            if spec is None:
                spec = self._positional[len(args)] = self._split(args, kwargs)[1]
        else:
            tensors, spec = self._split(args, kwargs)
        sig = signature_of(tensors)
        if self.input_output_aliases and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            raise RuntimeError(_no_autograd_message(self.name))
        if (self.mesh is not None and not self._user_backward and torch.is_grad_enabled()
                and any(t.requires_grad for t in tensors)):
            raise RuntimeError(
                f"{self.name}: a jax_op over a mesh has no automatic backward (JAX's vjp of a shard_map "
                "is more than one rank program); give it one with .register_autograd (a second mesh "
                "jax_op for the gradients), or call it under torch.no_grad()")
        if may_skip_dispatch(tensors):
            outs = self._kernel.run_direct(tensors, spec, sig, self._donations(tensors, spec, _donated))
        else:
            outs = self._kernel(tensors, spec)
        treedef = self._trees.get((spec, sig))
        if treedef is None:
            treedef = self._trees[(spec, sig)] = self._source.out_tree(spec, sig)
        return jax.tree_util.tree_unflatten(treedef, list(outs))

    def _donations(self, tensors, spec, donated):
        """{flat input index: output index} for the consumable donated tensors."""
        if not donated:
            return None
        flat = [k for k, t in enumerate(tensors) if any(t is d for d in donated)
                and k not in self.input_output_aliases]
        shapes, dtypes = self._kernel.out_types(spec, tensors)
        return _donation.pair_outputs(flat, tensors, shapes, dtypes, self.input_output_aliases.values())


def _no_autograd_message(name):
    return (f"{name}: a jax_op with input_output_aliases writes into its inputs in place and has no "
            "backward; call it under torch.no_grad() or on tensors that do not require grad")


def _check_aliasing_args(name, input_output_aliases, donate_argnums):
    aliases = dict(input_output_aliases or {})
    for i, j in aliases.items():
        if not (isinstance(i, int) and isinstance(j, int)) or i < 0 or j < 0:
            raise ValueError(f"{name}: input_output_aliases must map input indices to output indices "
                             f"(non-negative ints), got {{{i!r}: {j!r}}}")
    if len(set(aliases.values())) != len(aliases):
        raise ValueError(f"{name}: input_output_aliases writes two inputs into one output: {aliases}")
    donate = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
    for i in donate:
        if not isinstance(i, int) or i < 0:
            raise ValueError(f"{name}: donate_argnums must be non-negative ints, got {i!r}")
    return aliases, donate


def jax_op(name, fn=None, *, static_argnums=(), static_argnames=(), donate_argnums=(),
           input_output_aliases=None, platform=None, mesh=None, input_partition_specs=None,
           output_partition_specs=None):
    """Decorates a JAX function as the custom op ``name`` ("mylib::op") on tpu tensors.

    Tensors are passed in their own dtypes (no promotion; int64/float64 inputs trace with JAX's
    x64 mode). ``static_argnums`` / ``static_argnames`` are Python values baked into the
    program (one lowering per distinct value). ``platform`` lowers for another JAX platform
    than the device's plugin ('cpu', 'cuda', 'tpu').

    ``input_output_aliases={i: j}`` (flat tensor input i, flat output j, as in pallas_call):
    output j is written into input i in place and the returned tensor is that input (views of
    it see the new values); no backward. ``donate_argnums``: positional tensor arguments whose
    buffers an output of the same shape and dtype may reuse - only when nothing else can read
    them (see docs/custom_kernels.md); otherwise they are left unchanged.

    ``mesh`` (``torch.tpu.pallas.get_pallas_mesh``): a kernel over the ranks of a tpu_dist job.
    The function takes global arrays - each rank's tensor is its shard under its entry of
    ``input_partition_specs`` (one per tensor input, in call order; None: the same on every
    rank) - and does its work in one ``jax.shard_map`` over every mesh axis, whose body runs in
    each rank's program with its collectives (device transport). Each rank gets its shard of the
    outputs; ``output_partition_specs``, when given, are checked against the shard_map's."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    aliases, donate = _check_aliasing_args(name, input_output_aliases, donate_argnums)

    def wrap(f):
        op = JaxOp(name, f, static_argnums, static_argnames, platform, aliases, donate, mesh,
                   input_partition_specs, output_partition_specs)

        def leaf(*args, **kwargs):
            return op(*args, **kwargs)

        # One node of the graph when Dynamo traces the decorated function itself
        # (``torch.compile(my_jax_op)``): tracing into ``op`` would defer the registration of
        # its call spec until after the graph, which the fake run inside it needs.
        torch._dynamo.allow_in_graph(leaf)

        @functools.wraps(f)
        def call(*args, **kwargs):
            if torch.compiler.is_compiling():
                return leaf(*args, **kwargs)
            if donate:
                # Asked here, before any other frame holds the arguments (see _donation.py).
                held = [args[i] for i in donate if i < len(args) and _donation.held_only_by_call(args, i)]
                consumable = [t for t in held if _donation.consumable(t)]
                del held
                return op(*args, _donated=consumable, **kwargs)
            return op(*args, **kwargs)

        call.jax_op = op
        call.custom_op = op.custom_op
        call.register_autograd = op.register_autograd
        try:
            call.__signature__ = inspect.signature(f)
        except (TypeError, ValueError):
            pass
        torch._dynamo.allow_in_graph(call)
        return call

    return wrap if fn is None else wrap(fn)
