"""One ModuleInfo entry on the `tpu` device against the CPU (the per-module work of
conformance/module_sweep.py).

Each sample builds the module on the CPU, copies its state dict into a tpu module built from tpu
copies of the same constructor arguments, and runs both on the same inputs (copied to tpu before
the CPU run, which may modify them). Compared: the outputs, the buffers after the forward (e.g.
BatchNorm's running statistics) and, where gradients are wanted, the gradients of the input
tensors and of every parameter for the same (pseudo-random, fixed) output gradients. The tpu run
uses strict fallback mode, so an op without a tpu lowering raises and is reported as `fallback`
with the op's name.

Runs per module and dtype: `train` (forward and backward), `eval` (forward and backward; only
where the ModuleInfo says train and eval differ, as PyTorch's own module tests do), and eval-mode
forwards under `torch.no_grad()` (`no_grad`) and `torch.inference_mode()` (`inference_mode`),
where PyTorch takes its fast paths (TransformerEncoderLayer, MultiheadAttention)."""

import contextlib
import copy
import re
import time

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.module_compare import compare
from conformance.module_random import check_random, is_random

# Per-sample outcomes. `random`: a random module in train mode whose tpu result passed the
# statistical checks (module_random.py); `skip`: the CPU run raised (an invalid sample);
# `truncated`: not run, the module's time budget ran out first.
SAMPLE_STATUSES = ("pass", "random", "fallback", "mismatch", "error", "skip", "truncated")

# (name, module.training, gradients wanted, grad-mode context).
MODES = {
    "train": (True, True, contextlib.nullcontext),
    "eval": (False, True, contextlib.nullcontext),
    "no_grad": (False, False, torch.no_grad),
    "inference_mode": (False, False, torch.inference_mode),
}

_FALLBACK_RE = re.compile(r"no tpu lowering for '([^']+)'")


def modes_for(info):
    """The mode names run for ModuleInfo `info`."""
    modes = ["train"] + (["eval"] if info.train_and_eval_differ else [])
    return modes + ["no_grad", "inference_mode"]


def dtype_names(info):
    return {str(d).replace("torch.", "") for d in info.dtypes}


def _to_tpu_keeping_aliases():
    """A tpu-copying function that maps one CPU tensor passed twice (KLDivLoss's scalar samples
    pass the same tensor as input and target) to one tpu tensor, so gradients add up alike."""
    memo = {}

    def convert(x):
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                memo[id(x)] = (x, _to_tpu(x))  # keeps x alive: ids stay unique
            return memo[id(x)][1]
        return _to_tpu(x)

    return convert


def _to_tpu(x):
    from torch.nn.utils.rnn import PackedSequence

    if isinstance(x, PackedSequence):
        # batch_sizes stay on the host, as PyTorch requires.
        data = x.data.detach().to("tpu").requires_grad_(x.data.requires_grad)
        move = (lambda t: None if t is None else t.to("tpu"))
        return PackedSequence(data, x.batch_sizes, move(x.sorted_indices), move(x.unsorted_indices))
    if isinstance(x, torch.Tensor):
        return x.detach().to("tpu").requires_grad_(x.requires_grad)
    return x


def _to_cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def _is_leaf(x):
    from torch.nn.utils.rnn import PackedSequence

    return isinstance(x, PackedSequence)


def _map_inputs(fn, tree):
    return tree_map(fn, tree, is_leaf=_is_leaf)


def _input_leaves(tree):
    from torch.nn.utils.rnn import PackedSequence

    flat = tree_flatten(tree, is_leaf=_is_leaf)[0]
    out = []
    for x in flat:
        if isinstance(x, PackedSequence):
            x = x.data
        if isinstance(x, torch.Tensor) and x.requires_grad:
            out.append(x)
    return out


def _grad_outputs(outs, ones):
    """Fixed output gradients for `outs`: pseudo-random (so transposed or permuted gradients are
    caught) from one seed, made on the CPU, or all ones for the random modules' checks."""
    gen = torch.Generator().manual_seed(1234)
    ws = []
    for o in outs:
        w = torch.ones(o.shape, dtype=o.dtype) if ones else torch.randn(o.shape, generator=gen).to(o.dtype)
        ws.append(w.to(o.device))
    return ws


def gradients(module, out, inputs, ones=False):
    """{'inputs': [grads of input tensors that require grad], 'params': {name: grad}}, or None
    when no floating output requires grad."""
    leaves = _input_leaves(inputs)
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    outs = [o for o in tree_flatten(out, is_leaf=_is_leaf)[0]
            if isinstance(o, torch.Tensor) and o.requires_grad and o.dtype.is_floating_point]
    from torch.nn.utils.rnn import PackedSequence

    outs += [o.data for o in tree_flatten(out, is_leaf=_is_leaf)[0]
             if isinstance(o, PackedSequence) and o.data.requires_grad]
    targets = leaves + [p for _, p in named]
    if not outs or not targets:
        return None
    grads = torch.autograd.grad(outs, targets, _grad_outputs(outs, ones), allow_unused=True)
    return {"inputs": list(grads[:len(leaves)]), "params": dict(zip([n for n, _ in named], grads[len(leaves):]))}


def _state(module):
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def _float64_reference(module, fargs, fkwargs, context):
    """A callable: the module (as it was before the CPU forward) in float64 on float64 copies of
    the inputs; for the half-precision exemption of forward outputs."""
    half = (torch.bfloat16, torch.float16)
    ref = copy.deepcopy(module).double()

    def up(x):
        if isinstance(x, torch.Tensor):
            x = x.detach()
            return x.double() if x.dtype in half else x.clone()
        return x

    args, kwargs = _map_inputs(up, (fargs, fkwargs))

    def run():
        with context():
            return ref(*args, **kwargs)

    return run


def _error_status(e):
    text = str(e)
    found = _FALLBACK_RE.search(text)
    if found:
        return "fallback", found.group(1)
    first = text.strip().splitlines()[0][:300] if text.strip() else ""
    return "error", f"{type(e).__name__}: {first}" if first else type(e).__name__


def run_sample(info, sample, dtype, mode):
    """(status, message) for one ModuleInput of ModuleInfo `info` in `mode` (a MODES key)."""
    import torch_tpu

    training, want_grad, context = MODES[mode]
    random = is_random(info.name, training)
    cons = (sample.constructor_input.args, sample.constructor_input.kwargs)
    fwd = sample.forward_input
    fwd = (fwd.args, fwd.kwargs) if fwd is not None else ((), {})
    copy_error = None
    try:
        to_tpu = _to_tpu_keeping_aliases()
        tpu_cons, tpu_fwd = _map_inputs(to_tpu, cons), _map_inputs(to_tpu, fwd)
    except Exception as e:  # reported as the tpu run's error below
        copy_error = e
    try:
        cpu_m = info.module_cls(*cons[0], **cons[1]).to(dtype)
        cpu_m.train(training)
        if info.is_lazy:
            # Lazy parameters take their shapes from the first forward; it changes no state.
            with torch.no_grad():
                cpu_m(*_map_inputs(_to_cpu, fwd[0]), **_map_inputs(_to_cpu, fwd[1]))
        state = _state(cpu_m)
        half = dtype in (torch.bfloat16, torch.float16)
        reference = _float64_reference(cpu_m, *fwd, context) if half else None
        with context():
            cpu_out = cpu_m(*fwd[0], **fwd[1])
        cpu_grads = gradients(cpu_m, cpu_out, fwd, random) if want_grad else None
        cpu_state = _state(cpu_m)
    except Exception as e:
        return "skip", f"cpu raised {type(e).__name__}"
    torch_tpu.reset_fallback_counts()
    try:
        if copy_error is not None:
            raise copy_error
        tpu_m = info.module_cls(*tpu_cons[0], **tpu_cons[1]).to("tpu").to(dtype)
        tpu_m.load_state_dict(state)
        tpu_m.train(training)
        with context():
            tpu_out = tpu_m(*tpu_fwd[0], **tpu_fwd[1])
        tpu_grads = gradients(tpu_m, tpu_out, tpu_fwd, random) if want_grad else None
        tpu_out_cpu, tpu_grads_cpu = tree_map(_to_cpu, tpu_out), tree_map(_to_cpu, tpu_grads)
        tpu_state = _state(tpu_m)
    except Exception as e:
        return _error_status(e)
    fell_back = torch_tpu.fallback_counts()
    if fell_back:  # only when the caller left the fallback mode at 'warn'
        return "fallback", ", ".join(sorted(fell_back))
    problem = (compare(tpu_out_cpu, cpu_out, "output", random, reference)
               or compare(tpu_state, cpu_state, "buffer", random)
               or compare(tpu_grads_cpu, cpu_grads, "gradient", random))
    if problem is None and random:
        x = next((t for t in tree_flatten(tpu_fwd)[0] if isinstance(t, torch.Tensor)), None)
        grad = tpu_grads_cpu["inputs"][0] if tpu_grads_cpu and tpu_grads_cpu["inputs"] else None
        problem = check_random(info.name, tpu_m, x.cpu(), tpu_out_cpu, grad)
        if problem:
            problem = f"statistics: {problem}"
    if problem is not None:
        return "mismatch", problem[:300]
    return ("random", "") if random else ("pass", "")


def check_module(info, dtypes, time_budget=60.0, modes=None):
    """Runs every sample of ModuleInfo `info` for each dtype name it supports and each mode of
    modes_for(info) (only those in `modes` when given);
    returns {'name', 'dtypes': {dtype: {mode: counts, 'messages': {mode: first problem}}}}.

    `time_budget` (seconds) is for the whole module: each run (dtype and mode) gets an equal
    share of what is left, and samples past it count as `truncated`. When the ModuleInfo's
    `module_inputs_func` raises, that run's counts are {'inputs_failed': 1}."""
    import torch_tpu

    result = {"name": info.name, "dtypes": {}}
    wanted = [m for m in modes_for(info) if modes is None or m in modes]
    runs = [(d, m) for d in dtypes if d in dtype_names(info) for m in wanted]
    started = time.time()
    old_mode = torch_tpu.get_fallback_mode()
    torch_tpu.set_fallback_mode("error")
    try:
        for i, (dname, mode) in enumerate(runs):
            share = max(time_budget - (time.time() - started), 0.0) / (len(runs) - i)
            counts, message = _run(info, getattr(torch, dname), mode, share)
            entry = result["dtypes"].setdefault(dname, {})
            entry[mode] = counts
            if message:
                entry.setdefault("messages", {})[mode] = message
    finally:
        torch_tpu.set_fallback_mode(old_mode)
    result["seconds"] = round(time.time() - started, 2)
    return result


def _run(info, dtype, mode, budget):
    training, want_grad, _ = MODES[mode]
    torch.manual_seed(0)
    try:
        samples = list(info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=want_grad,
                                               training=training))
    except Exception as e:
        return {"inputs_failed": 1}, f"module_inputs_func failed: {type(e).__name__}: {e}"[:300]
    counts = dict.fromkeys(SAMPLE_STATUSES, 0)
    message = ""
    started = time.time()
    for i, sample in enumerate(samples):
        if time.time() - started > budget:
            counts["truncated"] = len(samples) - i
            message = message or f"truncated: {len(samples) - i} of {len(samples)} samples not run ({budget:.0f}s budget)"
            break
        status, msg = run_sample(info, sample, dtype, mode)
        counts[status] += 1
        if status in ("fallback", "mismatch", "error") and not message.startswith(("fallback", "mismatch", "error")):
            desc = f" [{sample.desc}]" if sample.desc else ""
            message = f"{status}: {msg}{desc}"
    return counts, message
