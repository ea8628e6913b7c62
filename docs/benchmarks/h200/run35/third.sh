#!/usr/bin/env bash
# Run 35c (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). After 35a-35b (both
# on an H100) the tables hold the H100's rows (sm90-h100: the serial dot rows without PDL that won there) and
# V4-Flash's pair rows at M 32-64 (generic: on the H200, 34b's routed+pair column beat routed by 1.2-1.6 us a layer).
#  - on an H200: the H100's rows A/B'd there (A = the run35 rows files as generic rows laid over the tables, B = the
#    tables, where the H200 does not read them): serial M=4 N=1024, then V4-Pro M 1-2 and V4-Flash M 1-2 without
#    PDL; then status.sh region (M 1-64) if at most 300 s have passed;
#  - on an H100: status.sh region (M 1-64) with its rows, then status.sh isolated if at most 240 s have passed.
#   bash docs/benchmarks/h200/run35/third.sh
set -uo pipefail
R=docs/benchmarks/h200/run35
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  . docs/benchmarks/h200/run20/common.sh
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  region_ab $R/sm90_35_m4_n1024_nopdl_serial.csv 50 --region-m 4 --region-schedule serial
  python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"; mv "$OUT/ab" "$OUT/ab_m4_n1024"
  region_ab $R/sm90_35_nopdl_k7168_serial.csv 55 --region-m 1,2 --region-schedule serial
  python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"; mv "$OUT/ab" "$OUT/ab_pro_nopdl"
  region_ab $R/sm90_35_nopdl_k4096_serial.csv 45 --region-model flash --region-m 1,2 --region-schedule serial
  python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"; mv "$OUT/ab" "$OUT/ab_flash_nopdl"
  echo "elapsed ${SECONDS}s"
  [ "$SECONDS" -le 300 ] && STATUS_M=1,2,4,8,16,32,64 bash docs/benchmarks/h200/run24/status.sh region
else
  STATUS_M=1,2,4,8,16,32,64 bash docs/benchmarks/h200/run24/status.sh region
  echo "elapsed ${SECONDS}s"
  [ "$SECONDS" -le 240 ] && bash docs/benchmarks/h200/run24/status.sh isolated
fi
exit 0
