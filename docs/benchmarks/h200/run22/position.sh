#!/usr/bin/env bash
# Run 22, call F (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 200; not yet run):
# position.py (does timing a serial step right after its own capture put it in the fast state?), then 22b's s1
# bench, which since stop 35 captures one overlapped step before its serial row (region.overlapped_first): if
# that does what runs 19b and 22b say, no column is SUSPECT now. About 100 s.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
mkdir -p "$OUT/position" "$OUT/s1"
timeout -k 5 90 python3 docs/benchmarks/h200/run22/position.py "$OUT/position/position.json" > "$OUT/position/position.txt" 2>&1
echo "position rc=$?"; grep -vE "Warning|warn" "$OUT/position/position.txt" | cut -c1-600
timeout -k 5 90 python3 -m sglang_fp32gemm bench --region --region-model pro --region-m 4 \
  --region-schedule serial --region-rounds 3 --backends triton \
  --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$OUT/s1" > "$OUT/s1/bench.txt" 2>&1
echo "s1 rc=$?"; grep -E "\] region pro|route check|precision" "$OUT/s1/bench.txt" | cut -c1-400
