#!/usr/bin/env bash
# Run 24e (device, an H200; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 300). The
# shipped tables after run 24d's M=2 pair row (Triton's pair, tuned and A/B-checked on the H200): V4-Pro,
# serial, M 1 2 4 8 16 32, 3 rounds, torch / routed / Triton / ll_bf16 in one process (after an overlapped
# capture), then the targets check.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
o=$OUT/pair_m2; mkdir -p "$o"
timeout -k 10 240 python3 -m sglang_fp32gemm bench --region --region-model pro --region-m 1,2,4,8,16,32 \
  --region-schedule serial --region-rounds 3 --backends triton \
  --tune-log docs/benchmarks/h200/tune_log.jsonl.gz docs/benchmarks/h200/run16/tune_log_serial_16b.jsonl.gz \
  --out-dir "$o" > "$o/bench.txt" 2>&1
echo "bench rc=$?"; grep -E "^versions|\] region|route check|precision|SUSPECT|overlapped_first" "$o/bench.txt" | cut -c1-300
python3 -m sglang_fp32gemm.tools.targets "$o" --limit 3 --json "$o/targets.json" > "$o/targets.txt" 2>&1
grep -E "^(PASS|FAIL)" "$o/targets.txt" | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
