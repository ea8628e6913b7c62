#!/usr/bin/env bash
# Run 24 (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 420; not yet run).
# Run 23d: after an overlapped capture V4-Flash's serial steps with ll_bf16 (0.44-0.65x its calls alone, the
# same in two processes) and with our single dot kernel's PDL form (M 1-2) stayed SUSPECT, where V4-Pro's did
# not. run22/serial_why.py on V4-Flash at M=1 after an overlapped capture: each mode's graph shape (programmatic
# edges), a CUPTI timeline (which kernels overlap, by how much), the compress outputs read back (stale or not)
# and a producer check (the GEMM on a copy of x made just before it), SGLang's way and the private way.
set -uo pipefail
export SERIAL_MODEL=flash SERIAL_M=1 SERIAL_LL=dotprod_bs256 WHY_ORDERS=${WHY_ORDERS:-after_overlapped}
bash docs/benchmarks/h200/run22/why.sh
