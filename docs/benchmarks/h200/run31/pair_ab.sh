#!/usr/bin/env bash
# Run 31i (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 280). A/B of pair rows,
# V4-Pro, serial schedule, A B A B (region_ab, run20/common.sh); ab_verdict.py: ship where A beats B in both
# pairs, every result exact and every route check holding.
#   bash docs/benchmarks/h200/run31/pair_ab.sh [ROWS M_LIST SECONDS]
# Defaults, as 31i ran: run31/sm90_31_m32_64_pair.csv (Triton's pair form for a ratio-4 layer's two compressor
# GEMMs at M=32 and M=64, the kernels the bench's routed+pair column ran there in 30c, 31d and 31f), M 32,64,
# 60 s a process. Run 32's next call (the dot kernel's _bx pair as the M=2 row, on an H100 and an H200 each,
# timeout_s 240): bash docs/benchmarks/h200/run31/pair_ab.sh docs/benchmarks/h200/run32/sm90_32_m2_pair.csv 2 55
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
region_ab "${1:-docs/benchmarks/h200/run31/sm90_31_m32_64_pair.csv}" "${3:-60}" --region-m "${2:-32,64}" \
  --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
