#!/usr/bin/env bash
# Run 32g (device; from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 230). Run 32 ranked the
# serial table's rows at K=7168 N 512 / 2048 / 2560 by time alone, on the premise that V4-Pro's serial steps
# never read them at M 1-64 (each ratio-4 layer's N=512 and N=2048 GEMMs run as one pair launch,
# configs/sm90_pair.csv). This checks it: the V4-Pro serial schedule with the shipped tables, M 2 4 8 16, three
# rounds, torch / routed / Triton / ll_bf16; the route check lists the kernel each captured call ran.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
o=$OUT/serial; mkdir -p "$o"
timeout -k 5 ${SERIAL_S:-190} python3 -m sglang_fp32gemm bench --region --region-model pro --region-m "${SERIAL_M:-2,4,8,16}" \
  --region-schedule serial --region-rounds 3 --backends triton --tune-log docs/benchmarks/h200/tune_log.jsonl.gz \
  --out-dir "$o" > "$o/bench.txt" 2>&1
echo "bench rc=$?"; grep -E "\] region|route check|precision|SUSPECT" "$o/bench.txt" | cut -c1-400
sed -n '/^== /,$p' "$o/bench.txt" | cut -c1-170 | tail -n 20
