#!/usr/bin/env bash
# Run 33i (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 200). The dot kernel's
# GPU tests of the PDL placements (stop 46): run 33's four forms and the pair forms, the shipped _lw pair
# included (tests/test_cutedsl_dot_gpu.py -k "placement or pair").
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
d=$OUT/gpu_tests; mkdir -p "$d"
timeout -k 10 170 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_cutedsl_dot_gpu.py -k "placement or pair" \
  > "$d/pytest_dot_gpu.txt" 2>&1
echo "dot GPU tests rc=$?"; tail -n 5 "$d/pytest_dot_gpu.txt" | cut -c1-300
