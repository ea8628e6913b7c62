#!/usr/bin/env bash
# Run 39's second H200 call (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590):
# tune --rank region at V4-Pro M=2 N=1024 with the dot kernel and Triton (300 s), then the A/B of its pick
# against the shipped tables (run29/tune_ab.sh). On an H200 at M=1 that tune found an `_lw_mb1` dot form 0.45 us
# a call ahead of the H100's row (34g); M=2's N=1024 row is the H100's. Not on an H100 (exit 3): 39a ran it there.
#   bash docs/benchmarks/h200/run39/second.sh
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "second.sh: not an H200"; exit 3; }
G_M=2 G_BUDGET=300 G_BACKENDS="cutedsl-dot triton" exec bash docs/benchmarks/h200/run29/tune_ab.sh 1024
