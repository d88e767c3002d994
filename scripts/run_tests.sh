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
exec .venv/bin/python -m pytest -q --durations=20 "$@"
