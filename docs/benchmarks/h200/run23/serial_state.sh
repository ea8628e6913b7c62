#!/usr/bin/env bash
# Run 23, call A (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 560; ran as 23a).
# After run 22 (H100): serial steps timed right after their own capture, in a process with no overlapped capture,
# ran in a state where the whole step's launch gaps shrink (SUSPECT); stop 35 puts one overlapped capture before a
# process's first serial capture (region.overlapped_first), as a SGLang server has captured both kinds of batch.
#   1. run22/position.py: each serial graph timed right after its own capture and after another's replays, raw
#      (no overlapped_first), without CUPTI: does the timing position alone decide the state?  ~60 s
#   2. bench --region, V4-Pro, serial, M 1, 2, 4, 8 (PAIR_M), cutedsl-dot and Triton columns, routed+pair,
#      ll_bf16: the serial row now comes after one overlapped capture; no column should be SUSPECT. If none is,
#      this is the pair's first measurement that counts (routed+pair against routed and ll_bf16).  ~250-330 s
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
diag_py position position 90 docs/benchmarks/h200/run22/position.py
serial_pair_bench "$OUT/serial" 400 "${PAIR_M:-1,2,4,8}"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
