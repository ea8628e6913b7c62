#!/usr/bin/env bash
# Run 37's second call (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590).
#  - on an H200: M=2 overlapped, N=1024, the H200's one 0.7x miss (0.72-0.76x in 34b / 34g; 34g's tune reached
#    M=1 N 512 / 1024 and M=2 N=512 in its budget, never M=2 N=1024): tune --rank region with the dot kernel and
#    Triton, then the A/B of what changed (run29/tune_ab.sh; ab_verdict ships past 0.36 us in both pairs);
#  - on an H100 (37a-b measured the shipped tables there this session): the whole test suite at HEAD on a GPU,
#    last run whole in 19a (88 GPU tests passed); since then the GPU tests ran a file or a -k at a time.
#   bash docs/benchmarks/h200/run37/second.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  G_M=2 G_BACKENDS="cutedsl-dot triton" exec bash docs/benchmarks/h200/run29/tune_ab.sh 1024
fi
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
d=$OUT/gpu_suite; mkdir -p "$d"
# -n 8: the GPU tests compile on the CPU for most of their time; they share the one GPU.
timeout -k 10 540 python3 -m pytest -q -p no:cacheprovider -n 8 -rs --durations=20 tests > "$d/pytest.txt" 2>&1
echo "suite rc=$?"; grep -E "passed|failed|error" "$d/pytest.txt" | tail -n 5 | cut -c1-300
grep -E "^(FAILED|ERROR)" "$d/pytest.txt" | head -n 20 | cut -c1-300
grep -E "^SKIPPED" "$d/pytest.txt" | cut -c1-200 | sort | uniq -c | sort -rn | head -n 15
