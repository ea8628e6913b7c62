"""Make run 16's serial table (no GPU; from the repository root:
.venv/bin/python docs/benchmarks/h200/run16/merge_16.py [TUNE_CSV ...]).

Run 16b (`tune --rank serial`, K=7168, backends triton, SGLang's CuTe-DSL kernel `cutedsl` and our dot
kernel) capped the dot kernel at its first four candidates (64 and 128 threads), so its dot rows lose to
the packaged ones (448 and 896 threads) and are not taken. Taken from 16b, as written:

- N=2048 at M 2, 4, 8 and 16, where SGLang's CuTe-DSL kernel beat the best Triton candidates in the serial
  schedule (2.9% at M=4; isolated 2-4% faster than the packaged Triton rows in 16a/16b);
- N=2560 at M 4 to 32 (no serial rows before: the fast table's served). Its M 1 and 2 rows come from the
  TUNE_CSV files named (run 16c: the dot kernel's every candidate at N=2560), else from 16b.

Every other packaged serial row stays.
"""
import sys
from pathlib import Path

from sglang_fp32gemm.table import format_rows, parse_csv

R = Path("docs/benchmarks/h200/run16")
OUT = Path("configs/sm90_serial.csv")


def load(path):
    return {(r.gfx, r.cu_num, r.M, r.N, r.K): r for r in parse_csv(Path(path).read_text(), str(path))}


serial = load(OUT)
new = load(R / "sm90_serial_16b.csv")
for key, row in new.items():
    m, n = key[2], key[3]
    warp = row.kernelName.startswith("cutedsl_warpsplitk")
    if (n == 2048 and m in (2, 4, 8, 16) and warp) or (n == 2560 and m >= 4) or (n == 2560 and not sys.argv[1:]):
        serial[key] = row
for extra in sys.argv[1:]:
    serial.update({k: r for k, r in load(extra).items() if k[3] == 2560})
OUT.write_text(format_rows(list(serial.values())))
print(f"{OUT}: {len(serial)} rows")
