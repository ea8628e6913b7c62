#!/usr/bin/env bash
# Run 36's first call, whichever GPU comes (device; from the repository root; carry .cutedsl .devsite .vllm_ll;
# timeout_s 590). Stop 49 lost 720 s of device time to refused starts, so the call that does start runs what
# that GPU most needs: on an H200 the shipped tables against the targets (run36/third.sh: status.sh region,
# then isolated), on an H100 the dot kernel's M=8 forms (run36/first.sh).
#   bash docs/benchmarks/h200/run36/lead.sh
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/benchmarks/h200/run36/third.sh
fi
exec bash docs/benchmarks/h200/run36/first.sh
