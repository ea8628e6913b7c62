#!/usr/bin/env bash
# Run 35a (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). The first call of
# the stop after 47, on either GPU:
#  1. V4-Flash's pair rows at M 32 and 64 (run35/sm90_35_flash_m32_64_pair.csv: the Triton pair kernels the
#     bench's routed+pair column ran there in 34b, where that column added 6.86 / 8.13 us a layer against
#     routed's 8.47 / 9.35), V4-Flash serial, A B A B (region_ab; ab_verdict.py: ship where A beats B in both
#     pairs, every result exact, every route check holding). Pair rows are generic: they ship only if they win
#     on the other GPU too, else as rows of this GPU's model (sm90-h200).
#  2. The serial M=4 N=1024 row as the dot kernel without PDL (run35/sm90_35_m4_n1024_nopdl_serial.csv,
#     `cutedsl_dot_m4_t224_r2_bx`), V4-Pro serial, A B A B. On sm90 the dot candidates are PDL forms only, and
#     the shipped row there is Triton without PDL, the form run 16d found 0.7-1.3 us a call faster than its
#     PDL twin in the serial schedule; the dot form with vLLM's placement lost this A/B on both GPUs (34f, 34i).
#  3. On an H200 also `status.sh region` (M 1-64), the first measurement of the H200's own rows (stop 47) in one
#     process with the rest.
#   bash docs/benchmarks/h200/run35/first.sh
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
region_ab docs/benchmarks/h200/run35/sm90_35_flash_m32_64_pair.csv 60 --region-model flash --region-m 32,64 \
  --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
mv "$OUT/ab" "$OUT/ab_flash_pair"
region_ab docs/benchmarks/h200/run35/sm90_35_m4_n1024_nopdl_serial.csv 50 --region-m 4 --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  STATUS_M=1,2,4,8,16,32,64 bash docs/benchmarks/h200/run24/status.sh region
fi
