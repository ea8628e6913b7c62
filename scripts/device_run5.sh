#!/usr/bin/env bash
# Device call 5 (one H200, one call, < 10 min): the CuTe-DSL carry, versions, GPU tests, the
# all-backend tuner (both tables), then the graph bench for M 1-32 at K=7168 (every N) with a
# column per backend. Call it with carry [".cutedsl", ".devsite"]:
#   .cutedsl  nvidia-cutlass-dsl 4.8.0 packed by ../shared/tools/cutedsl_carry.sh
#   .devsite  sglang/kernels/ops/gemm/dense_bf16_gemm_warp_splitk.py in a minimal package
# Comes back under $OUT (7 files): sm90.csv sm90_deterministic.csv tune_log.jsonl.gz
#   bench.json bench.md bench.png (if matplotlib) logs.tar.gz (versions, pytest, tune and bench
#   output, tune summary, explain).
# Worst case by the timeouts: ~10 + 10 + 90 + 290 + 160 + 10 s = 570 s.
set -uo pipefail
T0=$(date +%s)
say() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
L=/tmp/run5; mkdir -p $L/bench
export PYTHONUNBUFFERED=1

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
  python3 -c "import sglang.kernels.ops.gemm.dense_bf16_gemm_warp_splitk as k; print('CuTe-DSL kernel imports:', k.__file__)" 2>&1 | tail -n 1
  python3 -c "
from sglang_fp32gemm.tools import common
for b in common.all_backends():
    print('backend', b.name, b.libtype, common.available(b))" 2>&1 | tail -n 8
} > $L/versions.txt 2>&1
cat $L/versions.txt | grep -v '^ *"\(python\|hip\|sms\|l2_bytes\|sglang\)"'

say "GPU tests"
timeout -k 5 90 python3 -m pytest -q -x -p no:cacheprovider $(ls tests/test_*gpu*.py) > $L/pytest_gpu.txt 2>&1
echo "pytest rc=$?"; tail -n 6 $L/pytest_gpu.txt

say "tune: every backend, M 1..128, N 512/1024/2048/2560, K 7168 then 4096 (budget 260 s)"
timeout -k 10 290 python3 -m sglang_fp32gemm tune --budget-s 260 --out $OUT/sm90.csv \
  --out-det $OUT/sm90_deterministic.csv --summary $L/tune_summary.json --log $L/tune_log.jsonl > $L/tune.txt 2>&1
echo "tune rc=$?"; grep -v '^\[' $L/tune.txt | tail -n 14 | cut -c1-200
gzip -c $L/tune_log.jsonl > $OUT/tune_log.jsonl.gz

say "install the new tables"
cp configs/sm90.csv $L/sm90.orig.csv
[ -s $OUT/sm90.csv ] && cp $OUT/sm90.csv configs/sm90.csv
[ -s $OUT/sm90_deterministic.csv ] && cp $OUT/sm90_deterministic.csv configs/sm90_deterministic.csv
if ! python3 -c "from sglang_fp32gemm.table import TunedTable; print(len(TunedTable.load()), 'rows load')"; then
  echo "THE NEW TABLES DO NOT LOAD: the bench runs on the old sm90.csv"
  cp $L/sm90.orig.csv configs/sm90.csv; rm -f configs/sm90_deterministic.csv
fi
SGLANG_ENABLE_FLYDSL_FP32_GEMM=1 timeout 60 python3 -m sglang_fp32gemm explain --max-m 32 > $L/explain.txt 2>&1
echo "explain rc=$?"

say "bench: graph, M 1-32, K 7168, every N, a column per backend"
timeout -k 10 160 python3 -m sglang_fp32gemm bench --graph --m 1-32 --k 7168 --tune-log $L/tune_log.jsonl \
  --out-dir $L/bench > $L/bench.txt 2>&1
echo "bench rc=$?"
for f in bench.json bench.md bench.png; do [ -f $L/bench/$f ] && cp $L/bench/$f $OUT/; done
python3 -m sglang_fp32gemm.tools.targets $L/bench --limit 3 > $L/targets.txt 2>&1
tar czf $OUT/logs.tar.gz -C $L --exclude=tune_log.jsonl --exclude=bench .

say "summary"
grep '^\[' $L/tune.txt | cut -c1-150 | tail -n 24
sed -n "/^== /,\$p" $L/bench.txt | cut -c1-170 | tail -n 30
cut -c1-200 $L/targets.txt
say "done"
