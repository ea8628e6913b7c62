#!/usr/bin/env bash
# Run 29d (device; from the repository root; carry .cutedsl .devsite .vllm_ll): eager calls alone, M 1-32,
# N 512-2560, K=7168: torch.mm, the routed call, the hooked call and SGLang's CuTe-DSL kernel, wall and host
# (enqueue) time per call; then the targets check. status.sh isolated does this after its graph part; this is
# the eager part alone (about 80 s on an H100). common.sh puts the CuTe DSL carry on the path: 29c ran the
# same bench without it, so every CuTe-DSL row fell back to torch (its folder says so).
#   bash docs/benchmarks/h200/run29/eager.sh     # timeout_s 140
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
o=$OUT/eager; mkdir -p "$o"
timeout -k 5 100 python3 -m sglang_fp32gemm bench --eager --backends cutedsl --eager-m 1,2,4,8,16,32 \
  --eager-n 512 1024 2048 2560 --out-dir "$o" > "$o/bench.txt" 2>&1
echo "bench rc=$?"; grep "^versions" "$o/bench.txt" | cut -c1-250
grep -A40 "^== eager" "$o/bench.txt" | cut -c1-200
python3 -m sglang_fp32gemm.tools.targets "$o" --limit 3 --json "$o/targets.json" > "$o/targets.txt" 2>&1
grep -E "^(PASS|FAIL)" "$o/targets.txt" | cut -c1-200
