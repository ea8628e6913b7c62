#!/usr/bin/env bash
# Run 39's first call (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590).
# On an H200: V4-Pro overlapped at M=2, the H200's one 0.7x miss (0.72-0.80x in 34b, 34g, 38a, 38d, where M=1
# and M=4 add 0.8 us a layer less, 38a). 34g's region tune reached M=2 N=512 only (the shipped row kept); the
# M=2 rows at N=1024 (the H100's dot form) and N=2048 (the H100's Triton split-K) were never ranked on an H200.
# This tunes both (--rank region, the dot kernel and Triton), then A/Bs what changed (run29/tune_ab.sh: two
# A/B pairs, ab_verdict ships past 0.36 us in both), with a 300 s tune budget (39a, the same tune on an H100,
# reached N=2048's last phase at 204 s of 210 and no further). Not on an H100: there 0.7x is met at M=2
# (0.54-0.57x) and 39a's pick lost its A/B.
#   bash docs/benchmarks/h200/run39/first.sh
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "first.sh: not an H200"; exit 3; }
G_M=2 G_BUDGET=300 G_BACKENDS="cutedsl-dot triton" exec bash docs/benchmarks/h200/run29/tune_ab.sh 1024 2048
