#!/usr/bin/env bash
# Run 20, call D (device, from the repository root; carry .cutedsl .devsite .vllm_ll). Calls C and C2 timed
# V4-Pro's serial schedule alone (--region-schedule serial) and every column but Triton's came out 3-5 us a
# layer below run 19b's (torch 9.5 against 14.8 at M=4), where 19b had timed each M overlapped first, then
# serial, in one process. Same machine type, driver, kernels and configs; the Triton column and the base
# step did not move. Which setting moves them? M=4, V4-Pro, one process each, in this order:
#   s1: serial alone (as C)          os: overlapped then serial (as 19b)
#   osm: as os, cutedsl-mma column too (19b's columns)   s2: serial alone again
# About 40 s a process; ~200 s in all.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
run() {  # NAME SCHEDULES BACKENDS...
  local name=$1 sched=$2 o=$OUT/diag/$1
  shift 2
  mkdir -p "$o"
  timeout -k 5 90 python3 -m sglang_fp32gemm bench --region --region-model pro --region-m 4 \
    --region-schedule "$sched" --region-rounds 3 --backends "$@" \
    --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "$name rc=$?"; grep -E "\] region pro|route check" "$o/bench.txt" | cut -c1-240
}
run s1 serial triton
run os overlapped,serial triton
run osm overlapped,serial triton cutedsl-mma
run s2 serial triton
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
