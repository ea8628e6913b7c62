"""Lay run 13's rows over the packaged tables (no GPU; from the repository root:
.venv/bin/python docs/benchmarks/h200/run13/merge_13.py).

Each source is one command's output: a fast table and the eager table it wrote beside it. At every
(gfx, cu_num, M, N, K) the fast file names, its row replaces the packaged fast row, and the packaged
eager row goes unless the same command wrote one there (it had the chance: an older eager row, made
for an older fast row, would send eager calls to a kernel chosen against another row). Later sources
win. The deterministic table takes only 13a's rows: 13b's tune offered it two backends only. 13c's rows
(cutedsl-dot alone, isolated) only go to the eager table (below)."""
from pathlib import Path

from sglang_fp32gemm.table import format_rows, parse_csv

R = Path("docs/benchmarks/h200/run13")
SOURCES = [("sm90_13a.csv", "sm90_13a_eager.csv"), ("sm90_13b.csv", "sm90_13b_eager.csv"),
           ("sm90_13b_joint.csv", "sm90_13b_joint_eager.csv")]
DET = ["sm90_13a_deterministic.csv"]


def key(r):
    return (r.gfx, r.cu_num, r.M, r.N, r.K)


def load(path):
    return {key(r): r for r in parse_csv(Path(path).read_text(), str(path))}


fast, eager, det = load("configs/sm90.csv"), load("configs/sm90_eager.csv"), load("configs/sm90_deterministic.csv")
for f, e in SOURCES:
    new_fast, new_eager = load(R / f), load(R / e)
    for k, r in new_fast.items():
        fast[k] = r
        eager.pop(k, None)
    eager.update(new_eager)
# 13c timed only cutedsl-dot (more thread counts), alone: by the tuner's eager rule (tune_rows.eager_row:
# a shape whose fast row is torch gets the fastest kernel alone for its eager calls) its winners become
# the eager rows of such shapes where they beat the eager row there (isolated us, both columns).
for k, r in load(R / "sm90_13c_dot_isolated.csv").items():
    if fast[k].libtype == "torch" and (k not in eager or r.us < eager[k].us):
        eager[k] = r
for d in DET:
    det.update(load(R / d))
for path, rows in (("configs/sm90.csv", fast), ("configs/sm90_eager.csv", eager),
                   ("configs/sm90_deterministic.csv", det)):
    Path(path).write_text(format_rows(rows.values()))  # the packaged order; new keys at the end
    print(f"{path}: {len(rows)} rows")
