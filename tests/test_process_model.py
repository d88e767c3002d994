"""Processes and the tpu device, with CUDA's contract: a child forked after its parent used the
device raises a clear RuntimeError at its first device use (it used to wait forever on a lock of
the parent's PJRT client) and reports `torch.tpu._is_in_bad_fork()`; a child of a parent that never
used the device can use it; DataLoader workers that only make CPU tensors keep working; 'spawn'
works; tpu tensors go through torch.multiprocessing queues (as values, rebuilt on the receiver's
device). Each scenario runs in a fresh interpreter with a hard timeout, so a hang fails the test.
"""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

TIMEOUT = 180


def _run(code: str, tmp_path) -> dict:
    script = tmp_path / "scenario.py"
    script.write_text(textwrap.dedent(code))
    try:
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT,
                              cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the scenario hung (killed after {TIMEOUT} s); output so far: {e.stdout!r} {e.stderr!r}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


FORK_AFTER_USE = """
import json, os, torch, torch_tpu
x = torch.arange(4.0, device="tpu") * 2
parent_before = x.cpu().tolist()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    out = {"bad_fork": torch.tpu._is_in_bad_fork(), "errors": {}}
    for name, fn in [("new tensor", lambda: torch.ones(2, device="tpu")), ("parent's tensor to cpu", lambda: x.cpu()),
                     ("op on parent's tensor", lambda: x + 1), ("synchronize", torch.tpu.synchronize)]:
        try:
            fn()
            out["errors"][name] = None
        except Exception as e:
            out["errors"][name] = [type(e).__name__, str(e)]
    os.write(w, json.dumps(out).encode())
    raise SystemExit(0)  # a normal interpreter exit: atexit hooks and destructors must not hang
os.close(w)
_, status = os.waitpid(pid, 0)
child = json.loads(os.read(r, 1 << 16).decode())
print(json.dumps({"child": child, "status": status, "parent_bad_fork": torch.tpu._is_in_bad_fork(),
                  "parent_before": parent_before, "parent_after": (x + 1).cpu().tolist()}))
"""


def test_a_child_forked_after_device_use_raises_at_first_use(tmp_path):
    r = _run(FORK_AFTER_USE, tmp_path)
    child = r["child"]
    assert child["bad_fork"] is True
    for name, err in child["errors"].items():
        assert err is not None, f"{name} did not raise in the forked child"
        assert err[0] == "RuntimeError", (name, err)
        assert "Cannot re-initialize tpu in forked subprocess" in err[1] and "'spawn'" in err[1], (name, err)
    assert r["status"] == 0
    # The parent is unaffected.
    assert r["parent_bad_fork"] is False
    expected = torch.arange(4.0) * 2
    assert r["parent_before"] == expected.tolist() and r["parent_after"] == (expected + 1).tolist()


def test_a_child_of_a_parent_that_never_used_the_device_can_use_it(tmp_path):
    r = _run("""
        import json, os, torch, torch_tpu
        assert not torch.tpu.is_initialized()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            y = (torch.arange(3.0, device="tpu") * 3).cpu().tolist()
            os.write(w, json.dumps({"bad_fork": torch.tpu._is_in_bad_fork(), "y": y}).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        child = json.loads(os.read(r, 1 << 16).decode())
        print(json.dumps({"child": child, "parent": (torch.ones(2, device="tpu") + 1).cpu().tolist()}))
    """, tmp_path)
    assert r["child"] == {"bad_fork": False, "y": (torch.arange(3.0) * 3).tolist()}
    assert r["parent"] == [2.0, 2.0]


def test_dataloader_fork_workers_making_cpu_tensors_keep_working(tmp_path):
    r = _run("""
        import json, torch, torch_tpu
        from torch.utils.data import DataLoader, Dataset
        class Squares(Dataset):
            def __len__(self):
                return 16
            def __getitem__(self, i):
                return torch.tensor([float(i * i)])
        w = torch.ones(1, device="tpu")  # the parent has used the device
        loader = DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context="fork")
        total = sum(float((b.to("tpu") * w).sum().cpu()) for b in loader)
        print(json.dumps({"total": total}))
    """, tmp_path)
    assert r["total"] == float(sum(i * i for i in range(16)))


SPAWN_AND_QUEUE = """
import json, torch, torch_tpu
import torch.multiprocessing as mp

def child(inbox, outbox):
    t = inbox.get(timeout=120)
    p = inbox.get(timeout=120)
    local = (torch.arange(3.0, device="tpu") + 1).cpu().tolist()
    outbox.put({"device": str(t.device), "values": (t * 2).cpu().tolist(), "local": local,
                "param": [type(p).__name__, p.requires_grad, str(p.device), p.detach().cpu().tolist()]})

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=child, args=(inbox, outbox))
    proc.start()
    inbox.put(torch.arange(4.0, device="tpu") + 0.5)
    inbox.put(torch.nn.Parameter(torch.full((2,), 3.0, device="tpu")))
    got = outbox.get(timeout=150)
    proc.join(60)
    print(json.dumps({"got": got, "exitcode": proc.exitcode}))
"""


def test_spawn_children_use_the_device_and_receive_tpu_tensors_through_queues(tmp_path):
    r = _run(SPAWN_AND_QUEUE, tmp_path)
    assert r["exitcode"] == 0
    got = r["got"]
    assert got["device"] == "tpu:0"
    assert got["values"] == ((torch.arange(4.0) + 0.5) * 2).tolist()
    assert got["local"] == (torch.arange(3.0) + 1).tolist()
    assert got["param"] == ["Parameter", True, "tpu:0", [3.0, 3.0]]


def test_a_tensor_with_autograd_history_is_refused_as_on_the_cpu():
    from multiprocessing.reduction import ForkingPickler

    for device in ("cpu", "tpu"):
        t = torch.ones(2, device=device, requires_grad=True) * 2
        with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
            ForkingPickler.dumps(t)
