# Sourced by run 20's device scripts (from the repository root): the carries on PYTHONPATH, the versions
# line, and region_ab, the A/B of the whole V4-Pro region that decides whether tuned rows ship.
: "${OUT:?OUT must name the output folder (the device machine sets it)}"
. scripts/device_env.sh
# The output log, and every folder packed at exit (scripts/device_pack.sh: the 8-file limit).
exec > >(tee -a "$OUT/run.log") 2>&1
trap "bash scripts/device_pack.sh" EXIT
python3 -m sglang_fp32gemm bench --versions | tr -d '\n' | cut -c1-400; echo

# region_ab TABLES SECONDS BENCH_ARGS...: A = TABLES (a :-list) laid over the packaged tables, B = the packaged
# tables alone; A B A B, one process each, 3 rounds, Triton's best form as the backend column; V4-Pro unless
# BENCH_ARGS names --region-model (the last one given counts). Out: $OUT/ab/.
region_ab() {
  local tables=$1 seconds=$2 i v o cfg
  shift 2
  for i in 1 2; do
    for v in A B; do
      o=$OUT/ab/$v$i; mkdir -p "$o"
      cfg=$tables; [ $v = B ] && cfg=
      SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout -k 5 "$seconds" python3 -m sglang_fp32gemm bench --region \
        --region-model pro --region-rounds 3 --backends triton --tune-log docs/benchmarks/h200/tune_log.jsonl.gz \
        "$@" --out-dir "$o" > "$o/bench.txt" 2>&1
      echo "$v$i rc=$?"; grep -E "^versions|\] region|route check|precision|SUSPECT" "$o/bench.txt" | cut -c1-240
    done
  done
}

# serial_pair_bench OUT_DIR SECONDS M_LIST: bench --region, V4-Pro, serial, 3 rounds, the cutedsl-dot and Triton
# columns at their tuned configs (the serial tune logs and table), routed+pair and ll_bf16 (run 21 call A, run 23).
serial_pair_bench() {
  local o=$1 seconds=$2 ms=$3
  mkdir -p "$o"
  timeout -k 5 "$seconds" python3 -m sglang_fp32gemm bench --region --region-model pro --region-m "$ms" \
    --region-schedule serial --region-rounds 3 --backends cutedsl-dot triton \
    --tune-log docs/benchmarks/h200/tune_log.jsonl.gz docs/benchmarks/h200/run16/tune_log_serial_16b.jsonl.gz \
    configs/sm90_serial.csv --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "serial bench rc=$?"
  grep -E "\] region|region pro|route check|precision|SUSPECT|overlapped_first" "$o/bench.txt" | cut -c1-300
}

# pair_tune_rows ROWS K BUDGET: tune --rank serial --pair (cutedsl-dot and Triton, M 1 2 4 8 16) at K into ROWS,
# its log beside it, under BUDGET + 40 s; prints the rows; fails where it wrote none (run 21 call C, run 23d).
pair_tune_rows() {
  local rows=$1 k=$2 budget=$3 d
  d=$(dirname "$rows")
  timeout -k 10 $((budget + 40)) python3 -m sglang_fp32gemm tune --rank serial --pair --backends cutedsl-dot triton \
    --m 1 2 4 8 16 --k "$k" --budget-s "$budget" --out "$rows" --summary "$d/summary.json" \
    --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
  echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 8 | cut -c1-220
  [ -s "$rows" ] && [ "$(grep -vc '^gfx' "$rows")" -gt 0 ] || { echo "no pair rows"; return 1; }
  grep -v '^gfx' "$rows" | cut -d, -f3-5,11,14,15
}

# diag_py DIR NAME SECONDS SCRIPT [ARGS...]: python3 SCRIPT $OUT/DIR/NAME.json ARGS... under timeout, its output in
# $OUT/DIR/NAME.txt, then its rc and that output less warnings (run 22's diagnoses).
diag_py() {
  local dir=$OUT/$1 name=$2 seconds=$3 script=$4
  shift 4
  mkdir -p "$dir"
  timeout -k 5 "$seconds" python3 "$script" "$dir/$name.json" "$@" > "$dir/$name.txt" 2>&1
  echo "$name rc=$?"; grep -vE "Warning|warn" "$dir/$name.txt" | cut -c1-600
}
