#!/usr/bin/env bash
# Run 20, calls A and B (device, from the repository root; carry .cutedsl .devsite .vllm_ll): V4-Pro's
# overlapped region ranked with what run 19 added to cutedsl-mma's candidates (push forms; M 1-2), at the
# shapes run 19c did not reach, then an A/B of the whole region. One set of shapes a call:
#   bash docs/benchmarks/h200/run20/region_push.sh n1024   # A: N=1024 at M 1 2 16 (the dot kernel's
#                                                          #    rows at M 1-2 against light mma forms)
#   bash docs/benchmarks/h200/run20/region_push.sh n2048   # B: N=2048 at M 4 8 16 (the wkv_gate of the
#                                                          #    compress-ratio-4 layers)
#  1. tune --rank region, K=7168, Triton, cutedsl-mma and (A) cutedsl-dot. Every candidate is checked exact
#     first. About 70 s of compiling, then about 25 s a shape.
#  2. A/B of the whole overlapped region at the set's M: A = the packaged tables with step 1's fast rows laid
#     over (the shapes it reached: a row pinned to torch without a time, for an M it did not reach, is
#     dropped), B = the packaged tables; 3 rounds each, A B A B, one process each. About 4 x 25 s.
# Nothing ships from this call: a row ships where A beats B in both pairs (as run 19c's did).
# About 330 s: a call of its own (timeout_s 450).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
d=$OUT/tune_region
mkdir -p "$d"
tune() {  # NAME BUDGET --backends ... --m ... --n ...
  local name=$1 budget=$2
  shift 2
  timeout -k 10 $((budget + 40)) python3 -m sglang_fp32gemm tune --rank region "$@" --k 7168 --budget-s "$budget" \
    --out "$d/sm90_20a_$name.csv" --out-det "$d/sm90_20a_${name}_det.csv" \
    --out-eager "$d/sm90_20a_${name}_eager.csv" --summary "$d/summary_$name.json" \
    --log "$d/tune_log_$name.jsonl.gz" > "$d/tune_$name.txt" 2>&1
  echo "tune $name rc=$?"; grep -v '^tune:' "$d/tune_$name.txt" | tail -n 6 | cut -c1-220
  # the fast rows of the shapes reached (a pin for an M not reached has no time: column 14 is 0.0)
  [ -s "$d/sm90_20a_$name.csv" ] && awk -F, 'NR == 1 || $14 != "0.0"' "$d/sm90_20a_$name.csv" > "$d/rows_$name.csv"
}
case "${1:-}" in
  n1024) tune n1024 170 --backends triton cutedsl-mma cutedsl-dot --m 1 2 16 --n 1024; ms=1,2,16 ;;
  n2048) tune n2048 170 --backends triton cutedsl-mma --m 4 8 16 --n 2048; ms=4,8,16 ;;
  *) echo "usage: region_push.sh n1024|n2048"; exit 2 ;;
esac
rows=""
for f in "$d"/rows_*.csv; do [ "$(wc -l < "$f")" -gt 1 ] && rows=${rows:+$rows:}$f; done
echo "rows laid over in A: ${rows:-none}"; [ -n "$rows" ] && cat "$d"/rows_*.csv | grep -v '^gfx' | cut -d, -f3-5,11,14,15
[ -n "$rows" ] || exit 0
region_ab "$rows" 40 --region-m "$ms" --region-schedule overlapped --no-peer
