#!/usr/bin/env bash
# Run 21, call C (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). The pair
# table from the tuner rather than by hand (run21/sm90_candidate_pair.csv took the serial table's N=2560 kernels):
#  1. tune --rank serial --pair, V4-Pro (K=7168), M 1 2 4 8 16, the pair forms of cutedsl-dot (M <= 4) and Triton:
#     each candidate's one launch ranked by what it adds to the serial schedule as every ratio-4 layer's two
#     compressor GEMMs, against torch's two calls. About 240 s (compiles in the process: no precompile for pairs).
#  2. region_ab (run20/common.sh): A = the tuned pair table laid over the packaged tables (the plugin's own pair
#     routing, route-checked), B = the packaged tables; serial M 1, 2, 4, 8, 16; A B A B with ll_bf16 in each
#     process. A pair row ships where A beats B in both pairs and A's routed is <= 0.9x ll_bf16. ~4 x 60 s.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/pair_tune; mkdir -p "$d"
rows=$d/sm90_21c_pair.csv
pair_tune_rows "$rows" 7168 240 || exit 0
region_ab "$rows" 70 --region-m 1,2,4,8,16 --region-schedule serial
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
