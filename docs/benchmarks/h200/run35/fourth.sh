#!/usr/bin/env bash
# Run 35d (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). The session's last call:
#  - on an H200: run35/third.sh (the H100's rows A/B'd on the H200, then status.sh region);
#  - on an H100: the serial tune at M=1 N=1024 K=7168 with the dot candidates now offered without PDL too
#    (cutedsl_dot.py, run 35), then its changed row A/B'd (run33/serial_tune_ab.sh, budget 220 s).
#   bash docs/benchmarks/h200/run35/fourth.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/benchmarks/h200/run35/third.sh
fi
G_M=1 G_BUDGET=220 bash docs/benchmarks/h200/run33/serial_tune_ab.sh
