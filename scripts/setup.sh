#!/usr/bin/env bash
# Prepares a working tree: system packages the C++ tests need, the .venv with the pinned
# Python dependencies, and the torch_tpu build. Every step is skipped when nothing changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# GoogleTest and protoc (C++ unit tests) from Debian.
missing=()
for pkg in libgtest-dev protobuf-compiler; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
py=.venv/bin/python

req_hash="$(cat requirements.txt requirements-nodeps.txt | sha256sum | cut -c1-16)"
if [ "$(cat .venv/.requirements-hash 2>/dev/null)" != "$req_hash" ]; then
  echo "setup: installing pinned Python dependencies"
  "$py" -m pip install -q --disable-pip-version-check -r requirements.txt
  "$py" -m pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
  echo "$req_hash" > .venv/.requirements-hash
fi

src_hash="$(find csrc tests/cpp CMakeLists.txt pyproject.toml -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
if [ "$(cat build/.source-hash 2>/dev/null)" != "$src_hash" ] || [ ! -x build/py/tpu_core_tests ]; then
  echo "setup: building torch_tpu (C++ extension and tests)"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
  mkdir -p build
  echo "$src_hash" > build/.source-hash
fi

# Serving: vLLM's CPU build pins an older Transformers than requirements.txt, so it gets its own
# environment (.venv-serve) that links the torch_tpu just built (scripts/setup_serving.sh).
"$root/scripts/setup_serving.sh"
