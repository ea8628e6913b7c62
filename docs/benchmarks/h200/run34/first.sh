#!/usr/bin/env bash
# Run 34a (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). The first call of
# stop 47, by GPU: an H200 (none since run 26) A/Bs the Triton pair row that run 33f replaced at V4-Pro M=2 (A) against
# the shipped tables (B), V4-Pro serial; if A wins there the two GPUs disagree on the sm90 pair row. An H100 runs
# Triton's _pdl_ls twins against their _pdl forms (placement_ab.py --forms triton; names only until this run).
#   bash docs/benchmarks/h200/run34/first.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/benchmarks/h200/run31/pair_ab.sh docs/benchmarks/h200/run33/sm90_33_m2_triton_pair.csv 2 55
fi
exec bash docs/benchmarks/h200/run33/placement.sh --forms triton
