"""One rank's program from JAX's lowering of a ``shard_map`` over a whole mesh.

JAX lowers ``jax.jit(f)`` of a function whose work is one ``jax.shard_map`` over every axis of
the mesh to a module whose ``@main`` is a single ``sdy.manual_computation``: its region is what
each device of the mesh runs on its own shard (local shapes), with collectives whose replica
groups name mesh positions (row-major device ids). That region is a rank's program here: the
ranks of a tpu_dist device group run one replicated program each (one replica per rank, replica
id = rank = mesh position), so the region becomes the module's ``@main`` and its collectives are
rewritten from JAX's partition form to the replica form:

* ``channel_handle`` and ``use_global_device_ids`` go (with one partition the flattened ids
  JAX writes are the replica ids; a channel would make a ``collective_permute`` or
  ``all_to_all`` address partitions, of which there is one);
* ``stablehlo.partition_id`` (what ``jax.lax.axis_index`` reads) becomes ``stablehlo.replica_id``.

Pure text processing, like ``_mlir_text``: JAX's printer puts an op's header on one line and
closes a region at the header's indentation."""

import re

_CHANNEL = re.compile(r"channel_handle\s*=\s*#stablehlo\.channel_handle<[^>]*>\s*,?\s*")
_GLOBAL_IDS = re.compile(r",?\s*use_global_device_ids(?:\s*=\s*true)?")
_ARG_ATTRS = re.compile(r"\s*\{sdy\.[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")
_MANUAL = re.compile(r"^(\s*)(%[\w#:]+) = sdy\.manual_computation\(([^)]*)\)(.*)\((.*)\) \{$")
_MANUAL_AXES = re.compile(r"manual_axes=\{([^}]*)\}")


class NotOneShardMap(ValueError):
    """The function's lowering is not one shard_map over the whole mesh."""


def _hint(name):
    return (f"{name}: a jax_op with mesh= must do all its work inside one jax.shard_map over every "
            "axis of the mesh (inputs straight in, outputs straight out); move the other ops into "
            "the shard_map body")


def _split_top(text):
    """Comma-separated items at bracket depth 0."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _main_span(lines):
    for i, line in enumerate(lines):
        if re.match(r"\s*func\.func\s+(?:public\s+)?@main\(", line):
            indent = len(line) - len(line.lstrip())
            for j in range(i + 1, len(lines)):
                if lines[j].startswith(" " * indent + "}") and len(lines[j]) - len(lines[j].lstrip()) == indent:
                    return i, j
    raise NotOneShardMap("the module has no @main function")


def rank_program(text, name, axis_names):
    """The module text of one rank's program: ``@main`` takes the local (per-rank) inputs and
    returns the local outputs. ``axis_names``: the mesh's axes, all of which must be manual."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#loc")]
    start, end = _main_span(lines)
    main_args = re.findall(r"(%arg\d+):", lines[start].split("->")[0])
    body = lines[start + 1:end]
    heads = [k for k, ln in enumerate(body) if "sdy.manual_computation(" in ln]
    if len(heads) != 1:
        raise NotOneShardMap(_hint(name) + f" (found {len(heads)} shard_maps)")
    head = body[heads[0]]
    m = _MANUAL.match(head)
    if m is None:
        raise NotOneShardMap(_hint(name) + " (an sdy.manual_computation this version cannot read)")
    indent, result, operands, attrs, region_args = m.groups()
    axes = _MANUAL_AXES.search(attrs)
    manual = {a.strip().strip('"') for a in axes.group(1).split(",") if a.strip()} if axes else set()
    missing = [a for a in axis_names if a not in manual]
    if missing:
        raise NotOneShardMap(_hint(name) + f" (the shard_map leaves axes {missing} automatic)")
    close = next(k for k in range(heads[0] + 1, len(body))
                 if body[k].startswith(indent + "}") and len(body[k]) - len(body[k].lstrip()) == len(indent))
    outside = [ln.strip() for k, ln in enumerate(body) if k < heads[0] or k > close + 1]
    if outside:
        raise NotOneShardMap(_hint(name) + f" (ops outside it: {'; '.join(outside[:3])})")
    if [o.strip() for o in operands.split(",") if o.strip()] != main_args:
        raise NotOneShardMap(_hint(name) + " (the shard_map must take the inputs in order)")
    ret = body[close + 1].strip()
    nres = result.split(":")[1] if ":" in result else "1"
    base = result.split(":")[0]
    want = [base] if nres == "1" else [f"{base}#{i}" for i in range(int(nres))]
    if not ret.startswith("return ") or [v.strip() for v in ret[7:].split(":")[0].split(",")] != want:
        raise NotOneShardMap(_hint(name) + " (the shard_map's results must be the outputs, in order)")
    region = body[heads[0] + 1:close]
    last = region[-1].strip()
    if not last.startswith("sdy.return"):
        raise NotOneShardMap(_hint(name) + " (its region does not end in sdy.return)")
    types = last[len("sdy.return"):].partition(":")[2]
    region[-1] = region[-1][: len(region[-1]) - len(region[-1].lstrip())] + "return" + last[len("sdy.return"):]
    out_types = [t.strip() for t in _split_top(types)]
    args = ", ".join(a.strip() for a in _split_top(region_args))
    results = ", ".join(out_types)
    func = [f"  func.func public @main({args}) -> ({results}) {{"] + region + ["  }"]
    others = [ln for k, ln in enumerate(lines) if k < start or k > end]
    others = [ln for ln in others if not ln.lstrip().startswith("sdy.mesh")]
    module = "\n".join(["module {"] + func + others[1:])
    module = _to_replicas(module)
    if "sdy." in module:
        raise NotOneShardMap(_hint(name) + " (shardings inside the shard_map body)")
    return module, out_types, _out_specs(attrs)


def _out_specs(attrs):
    """Per output, its partition spec (a tuple per dimension: the axes it is split over) from the
    manual computation's ``out_shardings=[<@mesh, [{"x"}, {}]>, ...]``."""
    at = attrs.index("out_shardings=[") + len("out_shardings=[")
    depth, end = 1, at
    while depth:
        depth += {"[": 1, "]": -1}.get(attrs[end], 0)
        end += 1
    specs = []
    for sharding in _split_top(attrs[at:end - 1]):
        dims = sharding[sharding.index("[") + 1: sharding.index("]")]
        specs.append(tuple(tuple(a.strip().strip('"') for a in d.strip()[1:-1].split(",") if a.strip())
                           for d in _split_top(dims)))
    return specs


def _to_replicas(text):
    text = _ARG_ATTRS.sub("", text)
    text = _CHANNEL.sub("", text)
    text = _GLOBAL_IDS.sub("", text)
    text = text.replace("<{, ", "<{").replace("<{}>", "")
    return text.replace("stablehlo.partition_id", "stablehlo.replica_id")
