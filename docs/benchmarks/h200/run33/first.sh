#!/usr/bin/env bash
# Run 33a (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). The first call of
# stop 46, by GPU: an H200 (none since run 26) measures where the shipped tables stand in the region model
# (run24/status.sh region, M 1-64); an H100 runs the M=2 pair A/B that run 32g left ready (the cutedsl-dot _bx
# pair against the shipped Triton pair, V4-Pro serial; it ships only if it also wins on an H200).
#   bash docs/benchmarks/h200/run33/first.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  STATUS_M=1,2,4,8,16,32,64 exec bash docs/benchmarks/h200/run24/status.sh region
fi
exec bash docs/benchmarks/h200/run31/pair_ab.sh docs/benchmarks/h200/run32/sm90_32_m2_pair.csv 2 55
