"""Re-derive run 12c's joint rows with --min-gain 0.05 from its recorded times (no GPU; run from the repository root
before those rows were merged: .venv/bin/python docs/benchmarks/h200/run12/rederive_5pct.py OUT.csv OUT_eager.csv): the shapes
the 5% rule leaves out that the 2% rule kept, as torch rows plus eager rows (what eager calls ran there)."""
import dataclasses, json, sys
from sglang_fp32gemm import routing, settings
from sglang_fp32gemm.table import DeviceKey, format_rows
from sglang_fp32gemm.tools import joint, region
from sglang_fp32gemm.tools.tune_rows import ShapeResult, table_row
import os
os.environ[settings.ENABLE_VAR] = "1"; settings.reload()
router = routing.reset_router()
dev = DeviceKey("sm90", 132)
d = json.load(open("docs/benchmarks/h200/run12/joint_12c.json"))
fast, eager = [], []
for r in d["results"]:
    added = {frozenset() if k == "torch" else frozenset(int(n) for n in k.split("+")): v
             for k, v in r["added_per_layer_us"].items()}
    old, new = joint.choose(added, 0.02), joint.choose(added, 0.05)
    spec = region.MODELS[r["model"]]
    per_call = added[frozenset()] * spec.layers / region.fp32_calls(spec)
    for n in sorted(old - new):
        p = router.routes.plan(dev, r["M"], n, r["K"], check_available=False)
        fast.append(table_row(dev, ShapeResult(r["M"], n, r["K"], per_call, [], None, None), None))
        ea = p.eager if p.eager is not None else (p if p.backend is not None and p.backend.eager_ok else None)
        if ea is not None and ea.row is not None:
            eager.append(dataclasses.replace(ea.row, M=r["M"], source=""))
        print(r["model"], r["M"], n, "->", p.row.kernelName, "eager:", ea.row.kernelName if ea else None)
open(sys.argv[1], "w").write(format_rows(fast)); open(sys.argv[2], "w").write(format_rows(eager))
