#!/usr/bin/env bash
# Run 32 (device; from the repository root; carry .cutedsl .devsite .vllm_ll). Isolated calls take the serial
# table (configs/sm90_serial.csv). Since stop 44 V4-Pro's pair rows cover M 1-64, so in a serial step a
# ratio-4 layer's N=512 and N=2048 GEMMs run as one pair launch and never read the serial table's single
# rows at K=7168 N 512 / 2048 (nor N=2560, the fused ROCm-only call): those rows now serve only calls alone
# (and eager calls with no eager row). They were ranked in the serial schedule; this ranks them alone:
#  1. tune --rank isolated at K=7168, M in G_M (default 2 4), N given (default 512 2048 2560), backends
#     G_BACKENDS (default cutedsl-dot triton), budget G_BUDGET s (default 270);
#  2. its non-torch rows that differ from the serial table -> $OUT/iso_tune/sm90_32_iso_serial.csv (the
#     _serial name puts them in the serial table when laid over; as run in 32a-d an inline filter wrote them,
#     changed_rows.py --kernels-only since, the same rows);
#  3. isolated calls (graph replay; torch, SGLang's CuTe-DSL kernel, ll_bf16 at its best config, routed) at
#     those M and N: A = the rows laid over the packaged tables, then B = the packaged tables.
# A row ships where A's routed is below B's at its shape, the result exact (N=1024 is left out: its single
# rows serve every ratio-128 layer's serial call, so the serial schedule decides there).
#   G_M="2 4" bash docs/benchmarks/h200/run32/iso_tune_ab.sh [N...]   # timeout_s 580
# As run (32a-d) the tune left the shipped rows out (--no-vs-shipped: with --rank isolated it would have timed the
# fast table's). The tuner has --serial-table since (stop 45): with it the serial table's shipped row is a finalist.
# Since stop 48 changed_rows.py also reads the tune's summary: a pick the tuned device already routes (a row of
# its GPU model's, which the generic rows of SHIPPED do not show) is no change (run 35e A/B'd one against itself);
# and ab_verdict.py ships only past a 0.36 us margin in both pairs (run 35).
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/iso_tune; mkdir -p "$d"
ns=("$@"); [ ${#ns[@]} -gt 0 ] || ns=(512 2048 2560)
ms=${G_M:-2 4}
budget=${G_BUDGET:-270}
logs="docs/benchmarks/h200/tune_log.jsonl.gz docs/benchmarks/h200/run16/tune_log_serial_16b.jsonl.gz"
# shellcheck disable=SC2086
timeout -k 10 $((budget + 40)) python3 -m sglang_fp32gemm tune --rank isolated --no-vs-shipped \
  --backends ${G_BACKENDS:-cutedsl-dot triton} --m $ms --n "${ns[@]}" --k 7168 --budget-s "$budget" \
  --out "$d/iso.csv" --summary "$d/summary.json" --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 12 | cut -c1-260
rows=$d/sm90_32_iso_serial.csv
python3 docs/benchmarks/h200/run29/changed_rows.py --kernels-only --summary "$d/summary.json" configs/sm90_serial.csv \
  "$d/iso.csv" "$rows" || exit 0
for v in A B; do
  o=$OUT/iso/$v; mkdir -p "$o"; cfg=$rows; [ $v = B ] && cfg=
  # shellcheck disable=SC2086
  SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout -k 5 120 python3 -m sglang_fp32gemm bench --graph --backends cutedsl \
    --m "$(echo $ms | tr ' ' ',')" --n "${ns[@]}" --k 7168 --tune-log $logs --out-dir "$o" > "$o/bench.txt" 2>&1
  echo "isolated $v rc=$?"; grep -E "precision|routed/torch" "$o/bench.txt" | cut -c1-200
  sed -n '/^== Isolated/,/^routed\/torch/p' "$o/bench.txt" | cut -c1-200
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
