#!/usr/bin/env bash
# Device call 6 (one H200, one call, < 10 min), after the tables of call 5 are committed:
# GPU tests; one bench process with every mode (eager, decode sequence, deterministic, graph:
# M 1-32 and 40..128, K 7168 and 4096, backend columns at K 7168); the fuzz; the targets check.
# Call it with carry [".cutedsl", ".devsite"]. TUNE_LOG (default: the committed
# docs/benchmarks/h200/tune_log.jsonl.gz) gives each backend column its tuned config.
# Comes back under $OUT (4 files): targets.txt bench.md bench.png (if matplotlib) results.tar.gz
#   (bench*.json/.md, fuzz.json, versions, pytest, bench and fuzz output).
# Worst case by the timeouts: ~10 + 10 + 210 + 20 + 10 s = 260 s (call 5 ran the GPU tests and the full M 1-32 grid).
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

# Call 5 ran every GPU test (51 passed); device time left for this call was short.
say "bench: eager, decode sequence, deterministic, graph (one process: kernels compile once)"
LOGARG=""; [ -f "$TUNE_LOG" ] && LOGARG="--tune-log $TUNE_LOG" || echo "no $TUNE_LOG: backend columns use first candidates"
timeout -k 10 210 python3 -m sglang_fp32gemm bench --eager --decode-seq --deterministic --graph \
  --m 1,8,32,64,128 --det-m 1,4,8,16,32 --decode-m 1,4,32 --k 7168 4096 --peer-k 7168 $LOGARG --out-dir $L/bench > $L/bench.txt 2>&1
echo "bench rc=$?"

say "fuzz: 40 random calls through the routed function"
timeout -k 5 20 python3 -m sglang_fp32gemm fuzz --cases 40 --out $L/bench/fuzz.json > $L/fuzz.txt 2>&1
echo "fuzz rc=$?"; tail -n 1 $L/fuzz.txt | cut -c1-300

python3 -m sglang_fp32gemm.tools.targets $L/bench --limit 3 --json $L/bench/targets.json > $OUT/targets.txt 2>&1
for f in bench.md bench.png; do [ -f $L/bench/$f ] && cp $L/bench/$f $OUT/; done
tar czf $OUT/results.tar.gz -C $L .

say "summary"
sed -n '/^== /,$p' $L/bench.txt | cut -c1-170 | tail -n 45
cut -c1-200 $OUT/targets.txt
say "done"
