#!/usr/bin/env bash
# Run 26 (device, an H200 wanted; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 500; not
# yet run). The overlapped region's diagnosis (overlap_why.py; its docstring says what and why):
#  1. the GPU tests of the dot kernel's _g forms (stop 39: a cap on the CTAs a call launches);
#  2. V4-Pro at M 1 and 8, V4-Flash at M 1: none / torch / routed, torch and routed launched from a
#     high-priority stream, each fp32 GEMM replaced by a spin as long as it takes alone, routed followed by a
#     2 us spin, and at M 1 (if 1 passed) every fp32 GEMM on one dot form, uncapped and capped (five forms); 3 rounds
#     each, then one CUPTI-profiled replay of each mode, its kernel timeline kept for the CPU
#     (overlap_read.py reads it: read.txt).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
mkdir -p "$OUT/overlap"
timeout -k 10 80 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_cutedsl_dot_gpu.py -k capped \
  > "$OUT/overlap/pytest_capped.txt" 2>&1
rc=$?; echo "capped dot GPU tests rc=$rc"; tail -n 3 "$OUT/overlap/pytest_capped.txt" | cut -c1-200
dot=0; [ $rc = 0 ] && dot=1
DOT_MODES=$dot diag_py overlap overlap_why 380 docs/benchmarks/h200/run26/overlap_why.py \
  "${OVERLAP_CASES:-pro:1,pro:8,flash:1}"
ls -la "$OUT/overlap"
python3 docs/benchmarks/h200/run26/overlap_read.py "$OUT/overlap" > "$OUT/overlap/read.txt" 2>&1
grep -E "^== |added " "$OUT/overlap/read.txt" | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
