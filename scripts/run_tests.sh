#!/usr/bin/env bash
# The whole test suite: set up every environment the tests use (if needed), C++ unit tests
# (CTest), then the Python tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup_tests.sh"
cd "$root"
echo "== C++ unit tests"
# A hung test fails after 300 s instead of holding CI to its limit.
ctest --test-dir build/py --output-on-failure --timeout 300 -j "$(nproc)"
echo "== Python tests"
# One worker process per core, at most one per 8 GiB of available memory (the serving and
# ecosystem tests start model servers of a few GiB), each running whole test files in order
# (--dist loadfile: a file's fixtures and order as in a serial run). Most of a cold run is XLA
# compiling programs on one core, so two workers on two cores nearly halve it. The tests marked
# `timing` (wall-clock or CPU-share assertions) run after, in one process with the machine to
# themselves. TORCH_TPU_TEST_WORKERS overrides the count (1: everything serially, one process).
mem_gib=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
workers=${TORCH_TPU_TEST_WORKERS:-$(( $(nproc) < mem_gib / 8 ? $(nproc) : mem_gib / 8 ))}
if [ "$workers" -le 1 ]; then
  exec .venv/bin/python -m pytest -q --durations=20 "$@"
fi
# pytest's exit status 5 means the arguments selected no test in that pass.
passed() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
parallel=0
.venv/bin/python -m pytest -q --durations=20 -n "$workers" --dist loadfile -m "not timing" "$@" || parallel=$?
echo "== Python tests marked timing (alone)"
timing=0
.venv/bin/python -m pytest -q --durations=5 -m timing "$@" || timing=$?
if passed "$parallel" && passed "$timing" && ! { [ "$parallel" -eq 5 ] && [ "$timing" -eq 5 ]; }; then
  exit 0
fi
exit 1
