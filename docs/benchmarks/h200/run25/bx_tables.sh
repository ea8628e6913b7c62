#!/usr/bin/env bash
# Run 25 (device, an H200; from the repository root; carry .cutedsl .devsite .vllm_ll; ran as 25c (tune) and
# 25d (ab)). The serial
# table's rows at M 2 and 4 (V4-Pro, K=7168) re-tuned with the dot kernel's _bx forms, which run 24c found
# 0.5-0.7 us a call faster than the plain forms at M=2 and 2.0-2.8 at M=4. Isolated calls take the serial
# table too, and run 24b's largest isolated misses were at M=2 (the plain dot forms, 1.04-1.12x ll_bf16).
#   bash docs/benchmarks/h200/run25/bx_tables.sh tune [N...]  # timeout_s 580: tune --rank serial, cutedsl-dot
#       # (every form), Triton, SGLang's CuTe-DSL kernel (4 forms), M 2 4, N 1024 2048 512 2560 unless named
#       # (most used first: N=1024 is every ratio-128 layer's call; the budget keeps the shapes it finished,
#       # so a second call can name the rest); rows in $OUT/bx_tune/sm90_25_serial.csv, then the best of each
#       # family per shape from the tune log. BX_M="1" (or "1 2 4") tunes (and, with ab, A/Bs) other M: M=1 for the _mb1 forms
#       # (stop 37), once run25/m1.sh has shown them faster alone.
#   bash docs/benchmarks/h200/run25/bx_tables.sh ab ROWS     # timeout_s 560: A = ROWS (the tune's CSV, copied
#       # into the repository) laid over the packaged tables, B = the packaged tables. The serial schedule,
#       # V4-Pro, M 2 and 4, A B A B (region_ab); then isolated calls (graph replay, M 2 and 4, N 512-2560,
#       # with ll_bf16 at its best config), A then B. A row ships where A beats B in both serial pairs and
#       # is not slower alone.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
logs="docs/benchmarks/h200/tune_log.jsonl.gz docs/benchmarks/h200/run16/tune_log_serial_16b.jsonl.gz"
case ${1:?tune or ab} in
  tune)
    d=$OUT/bx_tune; mkdir -p "$d"
    shift; ns=("$@"); [ ${#ns[@]} -gt 0 ] || ns=(1024 2048 512 2560)
    timeout -k 10 540 python3 -m sglang_fp32gemm tune --rank serial --backends cutedsl-dot triton cutedsl \
      --m ${BX_M:-2 4} --n "${ns[@]}" --k 7168 --budget-s 500 --out "$d/sm90_25_serial.csv" \
      --summary "$d/summary.json" --log "$d/tune_log.jsonl.gz" > "$d/tune.txt" 2>&1
    echo "tune rc=$?"; grep -v '^tune:' "$d/tune.txt" | tail -n 12 | cut -c1-220
    grep -v '^gfx' "$d/sm90_25_serial.csv" | cut -d, -f3-5,11,14,15
    python3 docs/benchmarks/h200/run25/best_forms.py "$d/tune_log.jsonl.gz"
    ;;
  ab)
    rows=${2:?the tuned rows (a CSV in the repository)}
    # The file's name picks its table: *_serial.csv rows serve only calls outside the region (before stop 38
    # they were also the only user rows to reach those calls: run 25f's, named otherwise, made an A/A).
    case $rows in *_serial.csv) ;; *) echo "bx_tables.sh: $rows: name it *_serial.csv"; exit 2 ;; esac
    ms=$(echo ${BX_M:-2 4} | tr " " ",")
    region_ab "$rows" 60 --region-m "$ms" --region-schedule serial
    for v in A B; do
      o=$OUT/iso/$v; mkdir -p "$o"
      cfg=$rows; [ $v = B ] && cfg=
      # shellcheck disable=SC2086
      SGLANG_FLYDSL_FP32_GEMM_CONFIG=$cfg timeout -k 5 100 python3 -m sglang_fp32gemm bench --graph \
        --backends cutedsl --m "$ms" --n 512 1024 2048 2560 --k 7168 --tune-log $logs --out-dir "$o" \
        > "$o/bench.txt" 2>&1
      echo "isolated $v rc=$?"; grep -E "precision|routed/torch" "$o/bench.txt" | cut -c1-200
      sed -n '/^== Isolated/,/^routed\/torch/p' "$o/bench.txt" | cut -c1-200
    done
    ;;
  *) echo "bx_tables.sh: tune or ab ROWS"; exit 2 ;;
esac
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
