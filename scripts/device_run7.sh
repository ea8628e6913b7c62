#!/usr/bin/env bash
# Device call 7 (one H200, the last minutes of the session's device time): only what call 5
# did not measure: eager host time (routed vs torch.mm, and the plugin's fallback path), the
# 61-layer decode step, and the deterministic routed call. Carry [".cutedsl", ".devsite"].
# Comes back under $OUT: results.tar.gz (bench*.json/.md, versions, output), targets.txt.
# Worst case by the timeouts: ~10 + 5 + 150 + 5 s = 170 s.
set -uo pipefail
L=/tmp/run7; mkdir -p $L/bench
export PYTHONUNBUFFERED=1
eval "$(bash .cutedsl/cutedsl_carry.sh unpack .cutedsl /tmp/site)" || echo "cutedsl carry: unpack FAILED"
export PYTHONPATH=$PWD:$PWD/.devsite:${PYTHONPATH:-}
python3 -m sglang_fp32gemm bench --versions > $L/versions.txt 2>&1
timeout -k 5 150 python3 -m sglang_fp32gemm bench --eager --decode-seq --deterministic \
  --det-m 1,8,32 --decode-m 4 --backends triton cutedsl --out-dir $L/bench > $L/bench.txt 2>&1
echo "bench rc=$?"
python3 -m sglang_fp32gemm.tools.targets $L/bench --limit 3 > $OUT/targets.txt 2>&1
tar czf $OUT/results.tar.gz -C $L .
sed -n '/^== /,$p' $L/bench.txt | cut -c1-170 | tail -n 40
cut -c1-200 $OUT/targets.txt
