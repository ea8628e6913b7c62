"""Lay run 14b's rows over the packaged tables (no GPU; from the repository root:
.venv/bin/python docs/benchmarks/h200/run14/merge_14.py).

The same rule as run 13's merge (run13/merge_13.py): each source is one command's fast table and the
eager table it wrote beside it; at every key the fast file names, its row replaces the packaged fast row
and the packaged eager row goes unless the same command wrote one there. Later sources win: 14b's
region-ranked tune (Triton and the dot kernel with every thread count, M 1/2/4, K 7168 and 4096), then
14b's joint check of those rows (torch rows where the routed subset lost in the region). 14a's tune
offered Triton alone (the dot kernel was unavailable: no TVM-FFI in that call) and is not shipped. 14b's
deterministic table is not shipped (its tune did not offer triton-det); the deterministic table takes 14d's
rows instead (a region-ranked tune of triton-det and the dot kernel, K=7168, M 1/2/4; its budget ended
before K=4096).

Then every 14b shape's eager row is what the tuner's eager rule (tools/tune_rows.eager_row, as changed after
14b ran) makes of 14b's log: the fastest exact kernel alone (both backends launch cheaply outside a graph),
where it beats torch alone and either the shipped fast row is torch or it beats that row's kernel alone by
the minimum gain (0.02); otherwise no eager row. The joint check's eager rows (eager calls keep the kernel
they ran) are superseded there."""
import gzip
import json
from pathlib import Path

from sglang_fp32gemm.table import DeviceKey, format_rows, parse_csv
from sglang_fp32gemm.backends import default_backends
from sglang_fp32gemm.tools import common, tune_rows

R = Path("docs/benchmarks/h200/run14")
SOURCES = [("sm90_14b.csv", "sm90_14b_eager.csv"), ("sm90_14b_joint.csv", "sm90_14b_joint_eager.csv")]


def key(r):
    return (r.gfx, r.cu_num, r.M, r.N, r.K)


def load(path):
    return {key(r): r for r in parse_csv(Path(path).read_text(), str(path))}


fast, eager, det = load("configs/sm90.csv"), load("configs/sm90_eager.csv"), load("configs/sm90_deterministic.csv")
det.update(load(R / "sm90_14d_deterministic.csv"))
for f, e in SOURCES:
    new_fast, new_eager = load(R / f), load(R / e)
    for k, r in new_fast.items():
        fast[k] = r
        eager.pop(k, None)
    eager.update(new_eager)

log = [json.loads(line) for line in gzip.open(R / "tune_log_14b.jsonl.gz", "rt")]
alone, torch_alone, torch_rank, verified = {}, {}, {}, set()
for e in log:
    shape = (e.get("M"), e.get("N"), e.get("K"))
    if e["event"] == "torch" and e["phase"] == "final":
        torch_alone[shape] = e["us"]
    elif e["event"] == "torch" and e["phase"] == "region":
        torch_rank[shape] = e["us"]
    elif e["event"] == "candidate" and e["status"] == "ok" and e["phase"] == "final":
        alone.setdefault(shape, []).append((e["us"], e["backend"], e["libtype"], e["kernel"], e["rel_err"]))
    elif e["event"] == "candidate" and e["status"] == "ok" and e["phase"] == "verify":
        verified.add((e["serves_row_m"], e["N"], e["K"], e["kernel"]))  # exact at the bucket's smallest M
KEY = DeviceKey("sm90", 132)
BACKENDS = {b.name: b for bs in default_backends().values() for b in bs}


def split_k(backend, kernel):
    return common.split_k_of(BACKENDS[backend].parse(kernel))


for (m, n, k), finals in sorted(alone.items()):
    finals.sort()
    exact = [f for f in finals if m in (1, 2) or (m, n, k, f[3]) in verified]  # M 1, 2: buckets of one M
    pick = lambda f: tune_rows.Pick(f[1], f[2], f[3], f[0], f[4], split_k(f[1], f[3]), False)  # noqa: E731
    key = ("sm90", 132, m, n, k)
    row = fast[key]
    shipped = next((f for f in finals if f[3] == row.kernelName), None) if row.libtype != "torch" else None
    ranked = tune_rows.Pick(shipped[1], shipped[2], shipped[3], row.us, shipped[4], row.splitK, False) if shipped else None
    r = tune_rows.ShapeResult(m, n, k, torch_rank[(m, n, k)], [m], ranked, None,
                              eager=pick(exact[0]) if exact else None, torch_alone_us=torch_alone[(m, n, k)],
                              fast_alone_us=shipped[0] if shipped else 0.0)
    if row.libtype != "torch" and shipped is None:
        continue  # the shipped row is not one 14b timed alone: leave its eager row as merged
    if tune_rows.eager_row(r, 0.02):
        eager[key] = tune_rows.table_row(KEY, r, r.eager)
    else:
        eager.pop(key, None)
for path, rows in (("configs/sm90.csv", fast), ("configs/sm90_eager.csv", eager),
                   ("configs/sm90_deterministic.csv", det)):
    Path(path).write_text(format_rows(rows.values()))  # the packaged order; new keys at the end
    print(f"{path}: {len(rows)} rows")
