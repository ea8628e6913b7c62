#!/usr/bin/env bash
# Run 33g (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 590). A serial-table
# row at N=1024 (every ratio-128 layer's serial call reads it, so the serial schedule ranks it) with the
# cutedsl-dot PDL placements among the candidates (stop 46):
#  1. tune --rank serial at K=7168, M=G_M (default 4), N=1024, backends cutedsl-dot and Triton, budget G_BUDGET s
#     (default 230): the shipped serial row is a finalist. As run (33g, budget 130 s, on a machine with 305 s
#     left) the budget ended during the shape, after its screen: no row, no A/B; the screen is in its log;
#  2. its non-torch rows that differ from configs/sm90_serial.csv -> $OUT/s_tune/sm90_33_serial.csv; none: stop;
#  3. region_ab (run20/common.sh), V4-Pro serial at M=G_M, A B A B, 50 s a process; ab_verdict.py says whether
#     it ships (A below B in both pairs, every result exact, every route check holding).
#   G_M=4 bash docs/benchmarks/h200/run33/serial_tune_ab.sh
# Since stop 48 changed_rows.py also reads the tune's summary: a pick the tuned device already routes (a row of
# its GPU model's, which the generic rows of SHIPPED do not show) is no change (run 35e A/B'd one against itself);
# and ab_verdict.py ships only past a 0.36 us margin in both pairs (run 35).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/s_tune; mkdir -p "$d"
m=${G_M:-4}
budget=${G_BUDGET:-230}
timeout -k 10 $((budget + 40)) python3 -m sglang_fp32gemm tune --rank serial --backends cutedsl-dot triton --m "$m" \
  --n 1024 --k 7168 --budget-s "$budget" --out "$d/s_serial.csv" --summary "$d/summary.json" \
  --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 8 | cut -c1-260
rows=$d/sm90_33_serial.csv
python3 docs/benchmarks/h200/run29/changed_rows.py --kernels-only --summary "$d/summary.json" configs/sm90_serial.csv \
  "$d/s_serial.csv" "$rows" || exit 0
region_ab "$rows" 50 --region-m "$m" --region-schedule serial
python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
