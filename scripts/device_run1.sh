#!/usr/bin/env bash
# Device call 1 (H200): GPU kernel tests, then the tuner for M <= 32.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a $OUT/gpu.txt
python3 -m pytest -q -x tests/test_triton_gpu.py -p no:cacheprovider 2>&1 | tail -n 25 | tee $OUT/pytest_gpu.txt
timeout 420 python3 -m sglang_fp32gemm.tools.tune --m 1 2 4 8 16 32 --out $OUT/sm90_small.csv --log $OUT/tune_log_small.jsonl 2>&1 | tail -n 40
