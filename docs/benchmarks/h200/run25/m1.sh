#!/usr/bin/env bash
# Run 25 (device, an H200; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 560; not yet
# run). M=1, where run 24b's isolated calls were 1.03-1.06x ll_bf16 at N 1024-2560 (K=7168):
#  1. the dot kernel's GPU tests (about 190 forms: every M=4 candidate at M 1-4, _bx_mb1 included), and M=1's
#     _mb1 forms (the launch's one-CTA-an-SM hint, stop 37: ptxas then issues every x load before the first
#     multiply in the forms of 128-224 threads, which can keep 7-8 rows of W an SM in flight where the routed
#     t448_r1 keeps 4);
#  2. tune --rank isolated, cutedsl-dot alone, M=1, N 1024 2048 2560: every form's time alone (its log), the
#     best plain and best _mb1 form per N printed;
#  3. bench --graph at M=1, N 512-2560: torch, routed (the serial table), cutedsl-dot at 2's best form, and
#     ll_bf16 at its best config, whose sweep now includes the instance vLLM itself calls at M=1 (W loaded
#     before the PDL wait, `_pdl`): whether the M=1 peer was understated in runs up to 24.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/m1; mkdir -p "$d"
timeout -k 10 250 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_cutedsl_dot_gpu.py > "$d/pytest_dot_gpu.txt" 2>&1
echo "dot GPU tests rc=$?"; tail -n 3 "$d/pytest_dot_gpu.txt" | cut -c1-200
timeout -k 10 150 python3 -m sglang_fp32gemm tune --rank isolated --backends cutedsl-dot --m 1 --n 1024 2048 2560 \
  --k 7168 --budget-s 120 --out "$d/sm90_25_m1.csv" --summary "$d/summary.json" --log "$d/tune_log.jsonl.gz" \
  > "$d/tune.txt" 2>&1
echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 5 | cut -c1-220
python3 docs/benchmarks/h200/run25/best_forms.py "$d/tune_log.jsonl.gz"
timeout -k 10 120 python3 -m sglang_fp32gemm bench --graph --backends cutedsl-dot --m 1 --n 512 1024 2048 2560 \
  --k 7168 --tune-log "$d/tune_log.jsonl.gz" docs/benchmarks/h200/tune_log.jsonl.gz --out-dir "$d/bench" \
  > "$d/bench.txt" 2>&1
echo "bench rc=$?"; grep -E "precision|routed/torch" "$d/bench.txt" | cut -c1-200
sed -n '/^== Isolated/,/^routed\/torch/p' "$d/bench.txt" | cut -c1-220
python3 - "$d/bench/bench.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print("N=%d vllm_ll %s sweep %s" % (r["N"], r.get("kernel", {}).get("vllm_ll"), r.get("peer_sweep")))
PY
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
