#!/usr/bin/env bash
# Run 22, call D (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 200): serial_gaps.py.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
diag_py gaps serial_gaps 170 docs/benchmarks/h200/run22/serial_gaps.py
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
