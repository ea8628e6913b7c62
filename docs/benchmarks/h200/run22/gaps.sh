#!/usr/bin/env bash
# Run 22, call D (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 200): serial_gaps.py.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
mkdir -p "$OUT/gaps"
timeout -k 5 170 python3 docs/benchmarks/h200/run22/serial_gaps.py "$OUT/gaps/serial_gaps.json" > "$OUT/gaps/serial_gaps.txt" 2>&1
echo "rc=$?"; grep -vE "Warning|warn" "$OUT/gaps/serial_gaps.txt" | cut -c1-400
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
