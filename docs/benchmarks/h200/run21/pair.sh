#!/usr/bin/env bash
# Run 21, call A (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 560).
# The serial schedule misses its target at M 1-16 (19b: routed 1.02 / 1.04 / 0.91 / 0.93 / 0.92x what vLLM's
# ll_bf16 adds) because each call pays a fixed cost. On a ratio-4 layer the indexer's compressor (N=512) and
# the layer's (N=2048) read the same x; the serial table's own times (configs/sm90_serial.csv, M=1: 4.38 + 9.22
# us against 9.46 for one N=2560 call) say one launch for both would save 3-4 us a ratio-4 layer, 1.5-2 us a
# V4-Pro layer. This call measures it before the plugin does it:
#   1. the pair forms' GPU tests (cutedsl-dot's and Triton's: both outputs exact, NaN-poisoned, under graph
#      replay; the dot pair's outputs the single form's bits), and `tune --pair`'s CUDA path (cuBLAS fakes);
#   2. bench --region, V4-Pro, serial, M 1, 2, 4, 8 (PAIR_M=...; PAIR_M=none: the tests alone; M=16 was listed
#      until stop 34 cut it to fit the device time left): the `routed+pair` column is the routed column with each
#      ratio-4 layer's two GEMMs one launch of a pair form: the serial table's N=2560 row's kernel where its
#      backend has one (cutedsl-dot at M 1-2, Triton at M 4-8), else Triton's tuned N=2560 form (M=16, whose row
#      is SGLang's warp split-K); beside torch, routed, each backend alone and ll_bf16 (best of its sweep).
# About 90 s of tests and 250-330 s of bench.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
mkdir -p "$OUT/pair"
# One process a file: a fault in one kernel leaves CUDA's context unusable for the rest of its process (21a).
for t in cutedsl_dot triton tools; do
  timeout -k 5 80 python3 -m pytest -v -p no:cacheprovider -n 0 -k pair "tests/test_${t}_gpu.py" \
    > "$OUT/pair/pytest_pair_gpu_$t.txt" 2>&1
  echo "pair gpu tests $t rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pair/pytest_pair_gpu_$t.txt" | cut -c1-200
done
[ "${PAIR_M:-}" = none ] && exit 0  # the tests alone
serial_pair_bench "$OUT/pair/pro" 330 "${PAIR_M:-1,2,4,8}"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
