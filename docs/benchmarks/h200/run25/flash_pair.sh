#!/usr/bin/env bash
# Run 25 (device, an H200; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 560; not yet
# run). V4-Flash's pair table on the H200, where run 24a found its serial steps not flagged (run 23d's H100
# processes were) and a one-launch pair column at 0.61-0.92x ll_bf16 against routed's 0.76-1.08x:
#  1. tune --rank serial --pair at K=4096, M 1 2 4 8 16, cutedsl-dot (with the _bx forms) and Triton (as
#     run21/pair_tune.sh for V4-Pro; run 23d's H100 tune reached M 1-16 in 160 s);
#  2. region_ab: A = those rows laid over the packaged tables, B = the packaged tables; V4-Flash serial,
#     M 1 2 4 8 16, A B A B, ll_bf16 in each process. Rows ship where A beats B in both pairs (run 19c's rule)
#     and no column is SUSPECT. ~4 x 60 s.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/flash_pair; mkdir -p "$d"
rows=$d/sm90_25_flash_pair.csv
pair_tune_rows "$rows" 4096 170 || exit 0
region_ab "$rows" 65 --region-model flash --region-m 1,2,4,8,16 --region-schedule serial
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
