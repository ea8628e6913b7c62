"""Which config each bench column runs (its best tuned kernel for the shape, found as the table lookup
finds a row, else its first candidate that takes the shape), and which kernels to compile first.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from sglang_fp32gemm import table
from sglang_fp32gemm.tools import common
from sglang_fp32gemm.tools.buckets import served_by
from sglang_fp32gemm.tools.precompile import Job


class Picks:
    """The best kernel per (backend, tuned M, N, K), from a tune log or tuned CSVs."""

    def __init__(self, best: Optional[dict[tuple[str, int, int, int], str]] = None):
        self.best = dict(best or {})

    @classmethod
    def load(cls, paths: list[str], backends: list) -> "Picks":
        best: dict[tuple[str, int, int, int], str] = {}
        for path in paths:
            if path.endswith(".csv"):
                for r in table.read_csv_file(path):
                    for b in backends:
                        if b.libtype == r.libtype and _parses(b, r.kernelName):
                            best[(b.name, r.M, r.N, r.K)] = r.kernelName
                continue
            final: dict[tuple, tuple[float, str]] = {}
            screen: dict[tuple, tuple[float, str]] = {}
            for rec in common.read_jsonl(path):
                if rec.get("event") != "candidate" or rec.get("status") != "ok" or "us" not in rec:
                    continue
                try:
                    key = (str(rec["backend"]), int(rec["M"]), int(rec["N"]), int(rec["K"]))
                    us, kernel = float(rec["us"]), str(rec["kernel"])
                except (KeyError, TypeError, ValueError):
                    continue
                into = final if rec.get("phase") == "final" else screen if rec.get("phase") == "screen" else None
                if into is not None and (key not in into or us < into[key][0]):
                    into[key] = (us, kernel)
            for key in set(final) | set(screen):
                best[key] = (final.get(key) or screen[key])[1]
        return cls(best)

    def choose(self, b, m: int, n: int, k: int) -> tuple[Any, Optional[str], str]:
        """(cfg, kernel name, where it came from); cfg None with the reason when none fits."""
        tuned = {mm for (name, mm, nn, kk) in self.best if name == b.name and nn == n and kk == k}
        r = served_by(m, tuned)
        if r is not None:
            kernel = self.best[(b.name, r, n, k)]
            try:
                cfg = b.parse(kernel)
                ok, _ = b.supports(cfg, m, n, k)
                if ok:
                    return cfg, kernel, f"tuned at M={r}"
            except Exception:
                pass
        try:
            cands = list(b.candidates(m, n, k))
        except Exception as e:
            return None, None, f"candidates() raised {type(e).__name__}: {e}"
        for cfg in cands:
            try:
                if b.supports(cfg, m, n, k)[0]:
                    return cfg, b.kernel_name(cfg), "first candidate"
            except Exception:
                continue
        return None, None, "no candidate takes this shape"

    def jobs(self, shapes: Iterable[tuple[int, int, int]], backends: list) -> list[Job]:
        """Precompile jobs for every column's kernel at these shapes."""
        out = []
        for m, n, k in shapes:
            for b in backends:
                cfg, kernel, _ = self.choose(b, m, n, k)
                if cfg is not None:
                    out.append((b.name, kernel, m, n, k))
        return out


def _parses(b, kernel: str) -> bool:
    try:
        b.parse(kernel)
        return True
    except Exception:
        return False


def table_jobs(shapes: Iterable[tuple[int, int, int]], backends: list, key: table.DeviceKey) -> list[Job]:
    """Precompile jobs for the kernels the packaged tables (fast and deterministic) route these shapes to."""
    tables = table.TunedTables.load()
    out = []
    for m, n, k in shapes:
        for t in (tables.fast, tables.deterministic):
            row = t.lookup(key, m, n, k)
            if row is None:
                continue
            out += [(b.name, row.kernelName, m, n, k) for b in backends
                    if b.libtype == row.libtype and _parses(b, row.kernelName)]
    return out
