#!/usr/bin/env bash
# Run 19 (device, from the repository root; carry .cutedsl .devsite .vllm_ll): the decode region again,
# each mode now captured in interleaved rounds and its median capture counted (bench --region-rounds).
#  0. capture_diag.py at V4-Pro M 4 and 8 (6 graphs of each of two modes kept, replayed in three passes;
#     captured as the timer does, then as SGLang's graph runner does: one capture stream, one shared pool):
#     is a slow capture slow for good (the graph instance) or for a while (the GPU), and does SGLang's way
#     of capturing have them? ~30 s. $OUT/diag/.
#  1. The A/B run 18 could not settle: V4-Pro overlapped at M 4 and 8, run 17's cutedsl-mma rows at
#     N=1024 (A: run18/sm90_run17_rows.csv laid over the packaged tables) against the packaged rows
#     (B: run18/sm90_before_17.csv, the same as packaged), 5 rounds, twice each way, alternating
#     processes: ~20 s a process. Output $OUT/ab/{A,B}{1,2}/.
#  2. The headline region table with the shipped tables: V4-Pro and V4-Flash, M 1-64, both schedules,
#     3 rounds (the default), backend columns Triton and cutedsl-mma, vLLM's ll_bf16, captured as SGLang's
#     graph runner captures (--capture sglang: one capture stream, one shared memory pool; the A/B above
#     keeps the timer's old way, so that a fault of the new one cannot cost both): ~5-6 minutes (a
#     timeout writes the rows done; V4-Pro's come first).
#     Output $OUT/bench/ (scripts/device_run.sh, which also packs everything into results.tar.gz).
# Estimates are from run 18's capture times (about 0.4 s a capture). Ran as run 19b in 338 s; run it
# as a call of its own (timeout_s 600).
set -uo pipefail
: "${OUT:?OUT must name the output folder (the device machine sets it)}"
eval "$(bash .cutedsl/cutedsl_carry.sh unpack .cutedsl /tmp/site)"
# apache-tvm-ffi, which cutedsl-mma needs, comes with the vLLM carry (run 18c lacked it)
eval "$(bash .vllm_ll/vllm_ll_carry.sh unpack .vllm_ll /tmp/llsite)"
export PYTHONPATH=$PWD/.devsite:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for m in 4 8; do
  timeout 90 python3 docs/benchmarks/h200/run19/capture_diag.py --m $m "$OUT/diag" 2>&1 | tail -n 34
done
R=docs/benchmarks/h200/run18
for i in 1 2; do
  for v in A B; do
    d=$OUT/ab/$v$i; mkdir -p "$d"
    cfg=$R/sm90_run17_rows.csv; [ $v = B ] && cfg=$R/sm90_before_17.csv
    SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout 90 python3 -m sglang_fp32gemm bench --region --region-model pro \
      --region-m 4,8 --region-schedule overlapped --region-rounds 5 --backends triton --no-peer \
      --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$d" > "$d/bench.txt" 2>&1
    echo "$v$i rc=$?"; grep "region pro" "$d/bench.txt" | cut -c1-240
  done
done
BENCH_ARGS="--backends triton cutedsl-mma --region-model pro,flash --region-m 1,2,4,8,16,32,64 --capture sglang" \
  BENCH_TIMEOUT=340 bash scripts/device_run.sh versions bench:region
