"""The tuner's results and the table rows made from them (pure: no GPU, no timing)."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

from sglang_fp32gemm.table import TunedRow
from sglang_fp32gemm.tools.buckets import grid_buckets, torch_pins

DTYPE, OUTDTYPE = "torch.bfloat16", "torch.float32"


@dataclasses.dataclass
class Pick:
    backend: str
    libtype: str
    kernel: str
    us: float
    rel_err: float
    split_k: int
    deterministic: bool


@dataclasses.dataclass
class ShapeResult:
    m: int
    n: int
    k: int
    torch_us: float
    bucket: list[int]
    fast: Optional[Pick]          # fastest exact candidate, whatever torch did
    det: Optional[Pick]           # fastest exact deterministic candidate
    timed: int = 0
    rejected: int = 0
    eager: Optional[Pick] = None  # ranked elsewhere: the fastest alone whose backend is eager_ok
    torch_alone_us: float = 0.0   # torch's time alone (torch_us is the rank's)
    fast_alone_us: float = 0.0    # the ranked winner's time alone (0: not timed alone)
    shipped: Optional[str] = None       # the shipped tables' kernel for the shape (backend:kernel), if offered
    shipped_us: Optional[float] = None  # its time in the rank (None: rejected or not timed)


def table_row(key, r: ShapeResult, p: Optional[Pick]) -> TunedRow:
    """The row for ``p``, or a torch pin (at torch's time) when ``p`` is None."""
    m, n, k = r.m, r.n, r.k
    flops = 2 * m * n * k
    nbytes = n * k * 2 + m * k * 2 + m * n * 4
    us = r.torch_us if p is None else p.us
    libtype, split_k, kernel = ("torch", 0, "") if p is None else (p.libtype, p.split_k, p.kernel)
    return TunedRow(key.gfx, key.cu_num, m, n, k, False, DTYPE, OUTDTYPE, False, False, libtype, 0, split_k,
                    round(us, 3), kernel, 0.0, round(flops / us / 1e6, 3) if us else 0.0,
                    round(nbytes / us / 1e3, 1) if us else 0.0)


def wins(p: Optional[Pick], torch_us: float, min_gain: float) -> bool:
    return p is not None and p.us * (1 + min_gain) <= torch_us


def build_rows(results: Iterable[ShapeResult], key, grid: Iterable[int], min_gain: float, deterministic: bool,
               pin_torch: bool = True, pin_unreached: bool = True) -> list[TunedRow]:
    """The table rows for the finished shapes (sorted by N, K, M); ``pin_unreached``: grid M not reached
    get torch pins where their bucket would round up to another row's kernel."""
    grid = sorted(set(grid))
    by_nk: dict[tuple[int, int], dict[int, ShapeResult]] = {}
    for r in results:
        by_nk.setdefault((r.n, r.k), {})[r.m] = r
    rows = []
    for (n, k), per_m in sorted(by_nk.items()):
        fast = {m: r for m, r in per_m.items() if wins(r.det if deterministic else r.fast, r.torch_us, min_gain)}
        for m, r in fast.items():
            rows.append(table_row(key, r, r.det if deterministic else r.fast))
        if pin_torch:
            # Every tuned M that torch won gets its torch row, so that this table, laid over
            # another (SGLANG_FLYDSL_FP32_GEMM_CONFIG), also overrides that table's row there.
            for m in sorted(set(per_m) - set(fast)):
                rows.append(table_row(key, per_m[m], None))
            for m in torch_pins(grid, fast) if pin_unreached else ():
                if m not in per_m:  # not reached within the budget: pinned without a time
                    rows.append(table_row(key, ShapeResult(m, n, k, 0.0, [], None, None), None))
    rows.sort(key=lambda row: (row.N, row.K, row.M))
    return rows


def eager_row(r: ShapeResult, min_gain: float) -> bool:
    """Whether the shape gets an eager-table row. Its candidate (``r.eager``) is the fastest kernel alone with a
    cheap eager launch (eager calls run alone, with no graph); it must beat torch alone, and either torch won
    the rank, or it is another kernel than the ranked winner and beats that kernel alone too."""
    if not wins(r.eager, r.torch_alone_us, min_gain):
        return False
    if not wins(r.fast, r.torch_us, min_gain):
        return True
    same = (r.eager.backend, r.eager.kernel) == (r.fast.backend, r.fast.kernel)
    return not same and wins(r.eager, r.fast_alone_us, min_gain)


def build_eager_rows(results: Iterable[ShapeResult], key, min_gain: float) -> list[TunedRow]:
    """The eager table (eager calls run on one stream, without a graph): ``eager_row`` shapes."""
    rows = [table_row(key, r, r.eager) for r in results if eager_row(r, min_gain)]
    rows.sort(key=lambda row: (row.N, row.K, row.M))
    return rows


def cutedsl_compiles(rows: Iterable[TunedRow], grid: Iterable[int], libtype: str = "cutedsl") -> int:
    """Exact (M, N, K) the rows of ``libtype`` serve: one JIT compile each on first use."""
    grid = sorted(set(grid))
    buckets = grid_buckets(grid)
    # Our own kernels (cutedsl_dot_*, cutedsl_mma_*) compile once per (N, K) at bind, not per M.
    return sum(len(buckets.get(r.M, [r.M])) for r in rows
               if r.libtype == libtype and r.kernelName.startswith("cutedsl_warpsplitk"))
