#!/usr/bin/env bash
# Run 36b (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590; either GPU). After
# 36a's GPU tests passed: the dot kernel's M=8 forms ranked alone where the serial table's rows serve only calls
# alone (K=7168 N 512 / 2048 / 2560: serial steps run those as pair launches), against Triton and the shipped rows
# (run32/iso_tune_ab.sh: tune --rank isolated, then isolated calls A then B; ship where A is below B, exact).
# At M=8 the isolated target missed at N=2048 on both GPUs (H100 1.024-1.03x, 33d / 35c; H200 1.09x, 34c).
#   bash docs/benchmarks/h200/run36/second.sh
# Not run as written: 36a found the M=8 forms about 40% slower than Triton (the tuner no longer offers them),
# and 36b ran iso_tune_ab.sh at N=2048 alone with a 100 s budget (the session's device time was nearly spent).
set -uo pipefail
G_M=8 G_BACKENDS="cutedsl-dot triton" G_BUDGET=240 bash docs/benchmarks/h200/run32/iso_tune_ab.sh 2048 512 2560
