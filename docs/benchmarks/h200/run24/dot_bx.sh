#!/usr/bin/env bash
# Run 24 (device, from the repository root; carry .cutedsl .devsite .vllm_ll; timeout_s 480; not yet run).
# The dot kernel's _bx forms (stop 36: x's rows loaded with no branch on M, so they need not wait for the row
# before's multiplies): 1. the dot kernel's GPU tests (every M=4 candidate, _bx included, run at M 1-4: exact,
# NaN-poisoned, the order reference's bits; the pair form's bits); 2. tune --rank serial --pair at M 2 and 4,
# V4-Pro, cutedsl-dot alone: whether a _bx form is the pair's best there (the tune log has every candidate's
# time; run 23's shipped M=2 row is cutedsl_dot_m2_t448_r1_pdl); 3. the same for the single N=2048 call.
set -uo pipefail
. docs/benchmarks/h200/run20/common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
d=$OUT/dot_bx; mkdir -p "$d"
timeout -k 10 200 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_cutedsl_dot_gpu.py > "$d/pytest_dot_gpu.txt" 2>&1
echo "dot GPU tests rc=$?"; tail -n 3 "$d/pytest_dot_gpu.txt" | cut -c1-200
for what in pair single; do
  extra=(--pair); [ $what = single ] && extra=(--n 2048)
  timeout -k 10 130 python3 -m sglang_fp32gemm tune --rank serial "${extra[@]}" --backends cutedsl-dot --m 2 4 \
    --k 7168 --budget-s 110 --out "$d/sm90_24_${what}_serial.csv" --summary "$d/summary_$what.json" \
    --log "$d/tune_log_$what.jsonl.gz" > "$d/tune_$what.txt" 2>&1
  echo "tune $what rc=$?"; grep -v '^tune:' "$d/tune_$what.txt" | tail -n 4 | cut -c1-220
  python3 - "$d/tune_log_$what.jsonl.gz" <<'PY'
import gzip, json, sys
best = {}
for line in gzip.open(sys.argv[1], "rt"):
    r = json.loads(line)
    if r.get("event") != "candidate" or r.get("status") != "ok" or r.get("phase") not in ("screen", "serial"):
        continue
    key = (r["phase"], r["M"], r["kernel"].endswith("_bx"))
    if key not in best or r["us"] < best[key][0]:
        best[key] = (r["us"], r["kernel"])
for key in sorted(best):
    print("%-6s M=%d %s best %.2f us %s" % (key[0], key[1], "_bx  " if key[2] else "plain", *best[key]))
PY
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
