"""torch._assert_async on the tpu device, with CUDA's semantics: the call queues a device-side
check and returns without waiting; a false condition raises RuntimeError (PyTorch's CPU message)
at the next synchronization - torch.tpu.synchronize(), .item(), .cpu(), print - or at the call in
Debug mode; in Fused eager and in torch.compile'd functions too; never through the CPU fallback.
Every failure is compared with the CPU kernel's error for the same call."""

import pytest
import torch

import torch_tpu
from torch_tpu import _C
from torch_tpu.execution_mode import EagerMode, mode, pending_ops, set_mode

from helpers import assert_close

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def clean_state():
    """Strict mode, no fallback, and no assertion left pending for the next test."""
    set_mode(EagerMode.STRICT)
    torch_tpu.reset_fallback_counts()
    yield
    set_mode(EagerMode.STRICT)
    for device in range(torch.tpu.device_count()):
        try:
            torch.tpu.synchronize(device)
        except RuntimeError:
            pass
    assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()


def checks(device=0):
    return _C._deferred_check_stats(device)


def cpu_error(fn, *args):
    """The message of the CPU kernel's RuntimeError for `fn(*args)` on CPU tensors."""
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    return str(info.value)


# (condition, extra args) pairs that fail; the CPU gives each its own message.
FAILING = [
    pytest.param(torch.tensor(0), (), id="int-no-message"),
    pytest.param(torch.tensor(0.0), ("float is zero",), id="float-message"),
    pytest.param(torch.tensor([False]), ("",), id="bool-empty-message"),
    pytest.param(torch.tensor(-0.0, dtype=torch.bfloat16), ("negative zero",), id="bf16-negative-zero"),
]


def test_passing_assertion_returns_without_waiting_for_the_device():
    a = torch.randn(768, 768) / 28
    x = a.to("tpu")

    def work():
        y = x
        for _ in range(6):
            y = y @ x
        torch._assert_async(torch.isfinite(y).all(), "finite")
        return y

    work()  # compiles every program, so the timed call below only queues work
    torch.tpu.synchronize()
    before = checks()["evaluated"]
    y = work()
    # Neither the matmuls nor the verdict were waited for: the check is pending, work is queued.
    assert checks()["pending"] == 1
    assert checks()["evaluated"] == before
    assert not torch.tpu.current_stream().query()
    torch.tpu.synchronize()
    assert checks() == {"pending": 0, "evaluated": before + 1, "failed": checks()["failed"]}
    ref = a
    for _ in range(6):
        ref = ref @ a
    torch._assert_async(torch.isfinite(ref).all(), "finite")
    assert_close(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value", [torch.tensor(3), torch.tensor([0.5]), torch.tensor(True),
                                   torch.tensor([[7]], dtype=torch.int8), torch.tensor(float("nan"))])
def test_nonzero_values_pass_like_cpu(value):
    torch._assert_async(value, "cpu accepts it")  # the CPU kernel accepts it
    torch._assert_async(value.to("tpu"), "tpu accepts it")
    torch._assert_async(value.to("tpu"))
    torch.tpu.synchronize()
    assert checks()["pending"] == 0


@pytest.mark.parametrize("cond, args", FAILING)
def test_failure_raises_at_synchronize_with_the_cpu_message(cond, args):
    expected = cpu_error(torch._assert_async, cond, *args)
    torch._assert_async(cond.to("tpu"), *args)  # returns: the device has not been asked yet
    assert checks()["pending"] == 1
    with pytest.raises(RuntimeError) as info:
        torch.tpu.synchronize()
    assert expected in str(info.value)
    assert "device-side assertion" in str(info.value)


@pytest.mark.parametrize("read", ["item", "cpu", "print", "tolist"])
def test_failure_raises_at_a_host_read(read, capsys):
    x = torch.arange(4.0)
    expected = cpu_error(torch._assert_async, x.sum() < 0, "sum must be negative")
    xt = x.to("tpu")
    torch._assert_async(xt.sum() < 0, "sum must be negative")
    other = xt * 2  # the read is of another tensor: any blocking read is a synchronization
    with pytest.raises(RuntimeError, match="sum must be negative") as info:
        if read == "item":
            other.sum().item()
        elif read == "cpu":
            other.cpu()
        elif read == "print":
            print(other)
        else:
            other.tolist()
    assert expected in str(info.value)


@pytest.mark.parametrize("cond", [torch.tensor([1, 1]), torch.tensor([]), torch.ones(2, 3)])
@pytest.mark.parametrize("args", [(), ("message",)])
def test_not_one_element_raises_at_the_call_like_cpu(cond, args):
    expected = cpu_error(torch._assert_async, cond, *args)
    with pytest.raises(RuntimeError) as info:
        torch._assert_async(cond.to("tpu"), *args)
    assert str(info.value) == expected
    assert checks()["pending"] == 0


def test_error_does_not_poison_later_work():
    x = torch.randn(5, 3)
    xt = x.to("tpu")
    torch._assert_async((xt > 100).any(), "first")
    with pytest.raises(RuntimeError, match="first"):
        torch.tpu.synchronize()
    # Consumed: the next synchronize is clean, new ops and passing assertions run normally.
    torch.tpu.synchronize()
    torch._assert_async((xt < 100).all(), "passes")
    assert_close(xt.relu() + 1, x.relu() + 1)
    assert (xt.sum() - x.sum().to("tpu")).abs().item() < 1e-5
    # A later failure is reported with its own message, once.
    torch._assert_async(xt.sum() > 1e9, "second")
    with pytest.raises(RuntimeError, match="second") as info:
        xt.sum().item()
    assert "first" not in str(info.value)
    assert_close(xt * 3, x * 3)


def test_first_failure_wins_and_all_are_consumed():
    xt = torch.zeros(2, device="tpu")
    torch._assert_async(xt[0], "one")
    torch._assert_async(xt[1], "two")
    torch._assert_async(xt.sum() == 0, "passes")
    with pytest.raises(RuntimeError, match="one"):
        torch.tpu.synchronize()
    assert checks()["pending"] == 0
    torch.tpu.synchronize()


def test_in_place_change_after_the_call_does_not_change_the_verdict():
    flag = torch.tensor(True, device="tpu")
    torch._assert_async(flag, "checked before the write")
    flag.fill_(False)  # the assertion saw True
    torch.tpu.synchronize()
    torch._assert_async(flag, "now false")
    flag.fill_(True)
    with pytest.raises(RuntimeError, match="now false"):
        torch.tpu.synchronize()


def test_checks_are_per_device():
    torch._assert_async(torch.tensor(0, device="tpu:1"), "device one")
    assert checks(1)["pending"] == 1
    torch.tpu.synchronize(0)  # another device's synchronization does not report it
    with pytest.raises(RuntimeError, match="device one"):
        torch.tpu.synchronize(1)


def test_pending_checks_are_bounded_and_keep_a_failure():
    flag = torch.tensor(True, device="tpu")
    torch._assert_async(torch.tensor(False, device="tpu"), "the oldest one")
    for _ in range(1100):
        torch._assert_async(flag, "passes")
    assert checks()["pending"] <= 1024
    with pytest.raises(RuntimeError, match="the oldest one"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()


def test_debug_mode_raises_at_the_call():
    x = torch.arange(3.0)
    expected = cpu_error(torch._assert_async, x.sum() > 10, "too small")
    with mode("debug"):
        xt = x.to("tpu")
        torch._assert_async(xt.sum() > 0, "passes")
        assert checks()["pending"] == 0
        with pytest.raises(RuntimeError) as info:
            torch._assert_async(xt.sum() > 10, "too small")
        assert str(info.value) == expected
        assert_close(xt + 1, x + 1)


def test_fused_mode_records_the_check_and_raises_at_the_flush():
    x = torch.arange(6.0).reshape(2, 3)
    expected = cpu_error(torch._assert_async, (x * 2).sum() < 0, "fused")
    with mode("fused"):
        xt = x.to("tpu")
        y = xt * 2
        torch._assert_async(y.sum() > 0, "passes")
        assert pending_ops() > 0  # recorded, not flushed by the assertion
        assert checks()["pending"] == 1
        torch.tpu.synchronize()
        y = xt * 2
        torch._assert_async(y.sum() < 0, "fused")
        z = y + 1
        with pytest.raises(RuntimeError) as info:
            z.sum().item()
        assert expected in str(info.value)
        assert_close(z, x * 2 + 1)


def test_fused_training_loop_with_assertions_replays_one_graph():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    data = torch.randn(8, 4)
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict(model.state_dict())
    model.to("tpu")

    def step(m, opt, x):
        pos = torch.arange(x.shape[0], device=x.device)
        torch._assert_async(torch.all(pos <= 16), "position_ids exceed max_valid_pos=16")
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    with mode("fused"):
        xt = data.to("tpu")
        for _ in range(4):
            loss = step(model, opt, xt)
        stats = torch.tpu.compilation_cache_stats()
        value = loss.item()
    for _ in range(4):
        ref_loss = step(ref, ref_opt, data)
    assert abs(value - ref_loss.item()) < 1e-5
    assert stats["fused_graph_replays"] > 0
    assert checks()["pending"] == 0


def test_functional_assert_async_and_dep_token():
    token = aten._make_dep_token(device="tpu")
    assert token.device.type == "tpu"
    x = torch.tensor(2.0, device="tpu")
    out = aten._functional_assert_async.msg(x > 1, "passes", token)
    assert out.device.type == "tpu" and out.shape == token.shape
    expected = cpu_error(aten._functional_assert_async.msg, torch.tensor(2.0) > 3, "functional",
                         aten._make_dep_token())
    aten._functional_assert_async.msg(x > 3, "functional", token)
    with pytest.raises(RuntimeError) as info:
        torch.tpu.synchronize()
    assert expected in str(info.value)


@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_function_checks_on_every_call():
    from torch_tpu.dynamo import graph_runner

    def f(x):
        s = x.sum()
        torch._assert_async(s > 0, "sum must be positive")
        return s * 2

    g = torch.compile(f, backend="tpu", fullgraph=True)  # fullgraph: no graph break
    x = torch.arange(1.0, 4.0)
    expected = cpu_error(f, -x)
    xt = x.to("tpu")
    for _ in range(3):
        out = g(xt)
        assert checks()["pending"] == 1  # queued, not read
        assert_close(out, f(x))
    for _ in range(2):  # the captured program (for -x's layout, the same) is replayed
        out = g(-xt)
        with pytest.raises(RuntimeError) as info:
            out.item()
        assert expected in str(info.value)
    assert graph_runner.stats["replays"] >= 3
    assert graph_runner.stats["captures"] == 1
    assert_close(g(xt), f(x))


@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_training_step_with_assertion():
    def f(x, w):
        y = x @ w
        torch._assert_async(torch.isfinite(y).all(), "finite activations")
        return y.square().mean()

    g = torch.compile(f, backend="tpu", fullgraph=True)
    x, w = torch.randn(4, 3), torch.randn(3, 2)
    wt = w.to("tpu").requires_grad_()
    wc = w.clone().requires_grad_()
    for _ in range(2):
        g(x.to("tpu"), wt).backward()
    f(x, wc).backward()
    f(x, wc).backward()
    assert_close(wt.grad, wc.grad)
    bad = x.clone()
    bad[0, 0] = float("inf")
    g(bad.to("tpu"), wt).backward()
    with pytest.raises(RuntimeError, match="finite activations"):
        torch.tpu.synchronize()


@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_assertion_without_message_is_kept():
    # AOTAutograd would drop aten._assert_async.default as dead code; the backend keeps it.
    def f(x):
        torch._assert_async(x.min() > 0)
        return x + 1

    g = torch.compile(f, backend="tpu", fullgraph=True)
    x = torch.arange(1.0, 4.0)
    expected = cpu_error(f, x - 1)
    assert_close(g(x.to("tpu")), f(x))
    torch.tpu.synchronize()
    g((x - 1).to("tpu"))
    with pytest.raises(RuntimeError) as info:
        torch.tpu.synchronize()
    assert expected in str(info.value)


def test_launch_blocking_environment_raises_at_the_call(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "blocking.py"
    script.write_text(
        "import torch, torch_tpu\n"
        "from torch_tpu.execution_mode import get_mode, EagerMode\n"
        "assert get_mode() == EagerMode.DEBUG\n"
        "x = torch.zeros(1, device='tpu')\n"
        "try:\n"
        "    torch._assert_async(x.sum(), 'blocking')\n"
        "except RuntimeError as e:\n"
        "    print('raised at the call:', e)\n"
        "print('after', (x + 1).item())\n")
    env = dict(os.environ, TPU_LAUNCH_BLOCKING="1", TORCH_TPU_FALLBACK="error")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raised at the call: blocking" in done.stdout
    assert "after 1.0" in done.stdout
