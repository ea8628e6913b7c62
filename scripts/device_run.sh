#!/usr/bin/env bash
# One device call (an NVIDIA GPU machine, run from the repository root), as named steps:
#
#   bash scripts/device_run.sh STEP [STEP ...]
#
#   unpack        the carried CuTe-DSL stack (.cutedsl, packed by ../shared/tools/cutedsl_carry.sh,
#                 unpacked by its carried copy .cutedsl/cutedsl_carry.sh), vLLM's ll_bf16 kernel if
#                 .vllm_ll is carried (../shared/tools/vllm_ll_carry.sh), and .devsite (SGLang's
#                 dense_bf16_gemm_warp_splitk.py in a minimal package) on PYTHONPATH. Without a
#                 carry its backend is unavailable, and the steps say so.
#   versions      GPU, driver, library versions, every backend's availability
#   gpu-tests     every tests/test_*gpu*.py
#   tune          python -m sglang_fp32gemm tune (every backend, every table) into $OUT/tune/;
#                 later bench steps of the same call route with these tables (through
#                 SGLANG_FLYDSL_FP32_GEMM_CONFIG, on top of the packaged ones and of any the
#                 caller named there) and give each
#                 backend column its tuned config. Nothing is written to configs/: commit
#                 $OUT's tables there by hand if they are wanted.
#   tune-serial   python -m sglang_fp32gemm tune --rank serial into $OUT/tune_serial/sm90_serial.csv
#                 (SERIAL_ARGS, SERIAL_TIMEOUT); later steps route with it (calls outside the region)
#   joint         python -m sglang_fp32gemm joint (the tables' kernels timed together in the decode
#                 region; torch rows where they lose) into $OUT/joint/; later steps route with its tables
#   bench:MODES   python -m sglang_fp32gemm bench with MODES, a comma list of graph, det,
#                 eager, decode, region (bench alone: graph) into $OUT/bench/, then the targets check
#   fuzz          python -m sglang_fp32gemm fuzz into $OUT/bench/fuzz.json
#   explain       python -m sglang_fp32gemm explain (plugin enabled) into $OUT/explain.txt
#
# Variables: TUNE_ARGS (default "--budget-s 260"; e.g. "--m 1 2 4 --k 7168"), TUNE_TIMEOUT (290),
# SERIAL_ARGS (default "--budget-s 260"), SERIAL_TIMEOUT (290), JOINT_ARGS (e.g. "--model pro --m 1,2,4"), JOINT_TIMEOUT (240),
# GPU_TESTS (test files, default every tests/test_*gpu*.py), GPU_TESTS_TIMEOUT (240),
# BENCH_ARGS (extra bench options, e.g. "--m 1-32 --k 7168"), BENCH_TIMEOUT (300), FUZZ_CASES (40),
# TUNE_LOG (a tune log or tuned CSV for the backend columns when no tune step ran; default the
# committed docs/benchmarks/h200/tune_log.jsonl.gz).
#
# Everything is written under $OUT (the device's output folder). A device call brings back at
# most 8 files, 2 folders down, so at exit the step folders are packed into $OUT/results.tar.gz;
# $OUT/run.log (this script's output) and the targets verdicts ($OUT/targets.txt) stay beside it.
# Each step runs under `timeout`; plan the steps of one call to end well inside its 10 minutes
# (e.g. unpack versions gpu-tests tune bench:graph: ~10 + 10 + 90 + 290 + 160 s).
set -uo pipefail
: "${OUT:?OUT must name the output folder (the device machine sets it)}"
[ $# -gt 0 ] || { sed -n '2,39p' "$0"; exit 2; }
T0=$(date +%s)
say() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
TUNE_LOG=${TUNE_LOG:-docs/benchmarks/h200/tune_log.jsonl.gz}
exec > >(tee -a "$OUT/run.log") 2>&1

pack() { bash scripts/device_pack.sh; say "done"; }
trap pack EXIT

step_unpack() {
  . scripts/device_env.sh
  return 0
}

step_versions() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -m sglang_fp32gemm bench --versions
  python3 -c "
from sglang_fp32gemm import backends
for b in backends.all_backends():
    print('backend', b.name, b.libtype, b.available())" 2>&1 | tail -n 8
}

step_gpu_tests() {
  mkdir -p "$OUT/tests"
  timeout -k 5 "${GPU_TESTS_TIMEOUT:-240}" python3 -m pytest -v --durations=12 -p no:cacheprovider -n 0 ${GPU_TESTS:-tests/test_*gpu*.py} > "$OUT/tests/pytest_gpu.txt" 2>&1
  echo "pytest rc=$?"; tail -n 8 "$OUT/tests/pytest_gpu.txt"
}

step_tune() {
  local d=$OUT/tune
  mkdir -p "$d"
  # shellcheck disable=SC2086
  timeout -k 10 "${TUNE_TIMEOUT:-290}" python3 -m sglang_fp32gemm tune ${TUNE_ARGS:---budget-s 260} \
    --out "$d/sm90.csv" --out-det "$d/sm90_deterministic.csv" --out-eager "$d/sm90_eager.csv" \
    --summary "$d/tune_summary.json" \
    --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
  echo "tune rc=$?"; grep -v '^\[' "$d/tune.txt" | tail -n 6 | cut -c1-200
  TUNE_LOG=$d/tune_log.jsonl.gz
  use_tables "$d/sm90.csv" "$d/sm90_deterministic.csv" "$d/sm90_eager.csv"
}

step_tune_serial() {
  local d=$OUT/tune_serial
  mkdir -p "$d"
  # shellcheck disable=SC2086
  timeout -k 10 "${SERIAL_TIMEOUT:-290}" python3 -m sglang_fp32gemm tune --rank serial ${SERIAL_ARGS:---budget-s 260} \
    --out "$d/sm90_serial.csv" --summary "$d/tune_summary.json" \
    --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
  echo "tune-serial rc=$?"; grep -v '^\[' "$d/tune.txt" | tail -n 6 | cut -c1-200
  use_tables "$d/sm90_serial.csv"
}

# Later steps of this call route with these tables (the non-empty ones), on top of any the caller named.
use_tables() {
  local t new=()
  for t in "$@"; do [ -s "$t" ] && new+=("$t"); done
  [ ${#new[@]} -gt 0 ] || return 0
  if python3 -c "import sys; from sglang_fp32gemm.table import TunedTables as T; t = T.load(sys.argv[1:]); \
print(len(t.fast), 'fast,', len(t.deterministic), 'deterministic,', len(t.eager), 'eager and', len(t.serial), 'serial rows load')" "${new[@]}"; then
    # later files override earlier ones
    export SGLANG_FLYDSL_FP32_GEMM_CONFIG=${SGLANG_FLYDSL_FP32_GEMM_CONFIG:+$SGLANG_FLYDSL_FP32_GEMM_CONFIG:}$(IFS=:; echo "${new[*]}")
  else
    echo "THE NEW TABLES DO NOT LOAD: later steps route without them"
  fi
}

step_joint() {
  local d=$OUT/joint
  mkdir -p "$d"
  # shellcheck disable=SC2086
  timeout -k 10 "${JOINT_TIMEOUT:-240}" python3 -m sglang_fp32gemm joint ${JOINT_ARGS:-} --out "$d/sm90_joint.csv" \
    --out-eager "$d/sm90_joint_eager.csv" --json "$d/joint.json" > "$d/joint.txt" 2>&1
  echo "joint rc=$?"; cut -c1-220 "$d/joint.txt" | tail -n 24
  use_tables "$d/sm90_joint.csv" "$d/sm90_joint_eager.csv"
}

step_bench() {
  local d=$OUT/bench flags="" m
  mkdir -p "$d"
  for m in $(echo "${1:-graph}" | tr ',' ' '); do
    case $m in
      graph) flags+=" --graph" ;; det) flags+=" --deterministic" ;; eager) flags+=" --eager" ;;
      decode) flags+=" --decode-seq" ;; region) flags+=" --region" ;;
      *) echo "bench: unknown mode $m (graph, det, eager, decode, region)"; return 2 ;;
    esac
  done
  local logarg=""
  [ -f "$TUNE_LOG" ] && logarg="--tune-log $TUNE_LOG" || echo "no $TUNE_LOG: backend columns use first candidates"
  # shellcheck disable=SC2086
  timeout -k 10 "${BENCH_TIMEOUT:-300}" python3 -m sglang_fp32gemm bench $flags $logarg ${BENCH_ARGS:-} \
    --out-dir "$d" > "$d/bench.txt" 2>&1
  echo "bench rc=$?"; sed -n '/^== /,$p' "$d/bench.txt" | cut -c1-170 | tail -n 40
  python3 -m sglang_fp32gemm.tools.targets "$d" --limit 3 --json "$d/targets.json" > "$OUT/targets.txt" 2>&1
  cut -c1-200 "$OUT/targets.txt"
}

step_fuzz() {
  mkdir -p "$OUT/bench"
  timeout -k 5 60 python3 -m sglang_fp32gemm fuzz --cases "${FUZZ_CASES:-40}" --out "$OUT/bench/fuzz.json" \
    > "$OUT/bench/fuzz.txt" 2>&1
  echo "fuzz rc=$?"; tail -n 1 "$OUT/bench/fuzz.txt" | cut -c1-300
}

step_explain() {
  SGLANG_ENABLE_FLYDSL_FP32_GEMM=1 timeout 300 python3 -m sglang_fp32gemm explain --max-m 32 > "$OUT/explain.txt" 2>&1
  echo "explain rc=$?"
}

for s in "$@"; do
  name=${s%%:*}; arg=""; [ "$name" != "$s" ] && arg=${s#*:}
  say "$s"
  case $name in
    unpack) step_unpack ;; versions) step_versions ;; gpu-tests) step_gpu_tests ;; tune) step_tune ;;
    tune-serial) step_tune_serial ;;
    bench) step_bench "$arg" ;; fuzz) step_fuzz ;; explain) step_explain ;; joint) step_joint ;;
    *) echo "unknown step $s (unpack versions gpu-tests tune tune-serial joint bench:MODES fuzz explain)"; exit 2 ;;
  esac
done
