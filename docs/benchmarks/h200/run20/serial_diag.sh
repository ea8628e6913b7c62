#!/usr/bin/env bash
# Run 20, call D (device, from the repository root; carry .cutedsl .devsite .vllm_ll). Calls C and C2 timed
# V4-Pro's serial schedule alone (--region-schedule serial) and every column but Triton's came out 3-5 us a
# layer below run 19b's (torch 9.5 against 14.8 at M=4), where 19b had timed each M overlapped first, then
# serial, in one process. Same machine type, driver, kernels and configs; the Triton column and the base
# step did not move. Which setting moves them? M=4, V4-Pro, one process each, in this order:
#   s1: serial alone (as C)          os: overlapped then serial (as 19b)
# then serial_overlap.py, fresh and after an overlapped capture (as 19b): kernel start/end times and
# durations of the serial step's graph, its nodes and edges, with torch, Triton with and without PDL,
# SGLang's warp split-K, routed's M=4 kernels and ll_bf16 at N=2048.
# About 40 s a bench process and 60-90 s a profile; ~250 s in all.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
run() {  # NAME SCHEDULES BACKENDS...
  local name=$1 sched=$2 o=$OUT/diag/$1
  shift 2
  mkdir -p "$o"
  timeout -k 5 120 python3 -m sglang_fp32gemm bench --region --region-model pro --region-m 4 \
    --region-schedule "$sched" --region-rounds 3 --backends "$@" \
    --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "$name rc=$?"; grep -E "\] region pro|route check" "$o/bench.txt" | cut -c1-240
}
run s1 serial triton
run os overlapped,serial triton
mkdir -p "$OUT/diag"
for order in fresh after_overlapped; do
  timeout -k 5 130 python3 docs/benchmarks/h200/run20/serial_overlap.py "$OUT/diag/serial_overlap_$order.json" \
    "$order" 2>&1 | tail -n 24 | cut -c1-900
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
