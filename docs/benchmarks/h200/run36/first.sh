#!/usr/bin/env bash
# Run 36a (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590; either GPU). The dot
# kernel's forms at M=8 (stop 48: compiled for sm_90a on the CPU without spills, never run on a GPU):
#  1. their GPU tests (tests/test_cutedsl_dot_gpu.py -k m8: exact at every M 1-8, NaN-poisoned, the order
#     reference's bits; with PDL right after x's writer);
#  2. on an H200 first the H100's serial row (`sm90-h100`, M=4 N=1024, the dot kernel without PDL; 35a) as a
#     generic row, V4-Pro serial, A B A B (run35/sm90_35_m4_n1024_nopdl_serial.csv): it ships generic only if it
#     wins here too by the margin (ab_verdict.py, 0.36 us a layer in both pairs);
#  3. the serial tune at M=8 N=1024 K=7168, cutedsl-dot (now with the M=8 forms) and Triton, its changed row
#     A/B'd in the V4-Pro serial step (run33/serial_tune_ab.sh, budget 200 s).
#   bash docs/benchmarks/h200/run36/first.sh
# FIRST_TUNE_S: the serial tune's budget (default 200; stop 49 lowered it where little device time was left).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/gpu_tests; mkdir -p "$d"
timeout -k 10 150 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_cutedsl_dot_gpu.py -k m8 \
  > "$d/pytest_dot_gpu_m8.txt" 2>&1
echo "dot GPU tests (M=8) rc=$?"; tail -n 5 "$d/pytest_dot_gpu_m8.txt" | cut -c1-300
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  region_ab docs/benchmarks/h200/run35/sm90_35_m4_n1024_nopdl_serial.csv 50 --region-m 4 --region-schedule serial
  python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"; mv "$OUT/ab" "$OUT/ab_h100_row_m4"
fi
echo "elapsed ${SECONDS}s"
G_M=8 G_BUDGET=${FIRST_TUNE_S:-200} bash docs/benchmarks/h200/run33/serial_tune_ab.sh
