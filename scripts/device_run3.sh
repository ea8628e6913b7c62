#!/usr/bin/env bash
# Device call 3 (H200): GPU tests, benchmark through the routed call, the
# deterministic setting, a 300-shape fuzz, and explain before/after calls.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SGLANG_ENABLE_FLYDSL_FP32_GEMM=1 python3 -m sglang_fp32gemm explain --max-m 128 > $OUT/explain_h200.txt 2>&1
python3 -m pytest -q tests/test_triton_gpu.py -p no:cacheprovider 2>&1 | tail -n 15 | tee $OUT/pytest_gpu.txt
python3 -m sglang_fp32gemm bench --out-dir $OUT 2>&1 | tail -n 175
mkdir -p $OUT/det && python3 -m sglang_fp32gemm bench --deterministic --m 1,8,16,32 --n 1024 2560 --out-dir $OUT/det 2>&1 | tail -n 10
rm -f $OUT/det/bench_det.png $OUT/det/bench_det.json
python3 -m sglang_fp32gemm fuzz --cases 300 --out $OUT/fuzz.json 2>&1 | tail -n 3
SGLANG_ENABLE_FLYDSL_FP32_GEMM=1 python3 - > $OUT/explain_after.txt 2>&1 <<'PY'
import torch
from sglang_fp32gemm import routing
from sglang_fp32gemm.explain import explain
for m in (1, 8, 20, 64, 200):
    for n in (512, 1024, 2048, 2560):
        routing.linear_bf16_fp32(torch.randn(m, 7168, device="cuda").bfloat16(), torch.randn(n, 7168, device="cuda").bfloat16())
print(explain(max_m=40)[1])
PY
tail -n 12 $OUT/explain_after.txt
