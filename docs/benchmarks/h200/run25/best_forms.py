"""The fastest exact candidate of each kernel family per (M, N, phase) in a tune log (run 25's device scripts):
families are the dot kernel's plain, ``_bx``, ``_mb1`` and ``_bx_mb1`` forms (each capped, ``_g``, its own family) and
every other backend by its name's prefix.

    python3 docs/benchmarks/h200/run25/best_forms.py TUNE_LOG.jsonl.gz
"""
import gzip
import json
import sys


def family(kernel: str) -> str:
    if kernel.startswith("cutedsl_dot"):
        parts = kernel.split("_")
        capped = any(p[:1] == "g" and p[1:].isdigit() for p in parts)  # _g<CTAS> (stop 39)
        return "dot" + "".join("_" + s for s in ("bx", "mb1") if s in parts) + ("_g" if capped else "")
    return kernel.split("_")[0]


best: dict = {}
for line in gzip.open(sys.argv[1], "rt"):
    r = json.loads(line)
    # Records without a time (a candidate's repeatability check) are skipped.
    if r.get("event") == "candidate" and r.get("status") == "ok" and "us" in r:
        key = (r["M"], r["N"], r["phase"], family(r["kernel"]))
        if key not in best or r["us"] < best[key][0]:
            best[key] = (r["us"], r["kernel"])
for (m, n, phase, fam), (us, kernel) in sorted(best.items()):
    print("M=%d N=%-4d %-6s %-8s %.2f us %s" % (m, n, phase, fam, us, kernel))
