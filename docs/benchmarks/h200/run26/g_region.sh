#!/usr/bin/env bash
# Run 26 (device, an H200; from the repository root; carry .cutedsl .devsite .vllm_ll; not yet run). Only after
# run26/overlap.sh: if its capped dot modes added clearly less than the plain dot form beside the other streams,
# the region tune ranks the dot kernel's _g forms (stop 39) where they are meant to help, and an A/B checks the
# rows it picks.
#   bash docs/benchmarks/h200/run26/g_region.sh tune [N...]  # timeout_s 580: tune --rank region, cutedsl-dot (its
#       # candidates include up to 8 _g forms a shape; the region rank's finalists include each backend's
#       # lightest launches) and Triton, V4-Pro K=7168, M in G_M (default 1 2), N 2048 512 unless named (the
#       # ratio-4 layers' two GEMMs, where run 14b's dot forms added 84-99% of their time alone and torch's rows
#       # stand); rows in $OUT/g_tune/sm90_26_region.csv (the fast table: the overlapped region's), then the best
#       # of each family per shape from the tune log. G_BACKENDS names other backends (run 26f: cutedsl-mma too,
#       # whose forms the shipped rows at N=1024 M 4-8 are); G_K another K (4096: V4-Flash).
#   bash docs/benchmarks/h200/run26/g_region.sh ab ROWS     # timeout_s 560: A = ROWS (copied into the repository)
#       # laid over the packaged tables, B = the packaged tables; V4-Pro, overlapped, M in G_M, A B A B
#       # (region_ab, 3 rounds a process). A row ships where A beats B in both pairs, every result exact and
#       # every route check holding.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
case ${1:?tune or ab} in
  tune)
    d=$OUT/g_tune; mkdir -p "$d"
    shift; ns=("$@"); [ ${#ns[@]} -gt 0 ] || ns=(2048 512)
    # shellcheck disable=SC2086
    timeout -k 10 540 python3 -m sglang_fp32gemm tune --rank region --backends ${G_BACKENDS:-cutedsl-dot triton} \
      --m ${G_M:-1 2} --n "${ns[@]}" --k ${G_K:-7168} --budget-s 500 --out "$d/sm90_26_region.csv" \
      --summary "$d/summary.json" --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
    echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 12 | cut -c1-220
    grep -v '^gfx' "$d/sm90_26_region.csv" | cut -d, -f3-5,11,14,15
    python3 docs/benchmarks/h200/run25/best_forms.py "$d/tune_log.jsonl.gz" | grep -E " region "
    ;;
  ab)
    rows=${2:?the tuned rows (a CSV in the repository)}
    case $rows in *_serial.csv|*_pair.csv|*_eager.csv|*_deterministic.csv)
      echo "g_region.sh: $rows: the overlapped region's rows are the fast table's (not *_serial/_pair/_eager)"; exit 2 ;;
    esac
    region_ab "$rows" 120 --region-m "$(echo ${G_M:-1 2} | tr ' ' ',')" --region-schedule overlapped
    ;;
  *) echo "g_region.sh: tune or ab ROWS"; exit 2 ;;
esac
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
