#!/usr/bin/env bash
# Builds the virtual environments of benchmarks/peers.py's peers (never run by CI):
#   .venv-peers-torchtpu  Google's TorchTPU 0.2.0 (same import name as ours, hence its own
#                         environment) on torch 2.13.0, with the XLA CPU PJRT plugin it is
#                         pointed at through TPU_LIBRARY_PATH. libtpu is NOT installed: it asks a
#                         cloud metadata server for the TPU topology when it starts.
#   .venv-peers-xla       PyTorch/XLA 2.9 (PJRT_DEVICE=CPU) on torch 2.9.0 (~7 GB: PyPI's torch
#                         2.9 wheel pulls the CUDA libraries). Skip with PEERS_SKIP_XLA=1.
# Usage: benchmarks/peers/setup_envs.sh [--force]   (--force rebuilds existing environments)
# PYTHON picks the interpreter (default: python3.11). Idempotent: a finished environment is kept.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

# Pins: TorchTPU 0.2.0's declared dependencies minus libtpu, at the versions tested here.
TORCHTPU_PINS=(torch==2.13.0 numpy==2.4.6 absl-py==2.5.1 portpicker==1.6.0 frozendict==2.5.1
               immutabledict==4.3.1 pyzmq==27.3.0 tensorboard==2.21.0
               fastatomstruct-xla-cpu==2026.6.23)
XLA_PINS=(torch==2.9.0 torch-xla==2.9.0 numpy==2.4.6)

# make_env DIR PINS... : creates DIR with the pinned packages, every pin also a constraint so
# that no dependency can replace torch. A stamp file marks a finished environment.
make_env() {
  local dir="$1"; shift
  if [[ -f "$dir/.peers-complete" && $FORCE == 0 ]]; then
    echo "$dir: present (--force rebuilds it)"; return 0
  fi
  rm -rf "$dir"
  "$PYTHON" -m venv "$dir"
  echo '*' > "$dir/.gitignore"  # git ignores the environment even without a top-level rule
  local constraints="$dir/constraints.txt"
  printf '%s\n' "$@" > "$constraints"
  "$dir/bin/pip" install -q --disable-pip-version-check -c "$constraints" "$@"
}

TT="$ROOT/.venv-peers-torchtpu"
make_env "$TT" "${TORCHTPU_PINS[@]}"
if [[ ! -f "$TT/.peers-complete" ]]; then
  # Without its dependencies: they declare libtpu.
  "$TT/bin/pip" install -q --disable-pip-version-check --no-deps -c "$TT/constraints.txt" torch-tpu==0.2.0
  if "$TT/bin/pip" show libtpu >/dev/null 2>&1; then
    echo "error: libtpu got installed into $TT; remove it" >&2; exit 1
  fi
  touch "$TT/.peers-complete"
fi
echo "TorchTPU environment: $TT"

if [[ "${PEERS_SKIP_XLA:-0}" != 1 ]]; then
  XE="$ROOT/.venv-peers-xla"
  make_env "$XE" "${XLA_PINS[@]}"
  touch "$XE/.peers-complete"
  echo "PyTorch/XLA environment: $XE"
fi
