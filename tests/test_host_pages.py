"""TORCH_TPU_HOST_PAGES (runtime/host_pages.h): with the XLA CPU plugin, memory a program frees
stays mapped for the next one ("keep", the default, with every thread on one malloc arena;
"keep-arenas", with glibc's per-thread arenas), instead of being unmapped and faulted in again,
zeroed, on every execution ("release": glibc's defaults). Each case runs in a fresh process,
since the policy is set when the runtime starts."""

import os
import subprocess
import sys

import pytest


PROBE = r"""
import resource, torch, torch_tpu
torch.ones(1, device="tpu")  # starts the runtime, which sets the policy
n = 12 * 1024 * 1024  # 48 MB blocks: above glibc's largest dynamic mmap threshold (32 MB)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(12):  # the heap settles: small allocations land in the first freed blocks (2-3 of them)
    x = torch.full((n,), float(i)); del x
before = faults()
for i in range(8):  # eight reuses: one block faulted in again by chance stays far below release's count
    x = torch.full((n,), float(i))
    assert x[-1].item() == i
    del x
print(faults() - before)
"""


# Programs run on XLA's threads, which allocate; then glibc lists its arenas (on stderr).
ARENAS = r"""
import ctypes, torch, torch_tpu
x = torch.randn(256, 256, device="tpu")
for _ in range(20):
    y = (x @ x).relu().sum()
y.item()
ctypes.CDLL("libc.so.6").malloc_stats()
"""


def run_probe(probe, policy):
    env = dict(os.environ, TORCH_TPU_HOST_PAGES=policy)
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def page_faults(policy):
    return int(run_probe(PROBE, policy).stdout.strip().splitlines()[-1])


def arenas(policy):
    return sum(line.startswith("Arena ") for line in run_probe(ARENAS, policy).stderr.splitlines())


@pytest.mark.parametrize("policy", ["keep", "keep-arenas"])
def test_kept_pages_are_not_faulted_in_again(policy):
    release = page_faults("release")
    # Two things fault kept blocks in again that the policy does not govern. The heap settles: with
    # 6 settling blocks, 7 processes in 10 faulted 1-3 of the measured ones (small allocations still
    # split the blocks just freed, and the heap grew a few more times), with 12 none of 8 did. And
    # the host may reclaim pages on its own: this test machine runs DAMON with a pageout scheme on
    # physical memory (/sys/kernel/mm/damon), which now and then pages out a fresh process's pages
    # within seconds (1 process in 4 faulted 5 of 8 blocks in again). So: the best of 3 processes.
    keep = min(page_faults(policy) for _ in range(3))
    # release: every 48 MB block is a fresh mapping (~12k page faults each); keep: the blocks of
    # this (the main) thread's heap are reused. (Threads with an arena of their own still unmap
    # a secondary heap once it is empty: see runtime/host_pages.h.)
    assert release > 4 * 10_000, release
    assert keep < release / 4, (keep, release)


def test_keep_puts_every_thread_on_one_arena_and_keep_arenas_does_not():
    # "keep": the plugin's threads, started after the policy, share the main heap; "keep-arenas"
    # leaves them their own (less lock contention, docs/design.md).
    assert arenas("keep") == 1
    assert arenas("keep-arenas") > 1


def test_bad_policy_is_a_clear_error():
    env = dict(os.environ, TORCH_TPU_HOST_PAGES="sometimes")
    out = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; torch.ones(1, device='tpu')"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "TORCH_TPU_HOST_PAGES='sometimes' is not one of keep, keep-arenas, release" in out.stderr
