#!/usr/bin/env bash
# Run 31i (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 280). A/B of two pair
# rows (run31/sm90_31_m32_64_pair.csv: Triton's pair form for a ratio-4 layer's two compressor GEMMs at M=32 and
# M=64, the kernels the bench's routed+pair column ran there in 30c, 31d and 31f), V4-Pro, serial schedule,
# A B A B (region_ab, run20/common.sh); ab_verdict.py: ship where A beats B in both pairs, every result exact and
# every route check holding.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
region_ab docs/benchmarks/h200/run31/sm90_31_m32_64_pair.csv 60 --region-m 32,64 --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
