#!/usr/bin/env bash
# Device call 2 (H200): GPU kernel tests, then the full tuner (M 1..128).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -x tests/test_triton_gpu.py -p no:cacheprovider 2>&1 | tail -n 15
timeout 500 python3 -m sglang_fp32gemm.tools.tune --out $OUT/sm90.csv --log $OUT/tune_log.jsonl 2>&1 | grep -v '^ ' | tail -n 60
