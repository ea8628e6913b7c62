#!/usr/bin/env bash
# Run 18c (device, from the repository root): V4-Pro's overlapped decode region at M 4 and 8, twice each
# way in one call, alternating: A = run 17's cutedsl-mma rows at N=1024 M 4/8 (sm90_run17_rows.csv laid over
# the packaged tables; in 18c, at efb3639, they were the packaged rows), B = the rows they had replaced
# (sm90_before_17.csv, the packaged rows since run 18). Output: $OUT/ab/{A,B}{1,2}/.
# Carry .cutedsl .devsite .vllm_ll: apache-tvm-ffi, which cutedsl-mma needs, comes with the last (run 18c
# carried only the first two, so A's rows fell back to torch and its route check failed).
set -uo pipefail
eval "$(bash .cutedsl/cutedsl_carry.sh unpack .cutedsl /tmp/site)"
[ -f .vllm_ll/vllm_ll_carry.sh ] && eval "$(bash .vllm_ll/vllm_ll_carry.sh unpack .vllm_ll /tmp/llsite)"
export PYTHONPATH=$PWD/.devsite:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
R=docs/benchmarks/h200/run18
for i in 1 2; do
  for v in A B; do
    d=$OUT/ab/$v$i; mkdir -p "$d"
    cfg=$R/sm90_run17_rows.csv; [ $v = B ] && cfg=$R/sm90_before_17.csv
    SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout 60 python3 -m sglang_fp32gemm bench --region --region-model pro \
      --region-m 4,8 --region-schedule overlapped --backends triton --no-peer \
      --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$d" > "$d/bench.txt" 2>&1
    echo "$v$i rc=$?"; grep "region pro" "$d/bench.txt" | cut -c1-200
  done
done
