#!/usr/bin/env bash
# Device call 4/5 (H200): retune (call 4: aligned K split; call 5: also the early-ticket tail),
# then the GPU tests, the benchmark through the routed call with the new
# table, the deterministic setting and the 300-shape fuzz.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 90 python3 -m pytest -q tests/test_triton_gpu.py -p no:cacheprovider 2>&1 | tail -n 5
timeout 300 python3 -m sglang_fp32gemm tune --out $OUT/sm90.csv --log /tmp/tune_log.jsonl 2>&1 | grep -v '^ ' | tail -n 50 | cut -c1-160
gzip -c /tmp/tune_log.jsonl > $OUT/tune_log.jsonl.gz
if [ -s $OUT/sm90.csv ]; then cp $OUT/sm90.csv configs/sm90.csv; fi
timeout 120 python3 -m sglang_fp32gemm bench --out-dir $OUT 2>&1 | tail -n 162
mkdir -p $OUT/det && timeout 40 python3 -m sglang_fp32gemm bench --deterministic --m 1,8,16,32 --n 1024 2560 --out-dir $OUT/det 2>&1 | tail -n 3
rm -f $OUT/det/bench_det.png $OUT/det/bench_det.json
timeout 60 python3 -m sglang_fp32gemm fuzz --cases 300 --out $OUT/fuzz.json 2>&1 | tail -n 2
