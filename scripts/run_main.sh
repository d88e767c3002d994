#!/usr/bin/env bash
# The main job: set up (if needed), build (if needed), then train a model on the `tpu` device.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/python examples/train_llama.py "$@"
