#!/usr/bin/env bash
# Device check on a machine with one NVIDIA GPU: builds torch_tpu against the system's torch,
# runs the device-generic tests on the XLA CUDA plugin, then the GPU Llama benchmark. Everything
# lands in OUTDIR; the whole run is bounded (DEVICE_CHECK_BUDGET_S, default 480 s).
#
#   scripts/device_check.sh OUTDIR                 # the GPU machine (TORCH_TPU_PLATFORM=cuda)
#   scripts/device_check.sh --cpu-dry-run OUTDIR   # here: CPU plugin, existing .venv, tiny model
#   (DEVICE_CHECK_DRY_RUN=1 is the same as --cpu-dry-run)
#
# The GPU machine is expected to have Python 3.12 with torch (CUDA) installed system-wide, JAX's
# CUDA PJRT plugin (jax-cuda13-pjrt or -cuda12-), a C++17 compiler, cmake, and no network: nothing
# is downloaded. The build needs the PJRT C API header (pjrt_c_api.h), which ships in the
# xla-cpu-pjrt wheel, not in JAX's plugin: it is looked for in PJRT_C_API_INCLUDE_DIR, the
# xla-cpu-pjrt package, shared/ and the Python path; the script stops with a clear message when
# any prerequisite is missing.
#
# OUTDIR gets: summary.json (one entry per phase: status, seconds), env.txt, build.log,
# tests.log (each test file in a pytest process of its own, so a crash loses one file), tests.xml
# (JUnit, every file's), bench.log, gpu_llama.json and gpu_llama.md.
# Environment: DEVICE_CHECK_TESTS="tests/a.py tests/b.py" replaces the test list;
# DEVICE_CHECK_TEST_WORKERS sets how many test files run at a time (4 on a GPU, 1 in the dry run);
# DEVICE_CHECK_BENCH_ARGS adds arguments to benchmarks/gpu_llama.py; PYTHON picks the
# interpreter (default python3, or .venv/bin/python in the dry run).
set -uo pipefail

dry_run="${DEVICE_CHECK_DRY_RUN:-0}"
out=""
for arg in "$@"; do
  case "$arg" in
    --cpu-dry-run) dry_run=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "device_check: unknown option $arg" >&2; exit 64 ;;
    *) out="$arg" ;;
  esac
done
if [ -z "$out" ]; then
  echo "usage: scripts/device_check.sh [--cpu-dry-run] OUTDIR" >&2
  exit 64
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
budget="${DEVICE_CHECK_BUDGET_S:-480}"
start=$(date +%s)
summary="$out/summary.json"
phases=()

left() { echo $(( budget - ($(date +%s) - start) )); }

# record NAME STATUS SECONDS DETAIL
record() {
  local detail="${4//\\/\\\\}"
  detail="${detail//\"/\\\"}"
  phases+=("{\"phase\": \"$1\", \"status\": \"$2\", \"seconds\": $3, \"detail\": \"$detail\"}")
  {
    echo "{"
    echo "  \"mode\": \"$([ "$dry_run" = 1 ] && echo cpu-dry-run || echo gpu)\","
    echo "  \"platform\": \"${TORCH_TPU_PLATFORM:-}\","
    echo "  \"phases\": ["
    local i
    for i in "${!phases[@]}"; do
      if [ "$i" -lt $(( ${#phases[@]} - 1 )) ]; then echo "    ${phases[$i]},"; else echo "    ${phases[$i]}"; fi
    done
    echo "  ]"
    echo "}"
  } > "$summary"
  echo "device_check: $1: $2 ($3 s) $4"
}

fail() {  # fail PHASE MESSAGE: records, explains and stops
  record "$1" failed 0 "$2"
  echo "device_check: $1 FAILED: $2" >&2
  exit 1
}

# ---- settings per mode ----------------------------------------------------------------------
if [ "$dry_run" = 1 ]; then
  export TORCH_TPU_PLATFORM="${TORCH_TPU_PLATFORM:-cpu}"
  py="${PYTHON:-$root/.venv/bin/python}"
  tests="${DEVICE_CHECK_TESTS:-tests/test_device_facts.py}"
  bench_args="--config tiny --steps 1 --warmup 1 --dispatch-iters 100 --ref-device cpu"
  test_timeout=120
  bench_timeout=150
  verbosity=-q
  workers="${DEVICE_CHECK_TEST_WORKERS:-1}"
else
  export TORCH_TPU_PLATFORM="${TORCH_TPU_PLATFORM:-cuda}"
  py="${PYTHON:-python3}"
  # Device-generic tests: the device API, ops, autograd, training, compile, modes, memory facts,
  # TF32 policy. Integration tests follow only when their package is installed.
  tests="${DEVICE_CHECK_TESTS:-tests/test_device_facts.py tests/test_tf32_policy.py tests/test_device_api.py
    tests/test_memory_stats.py tests/test_transfers.py tests/test_dtypes.py tests/test_views.py
    tests/test_ops_basic.py tests/test_autograd.py tests/test_rng.py tests/test_training.py
    tests/test_execution_modes.py tests/test_fused_eager.py tests/test_compile.py
    tests/test_serialization.py tests/test_autocast.py tests/test_fallback.py}"
  if [ -z "${DEVICE_CHECK_TESTS:-}" ]; then
    for pair in transformers:test_eco_transformers.py diffusers:test_eco_diffusers.py; do
      "$py" -c "import ${pair%%:*}" >/dev/null 2>&1 && tests="$tests tests/${pair##*:}"
    done
  fi
  bench_args="--ref-device cuda"
  test_timeout=200
  bench_timeout=240
  # One line per test as it finishes: a run stopped at its limit still says what passed.
  verbosity=-v
  # Test files at a time (each its own process and PJRT client; the plugin's pool grows on demand).
  workers="${DEVICE_CHECK_TEST_WORKERS:-4}"
  # torch's caching allocator and XLA's pool share the GPU: XLA grows its pool on demand.
  export TORCH_TPU_GPU_PREALLOCATE="${TORCH_TPU_GPU_PREALLOCATE:-0}"
fi
bench_args="$bench_args ${DEVICE_CHECK_BENCH_ARGS:-}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
command -v "$py" >/dev/null 2>&1 || [ -x "$py" ] || fail prerequisites "no Python interpreter '$py' (set PYTHON=...)"

# ---- environment ----------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "mode: $([ "$dry_run" = 1 ] && echo cpu-dry-run || echo gpu)  TORCH_TPU_PLATFORM=$TORCH_TPU_PLATFORM"
  echo "python: $("$py" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
  echo "cores: $(nproc 2>/dev/null)"
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$py" -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda, "gpu available:", torch.cuda.is_available())' 2>&1
  # The plugin torch_tpu will load (pure-Python discovery, nothing imported).
  "$py" - <<'EOF' 2>&1
import importlib.util, os
spec = importlib.util.spec_from_file_location("_plugin", os.path.join("torch_tpu", "_plugin.py"))
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
p = m.requested_platform()
found = m.find_plugin(p)
print("plugin:", p, found[1] if found else "NOT FOUND - " + m.not_found_message(p))
EOF
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

# ---- build ----------------------------------------------------------------------------------
find_pjrt_header() {
  local d
  # The header of this checkout's own venv travels to the device machine when `carry` names it
  # (.venv/lib/python3.11/site-packages/xla_plugins/xla_cpu_pjrt/include, a few hundred KB).
  for d in "${PJRT_C_API_INCLUDE_DIR:-}" "$root"/.venv/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/include \
           "$("$py" -c 'import importlib.util,os; s=importlib.util.find_spec("xla_plugins.xla_cpu_pjrt"); print(os.path.join(list(s.submodule_search_locations)[0],"include"))' 2>/dev/null)"; do
    [ -n "$d" ] && [ -f "$d/pjrt_c_api.h" ] && { echo "$d"; return 0; }
  done
  local f
  # shared/ (copied to the device machine alongside the tree), then the Python path.
  for d in "$root/shared" $("$py" -c 'import sys,os; print(" ".join(p for p in sys.path if os.path.isdir(p)))' 2>/dev/null); do
    f="$(find "$d" -maxdepth 8 -name pjrt_c_api.h -path '*pjrt*' 2>/dev/null | head -1)"
    [ -n "$f" ] && { dirname "$f"; return 0; }
  done
  return 1
}

t0=$(date +%s)
if [ "$dry_run" = 1 ]; then
  "$py" -c 'import torch_tpu._C' >/dev/null 2>&1 \
    || fail build "dry run: $py cannot import torch_tpu._C (build it first: scripts/setup.sh)"
  record build skipped 0 "dry run uses the existing venv ($py)"
else
  build="$root/build/device"
  venv="$build/venv"
  missing=()
  command -v cmake >/dev/null 2>&1 || missing+=("cmake (apt-get install cmake, or pip install cmake from a wheel)")
  command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || missing+=("a C++17 compiler (g++)")
  "$py" -c 'import sysconfig,os,sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"],"Python.h")) else 1)' \
    || missing+=("Python headers (python3-dev / python3.12-dev)")
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$py" -c 'import torch,os,sys; sys.exit(0 if os.path.isdir(os.path.join(os.path.dirname(torch.__file__),"share","cmake","Torch")) else 1)' \
    || missing+=("torch with its CMake files (torch/share/cmake/Torch)")
  grep -q "NOT FOUND" "$out/env.txt" && missing+=("the PJRT plugin of platform $TORCH_TPU_PLATFORM (env.txt says what was searched)")
  pjrt_inc="$(find_pjrt_header)" || missing+=("pjrt_c_api.h: pip install xla-cpu-pjrt (ships it), copy it to shared/pjrt/include/, or set PJRT_C_API_INCLUDE_DIR")
  if [ ${#missing[@]} -gt 0 ]; then
    fail build "missing build prerequisites: $(IFS=';'; echo "${missing[*]}")"
  fi
  # The build may use what the tests and benchmark do not need; an incremental rebuild (the
  # build/device folder kept from an earlier run) takes seconds.
  build_limit=$(( $(left) - 120 ))
  [ $build_limit -lt 30 ] && build_limit=30
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  {
    echo "PJRT C API header: $pjrt_inc/pjrt_c_api.h"
    # A venv over the system site-packages: torch and the plugin come from the system, torch_tpu
    # from this tree (a .pth line) with its entry points (a dist-info), nothing downloaded.
    [ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages --without-pip "$venv"
    # When python3 is itself a venv (the GPU machine's is /opt/torch/.venv), "system site" means
    # the base interpreter's: name the parent's site-packages explicitly, or torch is not found.
    "$py" -c 'import site; print("\n".join(site.getsitepackages()))' \
      > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/parent_site.pth"
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 cmake -S "$root" -B "$build/cmake" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DTPU_BUILD_TESTS=OFF -DPython3_EXECUTABLE="$venv/bin/python" -DPJRT_C_API_INCLUDE_DIR="$pjrt_inc" \
      && TORCH_DEVICE_BACKEND_AUTOLOAD=0 timeout "$build_limit" cmake --build "$build/cmake" -j "$(nproc)"
  } > "$out/build.log" 2>&1
  rc=$?
  so="$(ls "$build"/cmake/_C*.so 2>/dev/null | head -1)"
  if [ $rc -ne 0 ] || [ -z "$so" ]; then
    tail -30 "$out/build.log" >&2
    fail build "cmake build failed (rc $rc): see build.log"
  fi
  cp "$so" "$root/torch_tpu/"  # ignored by git (*.so); the package is imported from this tree
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$root" > "$site/torch_tpu_device_check.pth"
  mkdir -p "$site/torch_tpu-0.1.0.dist-info"
  printf 'Metadata-Version: 2.1\nName: torch_tpu\nVersion: 0.1.0\n' > "$site/torch_tpu-0.1.0.dist-info/METADATA"
  printf '[torch.backends]\ntorch_tpu = torch_tpu._loader:load\n\n[torch_dynamo_backends]\ntpu = torch_tpu.dynamo:tpu_backend\n' \
    > "$site/torch_tpu-0.1.0.dist-info/entry_points.txt"
  py="$venv/bin/python"
  "$py" -c 'import torch, torch_tpu; print("tpu devices:", torch.tpu.device_count(), torch.tpu.get_device_name())' \
    >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log" >&2; fail build "the built torch_tpu does not load on platform $TORCH_TPU_PLATFORM: see build.log"; }
  record build ok $(( $(date +%s) - t0 )) "$(tail -1 "$out/build.log")"
fi

# ---- tests ----------------------------------------------------------------------------------
t0=$(date +%s)
limit=$(( $(left) - bench_timeout ))
[ $limit -gt $test_timeout ] && limit=$test_timeout
if [ $limit -lt 20 ]; then
  record tests skipped 0 "no time left in the ${budget}s budget"
elif ! "$py" -c 'import pytest' >/dev/null 2>&1; then
  record tests skipped 0 "pytest is not installed for $py (nothing can be downloaded here): install it system-wide"
else
  # One pytest process per file, up to $workers at a time: a file that crashes the interpreter
  # (a segfault) loses only its own results, and on a GPU machine's many cores the files that
  # spend their time compiling run side by side. Each file's JUnit report is merged into
  # tests.xml, its log appended to tests.log in the list's order.
  mkdir -p "$out/junit" "$out/logs"
  run_file() {  # INDEX FILE SECONDS
    timeout -k 10 "$3" "$py" -m pytest "$2" "$verbosity" --tb=short -rfE -p no:cacheprovider \
      --junitxml="$out/junit/$1.xml" > "$out/logs/$1.log" 2>&1
    echo $? > "$out/logs/$1.rc"
  }
  i=0
  for f in $tests; do
    i=$((i + 1))
    idx=$(printf %03d $i)
    echo "$f" > "$out/logs/$idx.name"
    while [ "$(jobs -rp | wc -l)" -ge "$workers" ]; do wait -n; done
    file_left=$(( limit - ($(date +%s) - t0) ))
    [ $file_left -ge 10 ] && run_file "$idx" "$f" "$file_left" &
  done
  wait
  : > "$out/tests.log"
  crashed=() not_run=() failed_files=()
  for name_file in "$out"/logs/*.name; do
    idx="$(basename "$name_file" .name)"
    f="$(cat "$name_file")"
    if [ ! -f "$out/logs/$idx.rc" ]; then
      not_run+=("$f")
      continue
    fi
    { echo "=== $f"; cat "$out/logs/$idx.log"; } >> "$out/tests.log"
    case "$(cat "$out/logs/$idx.rc")" in
      0|5) ;;  # 5: nothing collected
      1) failed_files+=("$f") ;;
      124|137) not_run+=("$f (stopped at the time limit)") ;;
      *) crashed+=("$f") ;;
    esac
  done
  rm -rf "$out/logs"
  counts="$("$py" - "$out/junit" "$out/tests.xml" <<'PYEOF'
import glob, os, sys
import xml.etree.ElementTree as ET
root = ET.Element("testsuites")
total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.xml"))):
    suites = ET.parse(path).getroot()
    for suite in ([suites] if suites.tag == "testsuite" else list(suites)):
        root.append(suite)
        for k in total:
            total[k] += int(suite.get(k, 0))
ET.ElementTree(root).write(sys.argv[2])
passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
print(f"{passed} passed, {total['failures']} failed, {total['errors']} errors, {total['skipped']} skipped")
PYEOF
)"
  rm -rf "$out/junit"
  detail="$counts"
  [ ${#failed_files[@]} -gt 0 ] && detail="$detail; failures in: ${failed_files[*]}"
  [ ${#crashed[@]} -gt 0 ] && detail="$detail; crashed (no report): ${crashed[*]}"
  [ ${#not_run[@]} -gt 0 ] && detail="$detail; not run: ${not_run[*]}"
  grep -v cpu_aot_loader "$out/tests.log" | grep -E "^(FAILED|ERROR) " | head -40
  if [ ${#crashed[@]} -gt 0 ] || [ ${#failed_files[@]} -gt 0 ]; then
    record tests failed $(( $(date +%s) - t0 )) "$detail"
  elif [ ${#not_run[@]} -gt 0 ]; then
    record tests timeout $(( $(date +%s) - t0 )) "stopped after ${limit}s: $detail"
  else
    record tests ok $(( $(date +%s) - t0 )) "$detail"
  fi
fi

# ---- benchmark ------------------------------------------------------------------------------
t0=$(date +%s)
limit=$(left)
[ $limit -gt $bench_timeout ] && limit=$bench_timeout
if [ $limit -lt 20 ]; then
  record bench skipped 0 "no time left in the ${budget}s budget"
else
  # shellcheck disable=SC2086
  timeout -k 10 "$limit" "$py" benchmarks/gpu_llama.py $bench_args --out "$out" > "$out/bench.log" 2>&1
  rc=$?
  grep -v cpu_aot_loader "$out/bench.log" | tail -8
  case $rc in
    0) record bench ok $(( $(date +%s) - t0 )) "$(grep -c 'ms/step' "$out/bench.log") contenders" ;;
    2) record bench failed $(( $(date +%s) - t0 )) "losses disagree between contenders (bench.log)" ;;
    124|137) record bench timeout $(( $(date +%s) - t0 )) "stopped after ${limit}s" ;;
    *) record bench failed $(( $(date +%s) - t0 )) "rc $rc (bench.log)" ;;
  esac
fi

echo "device_check: done in $(( $(date +%s) - start )) s; results in $out"
grep -q '"status": "failed"\|"status": "timeout"' "$summary" && exit 1
exit 0
