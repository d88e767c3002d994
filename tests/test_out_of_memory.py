"""Running out of device memory: a per-process cap (TORCH_TPU_MEMORY_LIMIT, or
torch.tpu.set_per_process_memory_fraction) raises torch.OutOfMemoryError before anything is
allocated - in Strict, Fused and compiled code - and so does the plugin's own out-of-memory
error, surfacing at a host read. The error names the figures and the fix, and the process stays
usable: free tensors, retry smaller, and the results equal the CPU's. Each case runs in a fresh
interpreter (the cap is process state) with a hard timeout."""

import pathlib
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import torch, torch_tpu

def expect_oom(fn, *needles):
    try:
        fn()
    except torch.tpu.OutOfMemoryError as e:  # the same class as torch.OutOfMemoryError
        message = str(e)
        for needle in needles + ("Fix:",):
            assert needle in message, (needle, message)
        return message
    raise AssertionError("no torch.OutOfMemoryError")
"""


def run(body, **env):
    import os

    full = {**os.environ, "TORCH_TPU_CACHE_DIR": "disabled", **env}
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=full, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


MIB = 1 << 20


def test_a_byte_cap_raises_before_allocating_and_the_process_goes_on():
    run(f"""
    assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError
    held = []
    def fill():
        while True:
            held.append(torch.ones(4 * {MIB} // 4, device="tpu"))  # 4 MiB each
    expect_oom(fill, "tried to allocate 4.00 MiB on tpu:0", "may hold 64.00 MiB", "TORCH_TPU_MEMORY_LIMIT")
    assert len(held) == 16 and torch.tpu.memory_allocated() == 64 * {MIB}
    # A storage grown past the cap is refused too, and keeps its size.
    s = held[0].untyped_storage()
    expect_oom(lambda: s.resize_(8 * {MIB}), "tried to allocate 4.00 MiB")
    assert s.nbytes() == 4 * {MIB}
    del held, s
    torch.tpu.empty_cache()
    x = torch.arange(1000.0)
    torch.testing.assert_close((x.to("tpu") * 3 + 1).cpu(), x * 3 + 1)
    """, TORCH_TPU_MEMORY_LIMIT="64M")


def test_the_cap_holds_in_fused_eager_and_compiled_code():
    run(f"""
    x = torch.randn(1024, 1024)  # 4 MiB
    d = x.to("tpu")
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_AND_FUSE
    assert torch_tpu._C._pending_ops() == 0
    outs = []
    expect_oom(lambda: [outs.append(d * i) for i in range(32)], "tried to allocate 4.00 MiB")
    assert len(outs) < 32 and torch_tpu._C._pending_ops() > 0  # recorded, not run: the cap held in Fused
    del outs
    torch.testing.assert_close((d * 2).sum().cpu(), (x * 2).sum(), rtol=1e-4, atol=1e-2)  # 1M-term sums

    def many(t):
        return [t * i for i in range(32)]
    compiled = torch.compile(many, backend="tpu")
    expect_oom(lambda: compiled(d), "tried to allocate 4.00 MiB")
    small = torch.randn(8, 8)
    for got, want in zip(compiled(small.to("tpu")), many(small)):
        torch.testing.assert_close(got.cpu(), want)
    """, TORCH_TPU_MEMORY_LIMIT="48MiB")


def test_a_memory_fraction_caps_one_device():
    run(f"""
    total = torch.tpu.mem_get_info()[1]
    fraction = 32 * {MIB} / total
    torch.tpu.set_per_process_memory_fraction(fraction)
    assert torch.tpu.get_per_process_memory_fraction() == fraction
    assert torch.tpu.get_per_process_memory_fraction(1) == 1.0
    message = expect_oom(lambda: torch.empty(64 * {MIB}, dtype=torch.uint8, device="tpu"),
                         "tried to allocate 64.00 MiB", "set_per_process_memory_fraction")
    other = torch.empty(64 * {MIB}, dtype=torch.uint8, device="tpu:1")  # the other device has no cap
    for bad in (0, 1.5, -0.1):
        try:
            torch.tpu.set_per_process_memory_fraction(bad)
        except ValueError as e:
            assert "(0, 1]" in str(e)
        else:
            raise AssertionError(bad)
    torch.tpu.set_per_process_memory_fraction(1.0)  # no cap
    again = torch.empty(64 * {MIB}, dtype=torch.uint8, device="tpu")
    """)


def test_a_malformed_limit_is_a_clear_error():
    out = run("""
    try:
        torch.ones(3, device="tpu")
    except RuntimeError as e:
        print(e)
    """, TORCH_TPU_MEMORY_LIMIT="lots")
    assert "TORCH_TPU_MEMORY_LIMIT='lots' is not a memory size" in out and "Fix:" in out


@pytest.mark.skipif(pathlib.Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1",
                    reason="with vm.overcommit_memory=1 the kernel grants any allocation and kills the process "
                           "when it is touched, so the plugin never reports running out")
def test_the_plugins_own_out_of_memory_error_surfaces_at_a_read_once():
    run("""
    huge = torch.ones(2 ** 38, device="tpu")  # 1 TiB: more than the host has
    message = expect_oom(lambda: huge[0].item(), "tpu out of memory on tpu:0", "RESOURCE_EXHAUSTED",
                         "TORCH_TPU_MEMORY_LIMIT")
    del huge
    torch.tpu.synchronize()  # reported once: the process goes on
    x = torch.arange(10.0)
    torch.testing.assert_close((x.to("tpu") + 1).cpu(), x + 1)
    """)
