#!/usr/bin/env bash
# Run 20, call C (device, from the repository root; carry .cutedsl .devsite .vllm_ll): V4-Pro's serial schedule
# ranked with the push forms offered. Run 19a timed cutedsl-mma's push forms there 0.10-0.49 us a call faster
# than their pull forms (m8_w4_r1_c8_s_push: 6.41 us at N=1024 M=8, where run 18's serial tune had Triton at
# 6.84 in another process); serial M 4-16 is 0.91-0.93x vLLM's ll_bf16 (19b), the target 0.9x.
#  1. tune --rank serial, Triton and cutedsl-mma, N=1024 K=7168, M 4 8 16: the serial table's rows
#     (only the shapes reached get rows). ~270 s.
#  2. A/B of V4-Pro's serial schedule at M 4, 8 and 16, ll_bf16 (its best config) in the same process:
#     A = step 1's serial rows laid over the packaged tables, B = the packaged tables; 3 rounds, A B A B.
#     ~4 x 50 s.
# Nothing ships from this call: a serial row ships where A beats B in both pairs.
# About 500 s: a call of its own (timeout_s 600).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
d=$OUT/tune_serial
mkdir -p "$d"
timeout -k 10 270 python3 -m sglang_fp32gemm tune --rank serial --backends triton cutedsl-mma --m 4 8 16 \
  --n 1024 --k 7168 --budget-s 230 --out "$d/sm90_20b_serial.csv" --summary "$d/summary.json" \
  --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 6 | cut -c1-220
rows=$d/sm90_20b_serial.csv
[ -s "$rows" ] && [ "$(wc -l < "$rows")" -gt 1 ] || { echo "no serial rows"; exit 0; }
grep -v '^gfx' "$rows" | cut -d, -f3-5,11,14,15
region_ab "$rows" 60 --region-m 4,8,16 --region-schedule serial  # with the ll_bf16 column
