#!/usr/bin/env bash
# Device call 6 (one H200, one call, < 10 min), after the tables of call 5 are committed:
# GPU tests; one bench process with every mode (eager, decode sequence, deterministic, graph:
# M 1-32 and 40..128, K 7168 and 4096, backend columns at K 7168); the fuzz; the targets check.
# Call it with carry [".cutedsl", ".devsite"]. TUNE_LOG (default: the committed
# docs/benchmarks/h200/tune_log.jsonl.gz) gives each backend column its tuned config.
# Comes back under $OUT (4 files): targets.txt bench.md bench.png (if matplotlib) results.tar.gz
#   (bench*.json/.md, fuzz.json, versions, pytest, bench and fuzz output).
# Worst case by the timeouts: ~10 + 10 + 45 + 300 + 40 + 10 s = 415 s (call 5 ran the full M 1-32 grid).
set -uo pipefail
T0=$(date +%s)
say() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
L=/tmp/run6; mkdir -p $L/bench
export PYTHONUNBUFFERED=1
TUNE_LOG=${TUNE_LOG:-docs/benchmarks/h200/tune_log.jsonl.gz}

say "unpack the CuTe-DSL carry"
if [ -f .cutedsl/cutedsl_carry.sh ]; then
  eval "$(bash .cutedsl/cutedsl_carry.sh unpack .cutedsl /tmp/site)" || echo "cutedsl carry: unpack FAILED"
else
  echo "no .cutedsl carried: the cutedsl backend will be unavailable"
fi
export PYTHONPATH=$PWD:$PWD/.devsite:${PYTHONPATH:-}

say "versions and backends"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -m sglang_fp32gemm bench --versions
  python3 -c "
from sglang_fp32gemm.tools import common
for b in common.all_backends():
    print('backend', b.name, b.libtype, common.available(b))" 2>&1 | tail -n 8
} > $L/versions.txt 2>&1
grep -E 'NVIDIA|backend|"(gpu|driver|torch|triton|cutlass_dsl)"' $L/versions.txt
SGLANG_ENABLE_FLYDSL_FP32_GEMM=1 timeout 60 python3 -m sglang_fp32gemm explain --max-m 8 > $L/explain.txt 2>&1

say "GPU tests"
# Call 5 ran every GPU test; here the routed decode sequence (plugin and router changed since).
timeout -k 5 45 python3 -m pytest -q -p no:cacheprovider -k "routed_decode" tests/test_triton_gpu.py > $L/pytest_gpu.txt 2>&1
echo "pytest rc=$?"; tail -n 6 $L/pytest_gpu.txt

say "bench: eager, decode sequence, deterministic, graph (one process: kernels compile once)"
LOGARG=""; [ -f "$TUNE_LOG" ] && LOGARG="--tune-log $TUNE_LOG" || echo "no $TUNE_LOG: backend columns use first candidates"
timeout -k 10 300 python3 -m sglang_fp32gemm bench --eager --decode-seq --deterministic --graph \
  --m 1,2,4,8,12,16,24,32,40,48,64,96,128 --k 7168 4096 --peer-k 7168 $LOGARG --out-dir $L/bench > $L/bench.txt 2>&1
echo "bench rc=$?"

say "fuzz: 100 random calls through the routed function"
timeout -k 5 40 python3 -m sglang_fp32gemm fuzz --cases 100 --out $L/bench/fuzz.json > $L/fuzz.txt 2>&1
echo "fuzz rc=$?"; tail -n 1 $L/fuzz.txt | cut -c1-300

python3 -m sglang_fp32gemm.tools.targets $L/bench --limit 3 --json $L/bench/targets.json > $OUT/targets.txt 2>&1
for f in bench.md bench.png; do [ -f $L/bench/$f ] && cp $L/bench/$f $OUT/; done
tar czf $OUT/results.tar.gz -C $L .

say "summary"
sed -n '/^== /,$p' $L/bench.txt | cut -c1-170 | tail -n 45
cut -c1-200 $OUT/targets.txt
say "done"
