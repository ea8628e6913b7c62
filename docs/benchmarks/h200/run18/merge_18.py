"""Run 18's table changes (no GPU; from the repository root: .venv/bin/python docs/benchmarks/h200/run18/merge_18.py).

1. Eager rows to cutedsl-mma at N 512 and 1024, M 4/8/16 (K=7168), from sm90_18a_candidates_eager.csv: in run
   18b's eager bench (bench_eager_18b.md) the kernel alone took 10.35-11.45 us of host time a call against Triton's
   12.50-13.02, and the routed eager call 0.735-0.784x torch.mm. The candidates at N 2048 and 2560 are not taken:
   there the kernel's GPU time (10.6-13 us) is what an eager call waits for, and at M=16 N=2048 it was slower
   than Triton alone (16.44 against 12.70 us).
2. The fast and deterministic rows at N=1024 M 4 and 8 (K=7168) go back to what they were before run 17
   (sm90_before_17.csv, sm90_deterministic_before_17.csv). Run 17e had ranked cutedsl-mma first there one shape at
   a time; run 18b timed the whole V4-Pro region with those rows: at M=4 the routed step added 8.86 us a layer,
   against the Triton-only column's 7.47 in the same process, where runs 14c and 15b (the earlier rows) had the
   routed step at 7.43 / 7.47 and the Triton column at 7.56 / 7.54. No joint check had been run on the rows.
"""
from pathlib import Path

from sglang_fp32gemm.table import format_rows, parse_csv

R = Path("docs/benchmarks/h200/run18")
EAGER = {(m, n, 7168) for m in (4, 8, 16) for n in (512, 1024)}


def load(path):
    return {(r.gfx, r.cu_num, r.M, r.N, r.K): r for r in parse_csv(Path(path).read_text(), str(path))}


def lay(out, new, keys=None, check=None):
    table = load(out)
    taken = 0
    for key, row in load(new).items():
        if keys is None or key[2:] in keys:
            assert check is None or check(row), row
            table[key] = row
            taken += 1
    Path(out).write_text(format_rows(list(table.values())))
    print(f"{out}: {taken} rows laid over, {len(table)} rows")


lay("configs/sm90_eager.csv", R / "sm90_18a_candidates_eager.csv", EAGER,
    lambda r: r.kernelName.startswith("cutedsl_mma_"))
lay("configs/sm90.csv", R / "sm90_before_17.csv")
lay("configs/sm90_deterministic.csv", R / "sm90_deterministic_before_17.csv")
