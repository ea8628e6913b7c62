# Sourced by run 20's device scripts (from the repository root): the carries on PYTHONPATH, the versions
# line, and region_ab, the A/B of the whole V4-Pro region that decides whether tuned rows ship.
: "${OUT:?OUT must name the output folder (the device machine sets it)}"
. scripts/device_env.sh
# The output log, and every folder packed at exit (scripts/device_pack.sh: the 8-file limit).
exec > >(tee -a "$OUT/run.log") 2>&1
trap "bash scripts/device_pack.sh" EXIT
python3 -m sglang_fp32gemm bench --versions | tr -d '\n' | cut -c1-400; echo

# region_ab TABLES SECONDS BENCH_ARGS...: A = TABLES (a :-list) laid over the packaged tables, B = the packaged
# tables alone; A B A B, one process each, 3 rounds, Triton's best form as the backend column. Out: $OUT/ab/.
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
      echo "$v$i rc=$?"; grep -E "^versions|\] region pro|route check|precision" "$o/bench.txt" | cut -c1-240
    done
  done
}
