#!/usr/bin/env bash
# Run 25f (device, an H200; carry .cutedsl .devsite .vllm_ll; timeout_s 230). The M=1 rows run 25e tuned with
# the _mb1 forms (run25/sm90_25_m1.csv) against the packaged tables: isolated calls (graph replay, M=1,
# N 512-2560, ll_bf16 at its best config incl. the prefetching instance), A then B; then the V4-Pro serial
# schedule at M=1, one A and one B process.
# Ran as 25f, and was an A/A: the rows' file name (no _serial suffix) put them in the fast table, which
# graph-captured calls outside the multi-stream region did not read then (the packaged serial rows won there;
# from stop 38 a user's file overrides them). Its successor: run26/sm90_26_m12_serial.csv with
# bx_tables.sh ab (the benchmarks page, run 25's next calls).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
rows=docs/benchmarks/h200/run25/sm90_25_m1.csv
for v in A B; do
  o=$OUT/iso/$v; mkdir -p "$o"; cfg=$rows; [ $v = B ] && cfg=
  SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout -k 5 70 python3 -m sglang_fp32gemm bench --graph --backends cutedsl \
    --m 1 --n 512 1024 2048 2560 --k 7168 --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "isolated $v rc=$?"; grep -E "^ +1 \||precision|worst" "$o/bench.txt" | head -4
done
for v in A B; do
  o=$OUT/ab/${v}1; mkdir -p "$o"; cfg=$rows; [ $v = B ] && cfg=
  SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout -k 5 45 python3 -m sglang_fp32gemm bench --region --region-model pro \
    --region-rounds 3 --backends triton --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --region-m 1 \
    --region-schedule serial --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "$v rc=$?"; grep -E "\] region|route check|precision" "$o/bench.txt" | cut -c1-240
done
