#!/usr/bin/env bash
# Run 19, call D (device, from the repository root; carry .cutedsl .devsite .vllm_ll): eager calls at the
# shapes whose eager route is still a Triton launch and misses issue 15's 0.8x torch.mm (16f: N 2048/2560
# at M 4-16, 0.80-0.97x; M=32 at N 512-2560, 0.81-0.89x). Our CuTe-DSL kernels launch through TVM-FFI for
# 1.5-2 us less host time than Triton (18b), but at N 2048/2560 the register forms timed so far were slow on
# the GPU, and the streamed forms (W through a ring of shared memory) and the 32-row forms were never timed
# at these shapes.
#  1. tune, isolated rank, cutedsl-mma alone, K=7168: M 4 8 16 at N 2048 2560, then M=32 at N 512-2560.
#     Every candidate is checked for exactness first (float64, NaN-poisoned output). Its table, the best
#     form per shape where it beats torch alone (a torch row where none does, which leaves eager calls on
#     their route), is written as a candidate eager table ($OUT/tune_eager/sm90_19d_*_eager.csv);
#     configs/ is not touched. About 60 + 120 s, then 40 + 60 s.
#  2. scripts/eager_overhead_gpu.py at three shapes routed to Triton: the host time of each layer of the
#     routed path, and the Triton launch that calls Triton's C launcher directly against the one through
#     CompiledKernel.run (added after run 18). About 20 s.
#  3. bench --eager with those tables laid over (eager calls at those shapes then take cutedsl-mma), the
#     backend columns' configs from the committed tune logs and these: host wall time per call of torch.mm,
#     the routed call, Triton alone and cutedsl-mma alone, M 4/8/16/32 x N 512-2560. About 60 s.
# A candidate ships (configs/sm90_eager.csv) only where the routed call is <= 0.8x torch.mm and below the
# Triton route's in the same process. Ran as run 19d (466 s; docs/benchmarks/README.md, run 19).
set -uo pipefail
: "${OUT:?OUT must name the output folder (the device machine sets it)}"
eval "$(bash .cutedsl/cutedsl_carry.sh unpack .cutedsl /tmp/site)"
# apache-tvm-ffi, which cutedsl-mma needs, comes with the vLLM carry
eval "$(bash .vllm_ll/vllm_ll_carry.sh unpack .vllm_ll /tmp/llsite)"
export PYTHONPATH=$PWD/.devsite:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
d=$OUT/tune_eager
mkdir -p "$d"
tune() {  # NAME BUDGET --m ... --n ...
  local name=$1 budget=$2
  shift 2
  timeout -k 10 $((budget + 40)) python3 -m sglang_fp32gemm tune --backends cutedsl-mma "$@" --k 7168 \
    --budget-s "$budget" --no-pin-torch --out "$d/sm90_19d_${name}_eager.csv" --out-det "$d/sm90_19d_${name}_det.csv" \
    --summary "$d/summary_$name.json" --log "$d/tune_log_$name.jsonl.gz" > "$d/tune_$name.txt" 2>&1
  echo "tune $name rc=$?"; tail -n 12 "$d/tune_$name.txt" | cut -c1-200
}
tune n2048 200 --m 4 8 16 --n 2048 2560
tune m32 120 --m 32 --n 512 1024 2048 2560
# Where the host time of a routed eager call goes, at three shapes the packaged tables send to Triton, with the
# Triton launch direct and through CompiledKernel.run side by side (triton_launch.direct_launcher). ~20 s.
timeout -k 10 150 python3 scripts/eager_overhead_gpu.py 4 2048 7168 16 2560 7168 32 1024 7168 \
  > "$d/eager_overhead.txt" 2>&1
echo "eager_overhead rc=$?"; cat "$d/eager_overhead.txt" | cut -c1-220
R=docs/benchmarks/h200
logs=""
# The new logs last: a later log's pick wins a column, so the new forms do where they were timed.
for f in $R/tune_log.jsonl.gz $R/run16/tune_log_serial_16c.jsonl.gz $R/run17/tune_log_17b.jsonl.gz \
    $R/run17/tune_log_17e.jsonl.gz "$d/tune_log_n2048.jsonl.gz" "$d/tune_log_m32.jsonl.gz"; do
  [ -s "$f" ] && logs="$logs $f"
done
tables=""
for f in "$d"/sm90_19d_*_eager.csv; do [ -s "$f" ] && tables=${tables:+$tables:}$f; done
echo "candidate eager tables: ${tables:-none}"
SGLANG_FLYDSL_FP32_GEMM_CONFIG=$tables TUNE_LOG=$R/tune_log.jsonl.gz \
  BENCH_ARGS="--backends triton cutedsl-mma --no-peer --eager-m 4,8,16,32 --eager-n 512 1024 2048 2560 --tune-log $logs" \
  BENCH_TIMEOUT=150 bash scripts/device_run.sh bench:eager
