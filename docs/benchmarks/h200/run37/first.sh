#!/usr/bin/env bash
# Run 37's first call, whichever GPU comes (device; from the repository root; carry .cutedsl .devsite .vllm_ll;
# timeout_s 590). Written at stop 49, whose device time went to refused starts:
#  - on an H200: the shipped tables against the targets, not yet timed there with run 35's rows
#    (run36/third.sh: status.sh region M 1-64, then status.sh isolated);
#  - on an H100: status.sh isolated, the isolated table with every row now shipped in one process (by runs,
#    4 misses: N=1024 M 8 / 16, N=2048 M 8 / 16), then status.sh region M 1-64 if at most 240 s have passed.
# Then, on an H200 only (each its own call):
#   - the H100's serial row (M=4 N=1024) A/B'd there, as run36/first.sh's H200 branch does before its M=8 tune:
#     . docs/benchmarks/h200/run20/common.sh; region_ab docs/benchmarks/h200/run35/sm90_35_m4_n1024_nopdl_serial.csv \
#       50 --region-m 4 --region-schedule serial; python3 docs/benchmarks/h200/run29/ab_verdict.py "$OUT/ab"
#   - M=2 overlapped (the H200's one 0.7x miss, 0.72-0.76x in 34b / 34g), one N a call:
#     G_M=2 G_BACKENDS="cutedsl-dot triton" bash docs/benchmarks/h200/run29/tune_ab.sh 1024
#   bash docs/benchmarks/h200/run37/first.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/benchmarks/h200/run36/third.sh
fi
bash docs/benchmarks/h200/run24/status.sh isolated
echo "elapsed ${SECONDS}s"
[ "$SECONDS" -le 240 ] && STATUS_M=1,2,4,8,16,32,64 bash docs/benchmarks/h200/run24/status.sh region
exit 0
