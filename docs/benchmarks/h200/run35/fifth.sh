#!/usr/bin/env bash
# Run 35e (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 430: the session's last
# device time):
#  - on an H200: the H100's serial rows A/B'd there (M=4 N=1024, then V4-Pro M 1-2 without PDL; as third.sh);
#  - on an H100: the serial tune at M=2 N=1024 K=7168 with the dot forms without PDL, its changed row A/B'd
#    (run33/serial_tune_ab.sh, budget 150 s).
#   bash docs/benchmarks/h200/run35/fifth.sh
set -uo pipefail
R=docs/benchmarks/h200/run35
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  . docs/benchmarks/h200/run20/common.sh
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  region_ab $R/sm90_35_m4_n1024_nopdl_serial.csv 50 --region-m 4 --region-schedule serial
  python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"; mv "$OUT/ab" "$OUT/ab_m4_n1024"
  region_ab $R/sm90_35_nopdl_k7168_serial.csv 55 --region-m 1,2 --region-schedule serial
  python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"; mv "$OUT/ab" "$OUT/ab_pro_nopdl"
  exit 0
fi
G_M=2 G_BUDGET=150 bash docs/benchmarks/h200/run33/serial_tune_ab.sh
