"""One ATen graph from AOTAutograd, compiled for the ``tpu`` device.

The first call with a given input layout *captures* the graph: it runs the graph's ops in
Fused Eager recording mode (each op through its own lowering, exactly as in eager), and the
recorded graph becomes one StableHLO module, compiled through the shared executable cache
(memory and disk tiers). The captured program is then replayed directly on later inputs of
the same layout - no Python, no per-op dispatch - with mutated inputs' buffers donated to their
new values.

A graph with collectives (``_c10d_functional`` ops from DTensor, ``funcol``, FSDP2 or TP modules)
records them into its program on tpu_dist's device transport: the rank's program holds StableHLO
collectives and replays like any other, each rank launching its part (csrc/distributed/
device_backend.h). On the host transport each collective still ends the recording, so such a
graph is recorded again per call and gives the eager result.

A call under other compilation settings (``torch.tpu.precision``,
``torch.tpu.compiler.custom_compiler_options``) captures a program of its own.

Shapes are static: a new input shape (or layout) captures and compiles a new program, up to
``TORCH_TPU_COMPILE_SHAPE_LIMIT`` (default 8) per graph; beyond it the graph warns once and
runs op by op in the current eager mode. A graph with one dynamic size that padding cannot
change runs padded to power-of-two buckets instead (buckets.py).

Graphs that cannot be replayed as captured - they draw random numbers, take CPU tensors
(e.g. the step count of an optimizer without ``capturable=True``) or contain an op that runs on
the CPU - are recorded again on every call; the recorded graph still runs as one cached
program (with the new seeds and scalar values), only the per-op Python cost remains.
"""

import os
import warnings

import torch

from .. import _C
from ..captured import device_of
from . import asserts, buckets

_DEFAULT_SHAPE_LIMIT = 8


def shape_limit() -> int:
    value = os.environ.get("TORCH_TPU_COMPILE_SHAPE_LIMIT", "")
    try:
        return max(1, int(value)) if value else _DEFAULT_SHAPE_LIMIT
    except ValueError:
        return _DEFAULT_SHAPE_LIMIT


# Counters for tests and benchmarks: captures, replays, re-recorded calls, op-by-op calls.
stats = {"captures": 0, "replays": 0, "rerecorded_calls": 0, "op_by_op_calls": 0, "padded_calls": 0}


def reset_stats() -> None:
    for key in stats:
        stats[key] = 0


# CPU tensor inputs (index tensors saved for backward, scalar tensors) are baked into a
# captured program; a replay must see the same values. Larger ones make the graph re-record.
_MAX_HOST_INPUT_NUMEL = 4096
# Distinct CPU input values a graph is captured for before it switches to re-recording (an
# optimizer step count changes on every call).
_MAX_HOST_VALUE_SETS = 2


def _host_values(tensors):
    values = []
    for t in tensors:
        if t.device.type == "cpu":
            if t.numel() > _MAX_HOST_INPUT_NUMEL:
                return None
            values.append((t.dtype, tuple(t.shape), tuple(t.reshape(-1).tolist())))
    return tuple(values)


class _Variant:
    """A captured program for one input layout, with how to rebuild the graph's outputs."""

    def __init__(self, graph, template, host_values):
        self.graph = graph
        # Per output: ("t", i) the i-th device tensor, ("h", t) a host tensor, ("c", v) a constant.
        self.template = template
        self.host_values = host_values
        # The usual case: the outputs are the program's device tensors, in order - returned as is.
        self.identity = all(kind == "t" and v == i for i, (kind, v) in enumerate(template))

    def outputs(self, tensors):
        if self.identity:
            return tensors
        return [tensors[v] if kind == "t" else v.clone() if kind == "h" else v for kind, v in self.template]


class CompiledFxGraph:
    """A callable (boxed calling convention) running ``gm`` as captured XLA programs."""

    def __init__(self, gm, kind):
        # In the instance dict, so wrappers made with functools.wraps (Dynamo's disable) keep it.
        self._boxed_call = True
        self.gm = gm
        self.kind = kind
        # torch._assert_async conditions become extra outputs, checked after each call (asserts.py).
        self.assert_messages = asserts.hoist_asserts(gm)
        self.variants = {}  # non-tensor arguments -> [_Variant]
        self.variant_count = 0
        self.has_host_inputs = None
        self.host_value_sets = set()
        # Random ops (CPU ones included, which the recorder does not see) draw new numbers on
        # every call: such graphs are recorded again per call, never replayed as captured.
        self.rerecord_reason = "the graph draws random numbers" if _draws_random_numbers(gm) else None
        # Collectives are recorded into the graph's program (on the device transport); every rank
        # must then run the same program text, so nothing rank-specific (a view offset, a scalar) is
        # baked into it.
        self.has_collectives = _has_collectives(gm)
        self.warned = set()
        # Every input a tensor (no SymInt): a replay passes the argument list on as it is.
        self.tensor_inputs_only = _tensor_inputs_only(gm)
        # A graph with a dynamic size runs padded to buckets when its ops allow (buckets.py).
        self.bucket_plan, self.bucket_reason = None, None
        if buckets.enabled() and _has_dynamic_sizes(gm):
            if self.assert_messages:
                self.bucket_reason = "it asserts on device values (torch._assert_async), which padding could change"
            else:
                self.bucket_plan, self.bucket_reason = buckets.plan(gm, kind)

    def __call__(self, *args):
        return asserts.check_conditions(self._call_graph(*args), self.assert_messages)

    def _call_graph(self, *args):
        # Boxed (one list) when AOTAutograd sees _boxed_call, unpacked when a wrapper hid it.
        if len(args) == 1 and isinstance(args[0], list):
            args = args[0]
        plan = self.bucket_plan
        if plan is not None:
            n = plan.size_of(args)
            b = buckets.bucket(n)
            if b != n:
                stats["padded_calls"] += 1
                return plan.unpad(self._run(plan.pad(args, n, b)), n)
        return self._run(args)

    def _run(self, args):
        if self.tensor_inputs_only and self.has_host_inputs is not None:
            key, tensors = (), args
        else:
            key = tuple(a for a in args if not isinstance(a, torch.Tensor))
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if key:
                self.tensor_inputs_only = False
        settings = _C._compile_settings_key()  # torch.tpu.precision, compiler options: own programs
        if settings:
            key = key + (settings,)
        if self.has_host_inputs is None and not any(t.device.type == "tpu" for t in tensors):
            stats["op_by_op_calls"] += 1  # no tpu tensor in: a graph of CPU work runs as it is
            return list(self.gm(*args))
        if self.has_host_inputs is None:
            self.has_host_inputs = any(t.device.type == "cpu" for t in tensors)
        host = _host_values(tensors) if self.has_host_inputs else ()
        if self.rerecord_reason is None and self.has_host_inputs:
            self._check_host_values(host)
        if self.rerecord_reason is None:
            for variant in self.variants.get(key, ()):
                if variant.host_values != host:
                    continue
                try:
                    out = variant.graph.run(tensors)
                except TypeError:
                    if tensors is not args:
                        raise
                    self.tensor_inputs_only = False  # a non-tensor argument after all: split them
                    return self._run(args)
                if out is not None:
                    stats["replays"] += 1
                    return variant.outputs(out)
        if self.rerecord_reason is not None or self.variant_count < shape_limit():
            return self._capture(args, key, tensors, host)
        self._warn_once(
            "limit",
            f"torch.compile(backend='tpu'): a {self.kind} graph has been compiled for "
            f"{self.variant_count} input shapes or layouts (TORCH_TPU_COMPILE_SHAPE_LIMIT); new ones "
            f"now run op by op. Latest input shapes: {[tuple(t.shape) for t in tensors][:6]}. Fix: keep "
            "shapes static (pad batches to a few sizes) or raise the limit."
            + (f" (Not padded to buckets: {self.bucket_reason}.)" if self.bucket_reason else ""),
        )
        stats["op_by_op_calls"] += 1
        return list(self.gm(*args))

    def _check_host_values(self, host):
        if host is None:
            self.rerecord_reason = f"a CPU tensor input has more than {_MAX_HOST_INPUT_NUMEL} elements"
        else:
            self.host_value_sets.add(host)
            if len(self.host_value_sets) > _MAX_HOST_VALUE_SETS:
                self.rerecord_reason = "the values of a CPU tensor input change between calls"
        if self.rerecord_reason is not None:
            self._warn_rerecord()

    def _warn_rerecord(self):
        if "random" in self.rerecord_reason:
            return  # dropout and other random ops: expected, nothing to fix
        self._warn_once(
            "rerecord",
            f"torch.compile(backend='tpu'): {'an' if self.kind == 'inference' else 'a'} {self.kind} graph is "
            "recorded again on every call "
            f"because {self.rerecord_reason}"
            + ("." if "several programs" in self.rerecord_reason else "; it still runs as one compiled program.")
            + _hint(self.rerecord_reason),
        )

    def _capture(self, args, key, tensors, host):
        # _capture_begin makes this thread record its ops (Fused) whatever the process's mode, until
        # _capture_end: per thread, so ranks that run as threads capture side by side.
        # The first capture bakes offsets and scalars into the program (it is replayed only
        # for the same layout); re-recordings keep them as arguments so one program serves.
        _C._capture_begin(self.rerecord_reason is None and not self.has_collectives, device_of(tensors))
        try:
            outs = list(self.gm(*args))
        except BaseException:
            _C._capture_end([], [])
            raise
        out_tensors = [o for o in outs if isinstance(o, torch.Tensor) and o.device.type != "cpu"]
        graph = _C._capture_end(tensors, out_tensors)
        if self.rerecord_reason is not None:
            stats["rerecorded_calls"] += 1
            return outs
        stats["captures"] += 1
        if not graph.replayable:
            self.rerecord_reason = graph.reason
            self._warn_rerecord()
            return outs
        template, t = [], 0
        for o in outs:
            if isinstance(o, torch.Tensor) and o.device.type != "cpu":
                template.append(("t", t))
                t += 1
            elif isinstance(o, torch.Tensor):
                # Computed on the host from constants and the CPU inputs (matched per variant).
                template.append(("h", o.detach().clone()))
            else:
                template.append(("c", o))
        self.variants.setdefault(key, []).append(_Variant(graph, template, host))
        self.variant_count += 1
        return outs

    def _warn_once(self, what, message):
        if what not in self.warned:
            self.warned.add(what)
            warnings.warn(message, stacklevel=3)


def _tensor_inputs_only(gm) -> bool:
    """Whether every placeholder of ``gm`` holds a tensor (checked once, from the traced values)."""
    for node in gm.graph.nodes:
        if node.op == "placeholder" and not isinstance(node.meta.get("val"), torch.Tensor):
            return False
    return True


_COLLECTIVE_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd", "c10d")


def _has_collectives(gm) -> bool:
    return any(node.op == "call_function" and getattr(node.target, "namespace", None) in _COLLECTIVE_NAMESPACES
               for node in gm.graph.nodes)


def _has_dynamic_sizes(gm) -> bool:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return True
        if isinstance(val, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in val.shape):
            return True
    return False


def _draws_random_numbers(gm) -> bool:
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if torch.Tag.nondeterministic_seeded in node.target.tags and not _without_dropout(node):
                return True
    return False


def _without_dropout(node) -> bool:
    """Fused attention is tagged as seeded for its dropout; with dropout_p == 0 it draws nothing."""
    if node.target is not torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default:
        return False
    p = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
    return isinstance(p, (int, float)) and p == 0


def _hint(reason: str) -> str:
    if "CPU tensor" in reason:
        return " Fix: keep such inputs on the device (for optimizers: capturable=True)."
    if "collective" in reason:
        return (" The results are eager execution's. Compiled programs hold the collectives of the "
                "process group's own ranks on the device transport (TORCH_TPU_DIST_TRANSPORT=device, "
                "TORCH_TPU_DIST_CUT_COLLECTIVES unset; docs/design.md).")
    return " Fix: see torch_tpu.fallback_counts() for ops that run on the CPU."
