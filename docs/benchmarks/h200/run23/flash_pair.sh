#!/usr/bin/env bash
# Run 23, call D (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 420). V4-Flash's
# pair (K=4096): tune --rank serial --pair, M 1 2 4 8 16, cutedsl-dot and Triton (as pair_tune.sh for V4-Pro),
# then the flash serial region, A (the tuned pair rows laid over the packaged tables) then B (packaged), one
# process each, ll_bf16 in each. About 300 s.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/flash_pair; mkdir -p "$d"
rows=$d/sm90_23d_flash_pair.csv
pair_tune_rows "$rows" 4096 160 || exit 0
for v in A B; do
  o=$d/$v; mkdir -p "$o"; cfg=$rows; [ $v = B ] && cfg=
  SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout -k 5 80 python3 -m sglang_fp32gemm bench --region \
    --region-model flash --region-m 1,2,4,8,16 --region-schedule serial --region-rounds 3 --backends triton \
    --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "$v rc=$?"; grep -E "\] region flash|route check|precision|SUSPECT" "$o/bench.txt" | cut -c1-260
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
