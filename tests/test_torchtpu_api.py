"""The original TorchTPU's public namespace on ours: the table that builds torch.tpu and its
submodules, every name the migration guide lists as available, and the eager-mode controls
(EagerMode, eager_mode, set_eager_mode) - results compared with the CPU."""

import importlib
import os
import re
import sys

import pytest
import torch

import torch_tpu
from torch_tpu import _public_api
from torch_tpu.execution_mode import EagerMode, get_mode
from helpers import assert_close

_GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                      "migrating_from_torchtpu.md")


def _lookup(dotted):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("module", sorted(_public_api.PUBLIC))
def test_every_table_entry_resolves(module):
    mod = importlib.import_module(module)
    assert sys.modules[module] is mod
    exports = _public_api.PUBLIC[module]
    assert mod.__all__ == sorted(exports)
    assert mod.__tpu_api_stages__ == {n: stage for n, (_, stage) in exports.items()}
    assert set(mod.__tpu_api_stages__.values()) <= {_public_api.STABLE, _public_api.EXPERIMENTAL}
    for name in exports:
        assert getattr(mod, name) is not None, name
        assert name in dir(mod)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        mod.no_such_name


@pytest.mark.parametrize("module", sorted(_public_api.PUBLIC))
def test_public_modules_pickle_by_reference(module):
    """Ray, multiprocessing and cloudpickle ship functions that use torch.tpu: the modules must
    pickle as references to themselves, not as copies."""
    import pickle

    mod = importlib.import_module(module)
    assert pickle.loads(pickle.dumps(mod)) is mod


def test_submodules_are_importable_the_usual_ways():
    import torch.tpu.compiler
    import torch.tpu.ops
    from torch.tpu.distributed import spmd_safe
    from torch.tpu.pallas import jax_op

    assert torch.tpu.compiler is sys.modules["torch.tpu.compiler"]
    assert torch.tpu.ops.optimization_barrier is not None
    assert spmd_safe is torch.tpu.distributed.spmd_safe
    assert jax_op is torch_tpu.kernels.jax_op
    assert torch.tpu.topology_aware_mesh is torch.tpu.distributed.topology_aware_mesh


def _guide_rows():
    rows = []
    for line in open(_GUIDE, encoding="utf-8"):
        m = re.match(r"\|\s*`(torch\.tpu[\w.]*)`\s*\|\s*([^|]*)\|", line)
        if m:
            rows.append((m.group(1), m.group(2).strip()))
    return rows


def test_migration_guide_names_exist():
    rows = _guide_rows()
    assert len(rows) >= 40, "the guide's table lost its rows"
    missing = []
    for name, status in rows:
        if status.lower().startswith("not yet"):
            continue
        try:
            _lookup(name)
        except (AttributeError, ImportError):
            missing.append(name)
    assert not missing, f"the guide lists these as available, but they do not resolve: {missing}"
    # Every name of the table is in the guide.
    listed = {n for n, _ in rows}
    for module, exports in _public_api.PUBLIC.items():
        for name in exports:
            assert f"{module}.{name}" in listed, f"{module}.{name} is missing from the migration guide"


def test_eager_mode_names_are_aliases():
    E = torch.tpu.EagerMode
    assert E is EagerMode
    assert E.DEFER_NEVER is E.STRICT
    assert E.DEFER_AND_FUSE is E.FUSED
    assert E.DEFER_NEVER_AND_LAUNCH_BLOCKING is E.DEBUG


def test_eager_mode_property_and_context():
    E = torch.tpu.EagerMode
    start = torch.tpu.eager_mode
    assert start is get_mode()
    x = torch.randn(8, 8)
    tx = x.to("tpu")
    try:
        torch.tpu.eager_mode = E.DEFER_AND_FUSE
        assert get_mode() is E.FUSED and torch.tpu.eager_mode is E.DEFER_AND_FUSE
        out = (tx.sin() * 2).sum(0)
        assert torch_tpu.execution_mode.pending_ops() > 0
        assert_close(out, (x.sin() * 2).sum(0))
        with torch.tpu.set_eager_mode(E.DEFER_NEVER_AND_LAUNCH_BLOCKING):
            assert get_mode() is E.DEBUG
            assert_close(tx.cos(), x.cos())
        assert get_mode() is E.FUSED
        with pytest.raises(RuntimeError):
            with torch.tpu.set_eager_mode(E.DEFER_NEVER):
                assert get_mode() is E.STRICT
                raise RuntimeError("leaves the block")
        assert get_mode() is E.FUSED  # restored on an exception too
        torch.tpu.eager_mode = "defer_never"  # names are accepted, as by set_mode
        assert get_mode() is E.STRICT
        with pytest.raises(ValueError, match="unknown eager mode"):
            torch.tpu.eager_mode = "lazy"
    finally:
        torch.tpu.eager_mode = start


def test_eager_mode_switch_is_forbidden_inside_compiled_code(fresh_dynamo):
    def f(x):
        with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_NEVER):
            return x + 1

    with pytest.raises(Exception, match="set_eager_mode"):
        torch.compile(f, backend="tpu")(torch.ones(2, device="tpu"))


def test_device_of_and_set_stream():
    t = torch.ones(2, device="tpu:1")
    with torch.tpu.device_of(t):
        assert torch.tpu.current_device() == 1
    assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(2)):  # a CPU tensor: no change
        assert torch.tpu.current_device() == 0
    s = torch.tpu.Stream()
    torch.tpu.set_stream(s)
    try:
        assert torch.tpu.current_stream() == s
    finally:
        torch.tpu.set_stream(torch.tpu.default_stream())
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
