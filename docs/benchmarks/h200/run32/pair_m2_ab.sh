#!/usr/bin/env bash
# Run 32 next (device, an H100 and an H200 each; from the repository root; carry .cutedsl .devsite .vllm_ll;
# timeout_s 240). V4-Pro's M=2 pair row: 32g's routed+pair column (H100, one process) put the dot kernel's _bx pair
# (cutedsl_dot_m2_t448_r1_pdl_bx) 0.57 us a layer below the shipped Triton pair (0.92x ll_bf16 against 0.96x),
# while the H200 ranked Triton's pair first (24d). The two GPUs share the sm90 rows, so the row ships only if
# it wins on both. A = run32/sm90_32_m2_pair.csv laid over the packaged tables, B = the packaged tables, serial
# schedule, M=2, A B A B (region_ab, run20/common.sh); ab_verdict.py: A must beat B in both pairs, every result
# exact and every route check holding.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
region_ab docs/benchmarks/h200/run32/sm90_32_m2_pair.csv 55 --region-m 2 --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
