#!/usr/bin/env bash
# Run 20, calls C and C2 (device, from the repository root; carry .cutedsl .devsite .vllm_ll): V4-Pro's serial
# schedule ranked with the push forms offered. Run 19a timed cutedsl-mma's push forms there 0.10-0.49 us a call faster
# than their pull forms (m8_w4_r1_c8_s_push: 6.41 us at N=1024 M=8, where run 18's serial tune had Triton at
# 6.84 in another process); serial M 4-16 is 0.91-0.93x vLLM's ll_bf16 (19b), the target 0.9x.
#   bash docs/benchmarks/h200/run20/serial_push.sh n1024   # C: N=1024 (31 of a step's 91 fp32 calls)
#   bash docs/benchmarks/h200/run20/serial_push.sh n2048   # C2: N=2048 (30 calls), SGLang's warp split-K
#                                                          #     kernel (its rows today) offered too
#  1. tune --rank serial, N K=7168 M 4 8 16: the serial table's rows (only the shapes reached get rows). ~270 s.
#  2. A/B of V4-Pro's serial schedule at M 4, 8 and 16, ll_bf16 (its best config) in the same process:
#     A = step 1's serial rows (C2: with C's, committed as run20/sm90_20c_serial.csv) laid over the packaged
#     tables, B = the packaged tables; 3 rounds, A B A B. ~4 x 50 s.
# At M 4 / 8 / 16 the target (0.9x ll_bf16) is 0.09 / 0.32 / 0.25 us a layer away (19b); one N alone is
# unlikely to close it at M=8.
# Nothing ships from this call: a serial row ships where A beats B in both pairs.
# About 500 s: a call of its own (timeout_s 600).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
d=$OUT/tune_serial
mkdir -p "$d"
prior=docs/benchmarks/h200/run20/sm90_20c_serial.csv  # call C's rows, committed before call C2
case "${1:-n1024}" in
  n1024) name=20c; backends="triton cutedsl-mma"; n=1024; over= ;;
  n2048) name=20c2; backends="triton cutedsl-mma cutedsl"; n=2048; over=$prior ;;
  *) echo "usage: serial_push.sh [n1024|n2048]"; exit 2 ;;
esac
timeout -k 10 270 python3 -m sglang_fp32gemm tune --rank serial --backends $backends --m 4 8 16 \
  --n $n --k 7168 --budget-s 230 --out "$d/sm90_${name}_serial.csv" --summary "$d/summary.json" \
  --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 6 | cut -c1-220
rows=$d/sm90_${name}_serial.csv
[ -s "$rows" ] && [ "$(wc -l < "$rows")" -gt 1 ] || { echo "no serial rows"; rows=; }
[ -n "$rows" ] && grep -v '^gfx' "$rows" | cut -d, -f3-5,11,14,15
[ -n "$over" ] && [ -s "$over" ] && rows=$over${rows:+:$rows}
[ -n "$rows" ] || exit 0
echo "rows laid over in A: $rows"
region_ab "$rows" 60 --region-m 4,8,16 --region-schedule serial  # with the ll_bf16 column
