"""Lay run 17e's two region-ranked rows over the packaged fast and deterministic tables (no GPU; from the
repository root: .venv/bin/python docs/benchmarks/h200/run17/merge_17.py).

Run 17e (`tune --rank region`, K=7168, backends triton and cutedsl-mma, torch timed beside them) ranked
our tensor-core split-K kernel first in V4-Pro's overlapped decode region at N=1024, M=4 (3.69 us a layer
against torch's 4.69, which the packaged row ran) and M=8 (3.83 against torch's 5.06; the packaged row's
Triton kernel, 3.93 in its own run, was not among 17e's candidates). Only those two rows are taken; 17e's
other rows are torch rows where the packaged tables have rows tuned with more candidates. The kernel is
deterministic (a fixed summation order), so the deterministic table takes the same rows. No eager or
serial row changes: in the serial schedule the kernel lost to Triton at every shape (runs 17c, 17d).
"""
from pathlib import Path

from sglang_fp32gemm.table import format_rows, parse_csv

R = Path("docs/benchmarks/h200/run17")
TAKE = {(4, 1024, 7168), (8, 1024, 7168)}


def load(path):
    return {(r.gfx, r.cu_num, r.M, r.N, r.K): r for r in parse_csv(Path(path).read_text(), str(path))}


for out, new in (("configs/sm90.csv", R / "sm90_17e.csv"),
                 ("configs/sm90_deterministic.csv", R / "sm90_17e_deterministic.csv")):
    table = load(out)
    for key, row in load(new).items():
        if key[2:] in TAKE:
            assert row.kernelName.startswith("cutedsl_mma_"), row
            table[key] = row
    Path(out).write_text(format_rows(list(table.values())))
    print(f"{out}: {len(table)} rows")
