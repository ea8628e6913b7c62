#!/usr/bin/env bash
# Run 22, call E (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 120): run 22b's s1
# (V4-Pro, serial alone in a process, M=4, 3 rounds), now that the timer keeps every graph it captured (stop 35).
# 22b's s1, graphs deleted after timing: torch, routed and ll_bf16 SUSPECT (0.68-0.75x their calls alone).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
o=$OUT/keep; mkdir -p "$o"
timeout -k 5 100 python3 -m sglang_fp32gemm bench --region --region-model pro --region-m 4 \
  --region-schedule serial --region-rounds 3 --backends triton \
  --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$o" > "$o/bench.txt" 2>&1
echo "rc=$?"; grep -E "\] region pro|route check|precision" "$o/bench.txt" | cut -c1-400
