#!/usr/bin/env bash
# Run 19, call E (device, from the repository root; carry .cutedsl .devsite .vllm_ll): cutedsl-mma's push
# reduction (one cluster barrier at the end) against its pull reduction (two), the same forms, one process.
#  1. The push forms' GPU tests (tests/test_cutedsl_mma_gpu.py -k push): exact, the same bits as their pull
#     forms, and under graph replay with PDL right after the kernel that writes x. ~30 s.
#  2. push_ab.py: each pair checked (exact, same bits) and timed alone and in the V4-Pro serial schedule. ~150 s.
# Nothing ships from this call: if push wins, candidates() offers it and the next tune ranks it. Ran as run 19a.
set -uo pipefail
: "${OUT:?OUT must name the output folder (the device machine sets it)}"
eval "$(bash .cutedsl/cutedsl_carry.sh unpack .cutedsl /tmp/site)"
# apache-tvm-ffi, which cutedsl-mma needs, comes with the vLLM carry
eval "$(bash .vllm_ll/vllm_ll_carry.sh unpack .vllm_ll /tmp/llsite)"
export PYTHONPATH=$PWD/.devsite:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT/push_ab"
timeout -k 10 150 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_cutedsl_mma_gpu.py -k push \
  > "$OUT/push_ab/pytest_gpu.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 5 "$OUT/push_ab/pytest_gpu.txt"
timeout -k 10 300 python3 docs/benchmarks/h200/run19/push_ab.py "$OUT/push_ab" 2>&1 | tee "$OUT/push_ab/push_ab.txt"
echo "push_ab rc=${PIPESTATUS[0]}"
