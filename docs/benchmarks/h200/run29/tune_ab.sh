#!/usr/bin/env bash
# Run 29 (device; from the repository root; carry .cutedsl .devsite .vllm_ll; run 29a-b). One call from a
# region tune to its A/B, for the V4-Pro overlapped rows (what run 28 did by hand in several calls):
#  1. tune --rank region at M in G_M (default 8 16), N given (default 2048 1024 512), K=7168, backends G_BACKENDS
#     (default triton): since stop 41 it times the shipped row's kernel beside the candidates and runs the
#     other fp32 GEMMs as the table routes them (run 28k);
#  2. the rows that differ from the packaged fast table (configs/sm90.csv) go to $OUT/g_tune/changed.csv;
#     none: no A/B;
#  3. region_ab (run20/common.sh): A = those rows laid over the packaged tables, B = the packaged tables,
#     overlapped, the same M, A B A B. Rows ship where A beats B in both pairs, every result exact and every
#     route check holding (run 19c's rule); ab_verdict.py prints that verdict per M (from stop 42; it gives
#     29a-b's, 28g's and 28l's decisions from their folders); the rows of an M that ships are in changed.csv.
#   G_M="8 16" bash docs/benchmarks/h200/run29/tune_ab.sh [N...]   # timeout_s 560
# G_K=4096 tunes V4-Flash's shapes and runs its A/B in V4-Flash's region model (stop 44; default 7168, V4-Pro).
# Since stop 48 changed_rows.py also reads the tune's summary: a pick the tuned device already routes (a row of
# its GPU model's, which the generic rows of SHIPPED do not show) is no change (run 35e A/B'd one against itself);
# and ab_verdict.py ships only past a 0.36 us margin in both pairs (run 35).
# G_BUDGET sets the tune's budget in seconds (default 210; run 39a, an H100, needed ~215 for two shapes at M=2).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/g_tune; mkdir -p "$d"
ns=("$@"); [ ${#ns[@]} -gt 0 ] || ns=(2048 1024 512)
ms=${G_M:-8 16}
k=${G_K:-7168}
budget=${G_BUDGET:-210}
# The region model of the tuned shapes, as the tune itself picks it (region.spec_for): none, no A/B to run.
model=$(python3 -c 'import sys; from sglang_fp32gemm.tools import region
s = region.spec_for(int(sys.argv[1]), int(sys.argv[2])); print(s.name if s else "")' "${ns[0]}" "$k")
[ -n "$model" ] || { echo "tune_ab.sh: no shipped region model has N=${ns[0]} K=$k"; exit 2; }
# shellcheck disable=SC2086
timeout -k 10 $((budget + 40)) python3 -m sglang_fp32gemm tune --rank region --backends ${G_BACKENDS:-triton} --m $ms \
  --n "${ns[@]}" --k "$k" --budget-s "$budget" --out "$d/sm90_29_region.csv" --summary "$d/summary.json" \
  --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 10 | cut -c1-260
python3 docs/benchmarks/h200/run29/changed_rows.py --summary "$d/summary.json" configs/sm90.csv "$d/sm90_29_region.csv" \
  "$d/changed.csv" || exit 0
region_ab "$d/changed.csv" 70 --region-m "$(echo $ms | tr ' ' ',')" --region-schedule overlapped --region-model $model
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
