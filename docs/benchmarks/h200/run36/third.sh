#!/usr/bin/env bash
# Run 36c (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590; either GPU).
#  - on an H200: the shipped tables as the targets read them, every column in one process: status.sh region
#    (V4-Pro and V4-Flash, overlapped and serial, M 1-64; the H200 has not run the tables with run 35's V4-Flash
#    pair rows at M 32-64, and its M=2 overlapped was 0.72-0.76x torch in 34b / 34g), then status.sh isolated if
#    at most 300 s have passed (35c on an H100 took under 240 s for the region);
#  - on an H100: run36/second.sh (the M=8 dot forms ranked alone at N 2048 / 512 / 2560).
#   bash docs/benchmarks/h200/run36/third.sh
# ISO_BY: the seconds by which the region part must end for the isolated part to run (default 300).
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  STATUS_M=1,2,4,8,16,32,64 bash docs/benchmarks/h200/run24/status.sh region
  echo "elapsed ${SECONDS}s"
  [ "$SECONDS" -le "${ISO_BY:-300}" ] && bash docs/benchmarks/h200/run24/status.sh isolated
  exit 0
fi
exec bash docs/benchmarks/h200/run36/second.sh
