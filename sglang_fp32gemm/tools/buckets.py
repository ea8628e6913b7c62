"""Which table row serves a call, as aiter's lookup picks it (``table.m_candidates``), and what follows
for the tuner. Pure functions, no torch.
"""

from __future__ import annotations

from typing import Iterable, Optional

from sglang_fp32gemm.table import m_candidates


def served_by(m: int, row_ms: Iterable[int]) -> Optional[int]:
    """The row M that aiter's lookup picks for a call with ``m`` rows, or None."""
    rows = set(row_ms)
    for c in m_candidates(m):
        if c in rows:
            return c
    return None


def grid_buckets(grid: Iterable[int]) -> dict[int, list[int]]:
    """For each M of the grid, the M values it serves when every grid M has a row."""
    grid = sorted(set(grid))
    out: dict[int, list[int]] = {m: [] for m in grid}
    for x in range(1, (grid[-1] if grid else 0) + 1):
        r = served_by(x, grid)
        if r is not None:
            out[r].append(x)
    return out


def torch_pins(grid: Iterable[int], fast: Iterable[int]) -> list[int]:
    """Grid M values without a fast row whose bucket would otherwise round up to a fast row: with a torch
    row at each, every fast row serves exactly the M values it was checked for."""
    grid, fast = sorted(set(grid)), set(fast)
    buckets = grid_buckets(grid)
    pins: set[int] = set()
    changed = True
    while changed:
        changed = False
        for d in grid:
            if d in fast or d in pins:
                continue
            present = fast | pins
            if any(served_by(x, present) in fast for x in buckets[d]):
                pins.add(d)
                changed = True
    return sorted(pins)


def shape_order(grid: Iterable[int], ns: Iterable[int], ks: Iterable[int]) -> list[tuple[int, int, int]]:
    """Decode sizes first, the first K first; within one (N, K) M ascending."""
    ks = list(dict.fromkeys(ks))
    return sorted(((m, n, k) for m in set(grid) for n in set(ns) for k in ks),
                  key=lambda s: (s[0] > 32, ks.index(s[2]), s[1], s[0]))
