"""Make run 15's tables (no GPU; from the repository root:
.venv/bin/python docs/benchmarks/h200/run15/merge_15.py).

- configs/sm90_serial.csv (new): the serial tables of 15a (K=7168), 15b (K=4096) and 15d (M=48, both K),
  each one `tune --rank serial` command's output (the region model's serial schedule at every M), rows
  as written.
- configs/sm90_deterministic.csv: 15c's deterministic rows (a region-ranked tune of triton-det and the dot
  kernel at K=4096, M 1/2/4, N 512/1024/2048) replace the packaged rows at their keys, as run 14d's did at
  K=7168 (run14/merge_14.py). The fast and eager tables are not changed.
"""
from pathlib import Path

from sglang_fp32gemm.table import format_rows, parse_csv

R = Path("docs/benchmarks/h200/run15")


def load(path):
    return {(r.gfx, r.cu_num, r.M, r.N, r.K): r for r in parse_csv(Path(path).read_text(), str(path))}


# Dicts keep the first file's order: a replaced row stays where the packaged one was.
serial = {**load(R / "sm90_serial_15a.csv"), **load(R / "sm90_serial_15b.csv"), **load(R / "sm90_serial_15d.csv")}
det = {**load("configs/sm90_deterministic.csv"), **load(R / "sm90_15c_deterministic.csv")}
for path, rows in (("configs/sm90_serial.csv", serial), ("configs/sm90_deterministic.csv", det)):
    Path(path).write_text(format_rows(list(rows.values())))
    print(f"{path}: {len(rows)} rows")
