"""The compilation cache shared by every eager mode: statistics, clearing, the disk tier across
process restarts (with corrupt, foreign and evicted entries), and the shape-churn warning."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import torch_tpu

# A child process that computes a small program and reports its result and the cache stats.
CHILD = r"""
import json, torch, torch_tpu
x = torch.arange(12.0).reshape(3, 4)
y = ((x.to("tpu") * 3).sin() @ x.to("tpu").t()).sum(0)
print(json.dumps({"y": y.cpu().tolist(), "stats": torch.tpu.compilation_cache_stats()}))
"""


def run_child(cache_dir, **env):
    full_env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(cache_dir), **env}
    r = subprocess.run([sys.executable, "-c", CHILD], env=full_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def expected():
    x = torch.arange(12.0).reshape(3, 4)
    return ((x * 3).sin() @ x.t()).sum(0)


def entries(cache_dir):
    return sorted(p for p in os.listdir(cache_dir) if p.endswith(".tpuexe"))


def test_stats_and_clear():
    stats = torch.tpu.compilation_cache_stats()
    for key in ("hits", "misses", "compiles", "compile_seconds", "disk_loads", "disk_bytes", "entries"):
        assert key in stats
    a = torch.randn(7, 5, device="tpu")
    torch.cos(a).cpu()
    before = torch.tpu.compilation_cache_stats()
    torch.cos(a).cpu()
    after = torch.tpu.compilation_cache_stats()
    assert after["compiles"] == before["compiles"] and after["hits"] > before["hits"]
    torch.tpu.clear_compilation_cache()
    assert torch.tpu.compilation_cache_stats()["entries"] == 0
    torch.testing.assert_close(torch.cos(a).cpu(), torch.cos(a.cpu()))
    again = torch.tpu.compilation_cache_stats()
    # Compiled again, or read back from the disk tier when it is on.
    assert again["compiles"] + again["disk_loads"] > after["compiles"] + after["disk_loads"]


def test_disk_tier_survives_a_restart(tmp_path):
    cold = run_child(tmp_path)
    assert cold["stats"]["compiles"] > 0 and cold["stats"]["disk_writes"] == cold["stats"]["compiles"]
    assert cold["stats"]["disk_bytes"] > 0 and entries(tmp_path)
    warm = run_child(tmp_path)
    assert warm["stats"]["compiles"] == 0
    assert warm["stats"]["disk_loads"] == cold["stats"]["compiles"]
    for result in (cold, warm):
        torch.testing.assert_close(torch.tensor(result["y"]), expected())
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]  # writes were atomic


def test_corrupt_truncated_and_foreign_entries_are_replaced(tmp_path):
    cold = run_child(tmp_path)
    names = entries(tmp_path)
    assert len(names) >= 3
    with open(tmp_path / names[0], "r+b") as f:  # flip a payload byte
        f.seek(-5, os.SEEK_END)
        byte = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(tmp_path / names[1], "r+b") as f:  # truncate
        f.truncate(20)
    (tmp_path / names[2]).write_bytes((tmp_path / names[0]).read_bytes())  # another key's entry
    healed = run_child(tmp_path)
    assert healed["stats"]["disk_rejected"] == 3
    assert healed["stats"]["compiles"] == 3
    torch.testing.assert_close(torch.tensor(healed["y"]), expected())
    again = run_child(tmp_path)  # the replaced entries are good again
    assert again["stats"]["compiles"] == 0 and again["stats"]["disk_rejected"] == 0
    assert again["stats"]["disk_loads"] == cold["stats"]["compiles"]


def test_size_bound_evicts(tmp_path):
    cold = run_child(tmp_path)
    largest = max(os.path.getsize(tmp_path / n) for n in entries(tmp_path))
    small = tmp_path / "small"
    bounded = run_child(small, TORCH_TPU_CACHE_MAX_BYTES=str(largest + 100))
    assert bounded["stats"]["disk_evicted"] > 0
    assert sum(os.path.getsize(small / n) for n in entries(small)) <= largest + 100
    torch.testing.assert_close(torch.tensor(bounded["y"]), expected())
    assert cold["stats"]["disk_evicted"] == 0


def test_disabled_disk_tier(tmp_path):
    r = run_child("disabled")
    assert r["stats"]["disk_writes"] == 0 and r["stats"]["disk_dir"] == ""
    torch.testing.assert_close(torch.tensor(r["y"]), expected())


def test_processes_share_the_directory(tmp_path):
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        torch.testing.assert_close(torch.tensor(json.loads(out.strip().splitlines()[-1])["y"]), expected())
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]
    warm = run_child(tmp_path)
    assert warm["stats"]["compiles"] == 0 and warm["stats"]["disk_rejected"] == 0


def run_child_full(cache_dir, **env):
    full_env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(cache_dir), **env}
    r = subprocess.run([sys.executable, "-c", CHILD], env=full_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_a_directory_others_can_write_is_refused_with_a_warning(tmp_path):
    shared = tmp_path / "open"
    shared.mkdir()
    shared.chmod(0o777)
    r, err = run_child_full(shared)
    torch.testing.assert_close(torch.tensor(r["y"]), expected())
    assert r["stats"]["disk_dir"] == "" and r["stats"]["disk_writes"] == 0
    assert "others can write it (mode 0777)" in r["stats"]["disk_refused"]
    assert err.count("is not used (compiled programs are not kept on disk)") == 1, err
    assert f"chmod 700 {shared}" in err and "TORCH_TPU_CACHE_SHARED=1" in err
    assert not entries(shared) and not (shared / "key").exists()
    # A team sharing it on purpose: a group-writable directory is used, its key readable by the group.
    shared.chmod(0o2770)
    r, _ = run_child_full(shared, TORCH_TPU_CACHE_SHARED="1")
    assert r["stats"]["disk_refused"] == "" and r["stats"]["disk_writes"] > 0
    assert (shared / "key").stat().st_mode & 0o777 == 0o640


def test_entries_planted_from_another_cache_are_recompiled_not_loaded(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    cold = run_child(mine)
    assert (mine.stat().st_mode & 0o777) == 0o700 and ((mine / "key").stat().st_mode & 0o777) == 0o600
    run_child(theirs)  # the same programs, signed with another directory's key
    for name in entries(theirs):
        (mine / name).write_bytes((theirs / name).read_bytes())
    r = run_child(mine)
    torch.testing.assert_close(torch.tensor(r["y"]), expected())
    assert r["stats"]["disk_loads"] == 0 and r["stats"]["disk_rejected"] == cold["stats"]["compiles"]
    assert r["stats"]["compiles"] == cold["stats"]["compiles"]


def test_shape_churn_warns_once_naming_the_op_and_shapes():
    old = torch_tpu._C._shape_churn_limit()
    torch_tpu._C._set_shape_churn_limit(3)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in range(101, 107):
                torch.atan(torch.ones(n, device="tpu"))
        churn = [w for w in caught if "distinct shapes" in str(w.message)]
        assert len(churn) == 1, [str(w.message) for w in caught]
        message = str(churn[0].message)
        assert "aten::atan" in message and "float32[rank 1]" in message and "[104]" in message
        assert "TORCH_TPU_SHAPE_CHURN_LIMIT" in message
    finally:
        torch_tpu._C._set_shape_churn_limit(old)


def test_shape_churn_of_fused_graphs():
    from torch_tpu.execution_mode import mode

    old = torch_tpu._C._shape_churn_limit()
    torch_tpu._C._set_shape_churn_limit(3)
    try:
        with warnings.catch_warnings(record=True) as caught, mode("fused"):
            warnings.simplefilter("always")
            for n in range(201, 207):
                x = torch.ones(n, device="tpu")
                torch.tpu.synchronize()
                assert (torch.cosh(x) * 2).sum().item() == pytest.approx(2 * n * 1.5430806348, rel=1e-5)
        churn = [str(w.message) for w in caught if "fused graph" in str(w.message)]
        assert len(churn) == 1, churn
        assert "aten::cosh" in churn[0] and "float32[rank 1]" in churn[0] and "[204]" in churn[0]
    finally:
        torch_tpu._C._set_shape_churn_limit(old)
