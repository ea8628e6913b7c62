#!/usr/bin/env bash
# Run 25, a short call (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 100). One
# untuned _mb1 form at M=1 before run25/m1.sh tunes them: bench --graph, M=1, N 1024 2048 2560, K=7168, with
# run25/sm90_25_mb1_probe_serial.csv laid over the packaged tables (so routed = cutedsl_dot_m1_t224_r1_pdl_mb1,
# probed for exactness at bind as every routed kernel is), beside torch, cutedsl-dot at its tuned form (the
# tune log: the plain forms), and ll_bf16 at its best config, the sweep with vLLM's prefetching M=1 instance.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
o=$OUT/mb1_probe; mkdir -p "$o"
SGLANG_FLYDSL_FP32_GEMM_CONFIG=docs/benchmarks/h200/run25/sm90_25_mb1_probe_serial.csv timeout -k 5 75 \
  python3 -m sglang_fp32gemm bench --graph --backends cutedsl-dot --m 1 --n 1024 2048 2560 --k 7168 \
  --tune-log docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$o" > "$o/bench.txt" 2>&1
echo "bench rc=$?"; grep -E "precision|routed/torch" "$o/bench.txt" | cut -c1-200
sed -n '/^== Isolated/,/^routed\/torch/p' "$o/bench.txt" | cut -c1-220
python3 - "$o/bench.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print("N=%d us %s route %s dot %s ll %s sweep %s" % (r["N"], r["us"], r.get("route"), r.get("kernel", {}).get("cutedsl-dot"),
          r.get("kernel", {}).get("vllm_ll"), r.get("peer_sweep")))
PY
