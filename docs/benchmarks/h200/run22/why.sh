#!/usr/bin/env bash
# Run 22, call C (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 400).
# Why the serial step adds less than its calls alone (SUSPECT): serial_why.py in a fresh process and after an
# overlapped capture; each mode captured SGLang's way and the private way, with the graph's edges read back,
# a CUPTI timeline of the graph that was timed, and a check that each compress kernel read its GEMM's output.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for order in ${WHY_ORDERS:-fresh after_overlapped}; do  # WHY_ORDERS=fresh: the first process alone (~half the time)
  diag_py why "serial_why_$order" 170 docs/benchmarks/h200/run22/serial_why.py "$order"
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
