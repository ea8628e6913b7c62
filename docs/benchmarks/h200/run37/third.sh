#!/usr/bin/env bash
# Run 37's third call (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 450).
#  - on an H200: the shipped tables as the targets read them (run36/third.sh: status.sh region, V4-Pro and V4-Flash,
#    M 1-64, every column in one process; then status.sh isolated if at most 300 s have passed). The H200 last ran
#    them in 34b-c, before run 35's V4-Flash pair rows.
#  - on an H100: tests/test_cutedsl_dot.py, whose two ptxas tests failed in 37d (Triton 3.6.0's ptxas reads PTX ISA
#    8.7, the CuTe DSL 4.8.0 writes 8.8) and now skip, naming ptxas's words, with the dot kernel's GPU test file.
#   bash docs/benchmarks/h200/run37/third.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/benchmarks/h200/run36/third.sh
fi
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
d=$OUT/dot_tests; mkdir -p "$d"
timeout -k 10 300 python3 -m pytest -q -p no:cacheprovider -n 8 -rs tests/test_cutedsl_dot.py tests/test_cutedsl_dot_gpu.py \
  > "$d/pytest.txt" 2>&1
echo "dot tests rc=$?"; tail -n 12 "$d/pytest.txt" | cut -c1-300
