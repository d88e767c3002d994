#!/usr/bin/env bash
# Prepares everything the tests use, on top of the main job's set-up (scripts/setup.sh):
# GoogleTest and protoc (C++ unit tests) from Debian, the tests' Python dependencies in .venv,
# the C++ tests, and the serving environment (.venv-serve: vLLM's CPU build and SGLang) that
# links the torch_tpu built in .venv. Every step is skipped when nothing changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

missing=()
for pkg in libgtest-dev protobuf-compiler; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_tests: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The serving environment's packages (scripts/setup_serving.sh) need nothing from the torch_tpu
# build: they install in the background while it compiles, and linking torch_tpu into it comes
# last. On 2 cores that saves ~50 s of a cold set-up, not the install's 3.5 minutes: pip's
# unpacking and bytecode compilation take cores from the build (434 s alone, 593 s beside it).
serve_log="$(mktemp)"
"$root/scripts/setup_serving.sh" --packages-only >"$serve_log" 2>&1 &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; rm -f "$serve_log"' EXIT

"$root/scripts/setup.sh"
py=.venv/bin/python
req_hash="$(cat requirements.txt requirements-test.txt requirements-nodeps.txt | sha256sum | cut -c1-16)"
if [ "$(cat .venv/.test-requirements-hash 2>/dev/null)" != "$req_hash" ]; then
  echo "setup_tests: installing the tests' pinned Python dependencies"
  "$py" -m pip install -q --disable-pip-version-check -c requirements.txt -r requirements-test.txt
  "$py" -m pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
  echo "$req_hash" > .venv/.test-requirements-hash
fi

# Serving: vLLM's CPU build pins an older Transformers than requirements-test.txt, so it gets its
# own environment (.venv-serve) that links the torch_tpu just built (scripts/setup_serving.sh).
if ! wait "$serve_pid"; then
  cat "$serve_log" >&2
  echo "setup_tests: installing the serving environment's packages failed (above)" >&2
  exit 1
fi
cat "$serve_log"
"$root/scripts/setup_serving.sh"
