#!/usr/bin/env bash
# Run 35b (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). After 35a (H100):
# the dot kernel without PDL won the serial M=4 N=1024 A/B there (11.57 / 11.50 against 12.00 / 12.05 us a layer),
# and every shipped serial dot row on sm90 is a PDL form (the sm90 candidates had no other). So:
#  - on an H200: run35/first.sh (35a's two A/Bs on the other GPU, then status.sh region);
#  - on an H100: every shipped serial dot row without PDL (run35/sm90_35_nopdl_k7168_serial.csv: V4-Pro M 1 2 4;
#    run35/sm90_35_nopdl_k4096_serial.csv: V4-Flash M 1 2 4; the same threads, rows, _bx, _mb1, no _pdl/_ls/_lw),
#    serial, A B A B each (ab_verdict.py per M).
#   bash docs/benchmarks/h200/run35/second.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/benchmarks/h200/run35/first.sh
fi
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
region_ab docs/benchmarks/h200/run35/sm90_35_nopdl_k7168_serial.csv 70 --region-m 1,2,4 --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
mv "$OUT/ab" "$OUT/ab_pro_nopdl"
region_ab docs/benchmarks/h200/run35/sm90_35_nopdl_k4096_serial.csv 60 --region-model flash --region-m 1,2,4 \
  --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
mv "$OUT/ab" "$OUT/ab_flash_nopdl"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
