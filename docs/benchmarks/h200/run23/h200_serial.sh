#!/usr/bin/env bash
# Run 23, call E (device, H200 wanted; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 150).
# The shipped tables with configs/sm90_pair.csv: V4-Pro's serial schedule, M 1 2 4 8 16, 3 rounds, one process,
# after one overlapped capture (region.overlapped_first): routed (the pair rows at every M here) against
# ll_bf16, torch and Triton alone in the same process, the route check and every result's precision. About 70 s.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
o=$OUT/serial; mkdir -p "$o"
timeout -k 5 120 python3 -m sglang_fp32gemm bench --region --region-model pro --region-m 1,2,4,8,16 \
  --region-schedule serial --region-rounds 3 --backends triton \
  --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$o" > "$o/bench.txt" 2>&1
echo "bench rc=$?"; grep -E "\] region|route check|precision|SUSPECT|overlapped_first" "$o/bench.txt" | cut -c1-300
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
