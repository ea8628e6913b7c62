#!/usr/bin/env bash
# Run 33b (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 480). The cutedsl-dot
# PDL placements (_ls, _lw; stop 46) A/B'd alone against each form's plain placement, torch and vLLM's ll_bf16
# in one process, and in V4-Pro's serial schedule at M=2 N=1024 (placement_ab.py says what and why).
#   bash docs/benchmarks/h200/run33/placement.sh [placement_ab.py options]
# Ran as 34e (an H200, eecea8a; needs a tree before stop 47, which removed _pdl_ls): `bash docs/benchmarks/h200/run33/placement.sh --forms triton` (timeout_s 480): Triton's
# _pdl forms against their _pdl_ls twins at N=2048 M 8-16 and N=1024 M 4-16, and M=4 N=1024 in the serial schedule.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
o=$OUT/placement; mkdir -p "$o"
timeout -k 10 420 python3 docs/benchmarks/h200/run33/placement_ab.py "$o" "$@" 2>&1 | tee "$o/placement.txt" | \
  grep -vE "Warning|warn\(" | cut -c1-300
echo "placement_ab rc=${PIPESTATUS[0]}"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
