#!/usr/bin/env bash
# Prepares a working tree for the main job: the .venv with the pinned runtime and build
# dependencies (requirements.txt) and the torch_tpu build. Every step is skipped when nothing
# changed. The tests' environments are made by scripts/setup_tests.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
py=.venv/bin/python

req_hash="$(sha256sum requirements.txt | cut -c1-16)"
if [ "$(cat .venv/.requirements-hash 2>/dev/null)" != "$req_hash" ]; then
  echo "setup: installing pinned Python dependencies"
  # pip compiles the packages' bytecode here, once: a process started with
  # PYTHONDONTWRITEBYTECODE=1 (the machines CI runs on set it) never writes it, so without it every
  # test process would compile what it imports from source (`import torch` 7.5 s instead of 3.9 s).
  "$py" -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$req_hash" > .venv/.requirements-hash
fi

# The C++ unit tests are built too when GoogleTest is installed (scripts/setup_tests.sh installs
# it); a build without them is rebuilt once it is there.
src_hash="$(find csrc tests/cpp CMakeLists.txt pyproject.toml -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
want_tests=0
dpkg -s libgtest-dev >/dev/null 2>&1 && want_tests=1
if [ "$(cat build/.source-hash 2>/dev/null)" != "$src_hash" ] || [ ! -f build/py/CMakeCache.txt ] ||
   { [ "$want_tests" = 1 ] && [ ! -x build/py/tpu_core_tests ]; }; then
  echo "setup: building torch_tpu (C++ extension$([ "$want_tests" = 1 ] && echo " and tests"))"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
  mkdir -p build
  echo "$src_hash" > build/.source-hash
fi
