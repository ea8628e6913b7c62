#!/usr/bin/env bash
# Run 21, call B (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 540). After
# call A (pair.sh) measured the pair forms as a candidate column: the plugin's own pair routing (pairs.py) with
# run21/sm90_candidate_pair.csv laid over the packaged tables, so that the routed column of V4-Pro's serial
# schedule (M 1, 2, 4, 8, 16, 32) is the plugin as it would ship with those rows: each ratio-4 layer's two
# compressor GEMMs one pair launch where a row names one, the route check expecting both calls under the pair's
# kernel; torch, Triton alone and ll_bf16 in the same process; then the targets check and explain's routes;
# then eager_pair.py: the host and wall time of the pair's two GEMMs as eager calls (two routed calls, one
# pair launch, torch twice). About 350-450 s; timeout_s 540.
#   bash docs/benchmarks/h200/run21/pair_b.sh [PAIR_TABLE]   # default: the candidate rows; or call C's tuned table
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
export SGLANG_FLYDSL_FP32_GEMM_CONFIG=${1:-docs/benchmarks/h200/run21/sm90_candidate_pair.csv}
echo "pair table: $SGLANG_FLYDSL_FP32_GEMM_CONFIG"
o=$OUT/pair_b; mkdir -p "$o"
SGLANG_ENABLE_FLYDSL_FP32_GEMM=1 timeout -k 5 60 python3 -m sglang_fp32gemm explain --max-m 32 --device-key sm90:132 > "$o/explain.txt" 2>&1
echo "explain rc=$?"; grep -A9 "N=512+2048 K=7168" "$o/explain.txt" | cut -c1-200
timeout -k 5 400 python3 -m sglang_fp32gemm bench --region --region-model pro --region-m 1,2,4,8,16,32 \
  --region-schedule serial --region-rounds 3 --backends triton \
  --tune-log docs/benchmarks/h200/tune_log.jsonl.gz configs/sm90_serial.csv --out-dir "$o" > "$o/bench.txt" 2>&1
echo "bench rc=$?"; grep -E "\] region|region pro|route check|precision|SUSPECT" "$o/bench.txt" | cut -c1-260
python3 -m sglang_fp32gemm.tools.targets "$o" --limit 3 --json "$o/targets.json" > "$o/targets.txt" 2>&1
cut -c1-200 "$o/targets.txt"
SGLANG_FLYDSL_FP32_GEMM_CONFIG= timeout -k 5 150 python3 docs/benchmarks/h200/run21/eager_pair.py "$o/eager_pair.json" > "$o/eager_pair.txt" 2>&1
echo "eager_pair rc=$?"; tail -n 7 "$o/eager_pair.txt" | cut -c1-240
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
