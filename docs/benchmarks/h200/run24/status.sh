#!/usr/bin/env bash
# Run 24 (device, an H200 wanted: issue 15's targets are set there; from the repository root; carry .cutedsl
# .devsite .vllm_ll; region: runs 24a and 27a, isolated: 24b). Where the shipped tables stand,
# configs/sm90_pair.csv included, one part a call:
#   bash docs/benchmarks/h200/run24/status.sh region     # timeout_s 560: V4-Pro and V4-Flash, overlapped and
#       # serial, M 1 2 4 8 16 32, 3 rounds, torch / routed / Triton / ll_bf16 in each process (the serial rows
#       # after an overlapped capture), then the targets check. Run 23 measured V4-Pro serial on an H100 only.
#       # STATUS_M=1,2,4,8,16,32,64 adds M=64 (the overlapped 0.7x target's last M; stop 40).
#       # STATUS_MODELS=pro: V4-Pro alone, about half the time (stop 43: a call with little device time left).
#   bash docs/benchmarks/h200/run24/status.sh isolated   # timeout_s 560: isolated calls under graph replay
#       # (K=7168, N 512-2560, M 1 2 4 8 16 32; torch, SGLang's CuTe-DSL kernel, ll_bf16 at its best config,
#       # routed) and eager calls (host and wall time, the same shapes), then the targets check. The isolated
#       # target was last measured in run 16c, against vLLM 0.33.0.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
part=${1:?region or isolated}
o=$OUT/$part; mkdir -p "$o"
logs="docs/benchmarks/h200/tune_log.jsonl.gz docs/benchmarks/h200/run16/tune_log_serial_16b.jsonl.gz"
case $part in
  region)
    # shellcheck disable=SC2086
    timeout -k 10 500 python3 -m sglang_fp32gemm bench --region --region-model "${STATUS_MODELS:-pro,flash}" \
      --region-m "${STATUS_M:-1,2,4,8,16,32}" --region-schedule overlapped,serial --region-rounds 3 --backends triton \
      --tune-log $logs --out-dir "$o" > "$o/bench.txt" 2>&1 ;;
  isolated)
    # shellcheck disable=SC2086
    timeout -k 10 500 python3 -m sglang_fp32gemm bench --graph --eager --backends cutedsl \
      --m 1,2,4,8,16,32 --n 512 1024 2048 2560 --k 7168 --eager-m 1,2,4,8,16,32 --eager-n 512 1024 2048 2560 \
      --tune-log $logs --out-dir "$o" > "$o/bench.txt" 2>&1 ;;
  *) echo "status.sh: region or isolated"; exit 2 ;;
esac
echo "bench rc=$?"; grep -E "\] region|route check|precision|SUSPECT" "$o/bench.txt" | cut -c1-300
sed -n '/^== /,$p' "$o/bench.txt" | cut -c1-170 | tail -n 30
python3 -m sglang_fp32gemm.tools.targets "$o" --limit 3 --json "$o/targets.json" > "$o/targets.txt" 2>&1
grep -E "^(PASS|FAIL)" "$o/targets.txt" | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
