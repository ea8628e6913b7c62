#!/usr/bin/env bash
# Run 34g (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 400). The H200's winners of
# this run checked on an H100, since the two GPUs share the sm90 tables (same SM count):
#  1. run34/sm90_34_m1_region.csv (34f's region tune, V4-Pro overlapped M=1: torch at N=512, the dot kernel's
#     _lw_mb1 form at N=1024; won both A/B pairs on the H200): region_ab, overlapped, M=1, A B A B;
#  2. run34/sm90_34_iso_n2048_serial.csv (34c's isolated tune, N=2048 M 4/8/16: Triton's sk8 _pdl): isolated calls,
#     A = the rows laid over the packaged tables, B = the packaged tables (run32/iso_tune_ab.sh's step 3).
#   bash docs/benchmarks/h200/run34/h100_check.sh
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
h=docs/benchmarks/h200/run34
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
region_ab $h/sm90_34_m1_region.csv 60 --region-m 1 --region-schedule overlapped
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
logs="docs/benchmarks/h200/tune_log.jsonl.gz docs/benchmarks/h200/run16/tune_log_serial_16b.jsonl.gz"
for v in A B; do
  o=$OUT/iso/$v; mkdir -p "$o"; cfg=$h/sm90_34_iso_n2048_serial.csv; [ $v = B ] && cfg=
  # shellcheck disable=SC2086
  SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout -k 5 120 python3 -m sglang_fp32gemm bench --graph --backends cutedsl \
    --m 4,8,16 --n 2048 --k 7168 --tune-log $logs --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "isolated $v rc=$?"; grep -E "precision|routed/torch" "$o/bench.txt" | cut -c1-200
  sed -n '/^== Isolated/,/^routed\/torch/p' "$o/bench.txt" | cut -c1-200
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
