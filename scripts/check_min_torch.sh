#!/usr/bin/env bash
# Compiles torch_tpu's PyTorch-facing sources against the headers of the oldest supported torch
# (2.11 by default) without installing it: the wheel (~530 MB) is downloaded once to
# build/torch-<version>/ and only its headers are used. Not part of CI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
version="${1:-2.11.0}"
dir="build/torch-$version"
if [ ! -d "$dir/torch/include" ]; then
  mkdir -p "$dir"
  .venv/bin/python -m pip download -q --no-deps "torch==$version" -d "$dir"
  (cd "$dir" && unzip -q torch-*.whl 'torch/include/*')
fi
pjrt_inc="$(.venv/bin/python -c 'import importlib.util,os; s=importlib.util.find_spec("xla_plugins.xla_cpu_pjrt"); print(os.path.join(list(s.submodule_search_locations)[0],"include"))')"
py_inc="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
status=0
for f in csrc/device/*.cc csrc/aten/*.cc csrc/distributed/*.cc csrc/compile/*.cc csrc/profiler/*.cc \
         csrc/host_aten/*.cc csrc/python/*.cc; do
  # -include mirrors the build, which force-includes this precompiled header in every file.
  if ! g++ -std=c++17 -fsyntax-only -include csrc/aten/torch_headers.h -I"$dir/torch/include" -I"$dir/torch/include/torch/csrc/api/include" \
       -Icsrc -I"$pjrt_inc" -I"$py_inc" "$f"; then
    echo "torch $version: $f does not compile" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "torch $version: all PyTorch-facing sources compile"
exit $status
