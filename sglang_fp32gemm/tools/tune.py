"""Tune every backend on the current GPU and write the two tuned tables.

For each (M, N, K) of the grid, every available backend's
``candidates(m, n, k)`` and ``torch.mm(out_dtype=fp32)`` are timed in the same
process the same way (tools/timing.py: CUDA-graph replay of many calls
rotating over >= 8 weight sets >= 4x the L2, median). Before it is timed, a
candidate must be fp32-exact on fresh random inputs with its output memory
poisoned with NaN: rel. error vs float64 <= 1e-5, allclose(atol 1e-2,
rtol 1e-4), all finite. A candidate whose backend calls it deterministic must
also give the same bits three times running, else it is not offered to the
deterministic table. Every candidate, rejected or timed, is one JSON line in
the log.

Buckets. A row at M serves every M' that aiter's lookup sends to it (exact M,
then M rounded up to 16, then the next power of two): with the default grid
the M=16 row serves 3, 5-7 and 9-16, the M=128 row 65-80 and 97-128. A
candidate must support every M of its bucket; it is timed at the row's own M
(the largest of its bucket) and the winner is checked again at the smallest.
A CuTe-DSL row compiles once per exact M it serves (about 1 s each, on first
use outside graph capture): the summary counts those compiles.

Two tables (aiter's CSV schema):
  --out      the fastest exact kernel per key, libtype = its backend's libtype,
             kernelName = backend.kernel_name(cfg); a row only where it beats
             torch by --min-gain, otherwise no row (torch serves the call);
  --out-det  the same for deterministic candidates only (torch.mm counts as
             deterministic, so where it wins there is no row either).
Rows are the same for both tables where the fastest kernel is deterministic.
If an M of the grid gets no row but the M values of its bucket would then
round up to another row's kernel (aiter's lookup only rounds up), a libtype
``torch`` row at that M keeps them on torch; --no-pin-torch turns that off.

Budget: --budget-s stops cleanly between candidates, keeps every finished
shape and writes the tables; they are also rewritten after every shape, so a
run killed from outside keeps what it finished. Shapes run in order of
importance: M <= 32 first, the first --k first.

    python -m sglang_fp32gemm tune --out configs/sm90.csv --out-det configs/sm90_deterministic.csv
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import multiprocessing as mp
import os
import signal
import sys
import time
from typing import Any, Callable, Iterable, Optional

import torch

from sglang_fp32gemm.table import TunedRow, device_key, format_rows, m_candidates
from sglang_fp32gemm.tools import common, timing

M_DEFAULT = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
K_DEFAULT = (common.K_PRO, common.K_FLASH)
DEFAULT_CAPS = ("cutedsl=4",)  # the default tactic + the first three of autotune_tactics
DTYPE, OUTDTYPE = "torch.bfloat16", "torch.float32"


class BudgetExceeded(Exception):
    pass


# -- buckets (pure) --------------------------------------------------------------
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
    """Grid M values without a fast row whose bucket would otherwise round up to a fast row.

    With a torch row at each of them, every fast row serves exactly its
    nominal bucket (the M values it was checked for).
    """
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


# -- one shape -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Candidate:
    backend: Any
    cfg: Any
    kernel: str
    deterministic: bool

    @property
    def label(self) -> str:
        return f"{self.backend.name}:{self.kernel}"


@dataclasses.dataclass
class Pick:
    backend: str
    libtype: str
    kernel: str
    us: float
    rel_err: float
    bad: float
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


def parse_caps(items: Iterable[str]) -> dict[str, int]:
    caps = {}
    for it in items:
        name, sep, num = it.partition("=")
        if not sep or not name or not num.isdigit():
            raise ValueError(f"--max-per-backend wants NAME=COUNT, got {it!r}")
        caps[name] = int(num)
    return caps


def gather_candidates(backends: list, m: int, n: int, k: int, bucket: list[int], caps: dict[str, int],
                      log: common.JsonLog) -> list[Candidate]:
    """The candidates of every backend for one shape, each valid for every M of the bucket."""
    out = []
    for b in backends:
        try:
            cfgs = list(b.candidates(m, n, k))
        except Exception as e:
            log.write(event="candidates_error", M=m, N=n, K=k, backend=b.name, error=f"{type(e).__name__}: {e}")
            continue
        if b.name in caps:
            cfgs = cfgs[:caps[b.name]]
        for cfg in cfgs:
            try:
                kernel = b.kernel_name(cfg)
                back = b.parse(kernel)
            except Exception as e:
                log.write(event="candidate", status="error", M=m, N=n, K=k, backend=b.name, kernel=repr(cfg),
                          error=f"kernel name round trip: {type(e).__name__}: {e}")
                continue
            if back != cfg:
                log.write(event="candidate", status="error", M=m, N=n, K=k, backend=b.name, kernel=kernel,
                          error=f"parse(kernel_name(cfg)) gives {back!r}, not {cfg!r}")
                continue
            why = None
            for mm in (bucket or [m]):
                try:
                    ok, reason = b.supports(cfg, mm, n, k)
                except Exception as e:
                    ok, reason = False, f"supports() raised {type(e).__name__}: {e}"
                if not ok:
                    why = f"M={mm}: {reason}"
                    break
            if why is not None:
                log.write(event="candidate", status="unsupported", M=m, N=n, K=k, backend=b.name, kernel=kernel,
                          reason=why)
                continue
            out.append(Candidate(b, cfg, kernel, common.is_deterministic(b, cfg)))
    return out


class Tuner:
    def __init__(self, backends: list, device, timer, log: common.JsonLog, *, caps: dict[str, int] | None = None,
                 top: int = 3, screen_replays: int = 7, final_replays: int = 15,
                 deadline: Optional[float] = None, torch_fn: Optional[Callable] = None):
        self.backends = backends
        self.device = device
        self.timer = timer
        self.log = log
        self.caps = caps or {}
        self.top = top
        self.screen_replays = screen_replays
        self.final_replays = final_replays
        self.deadline = deadline
        self.torch_fn = torch_fn or torch_fn_for(device)
        self.binds = common.BindCache()
        self._weights: dict[tuple[int, int], list[torch.Tensor]] = {}

    def _check_budget(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise BudgetExceeded()

    def weights(self, n: int, k: int) -> list[torch.Tensor]:
        w = self._weights.get((n, k))
        if w is None:
            w = self._weights[(n, k)] = self.timer.weights(n, k, self.device)
        return w

    def _fn(self, c: Candidate, n: int, k: int):
        return self.binds.get(c.backend, c.cfg, c.kernel, self.device, n, k)

    def _rec(self, c: Candidate, m, n, k, **kw) -> None:
        self.log.write(event="candidate", M=m, N=n, K=k, backend=c.backend.name, libtype=c.backend.libtype,
                       kernel=c.kernel, deterministic=c.deterministic, **kw)

    def check(self, c: Candidate, m: int, n: int, k: int, phase: str) -> Optional[dict]:
        """The exactness gate; None (and a log line) when the candidate fails it."""
        try:
            fn = self._fn(c, n, k)
            res = common.check_fn(fn, m, n, k, self.device, repeat=2 if c.deterministic else 0)
        except Exception as e:
            self._rec(c, m, n, k, phase=phase, status="error", error=f"{type(e).__name__}: {str(e)[:300]}")
            return None
        if not res["ok"]:
            self._rec(c, m, n, k, phase=phase, status="rejected", rel_err=res["rel_err"], allclose=res["allclose"],
                      finite=res["finite"], bad=res["bad"], error=res.get("error"))
            return None
        return res

    def time(self, c: Candidate, m: int, n: int, k: int, x: torch.Tensor, replays: int) -> Optional[float]:
        try:
            return self.timer.per_call(self._fn(c, n, k), x, self.weights(n, k), replays=replays)
        except Exception as e:
            self._rec(c, m, n, k, phase="time", status="error", error=f"{type(e).__name__}: {str(e)[:300]}")
            return None

    def shape(self, m: int, n: int, k: int, bucket: list[int], cands: list[Candidate]) -> ShapeResult:
        x = common.randn_bf16(m, k, device=self.device)
        weights = self.weights(n, k)
        torch_us = self.timer.per_call(self.torch_fn, x, weights, replays=self.screen_replays)
        self.log.write(event="torch", phase="screen", M=m, N=n, K=k, us=torch_us)
        screened: list[tuple[float, Candidate, dict]] = []
        rejected = 0
        for c in cands:
            self._check_budget()
            res = self.check(c, m, n, k, "check")
            if res is None:
                rejected += 1
                continue
            if c.deterministic and not res.get("repeatable", True):
                self._rec(c, m, n, k, phase="check", status="not_repeatable", rel_err=res["rel_err"],
                          note="called deterministic, gave different bits on the same inputs: "
                               "kept out of the deterministic table")
                c = dataclasses.replace(c, deterministic=False)
            us = self.time(c, m, n, k, x, self.screen_replays)
            if us is None:
                rejected += 1
                continue
            self._rec(c, m, n, k, phase="screen", status="ok", us=us, rel_err=res["rel_err"], bad=res["bad"])
            screened.append((us, c, res))
        screened.sort(key=lambda r: r[0])
        finalists = screened[:self.top] + [r for r in screened if r[1].deterministic][:self.top]
        seen, final = set(), []
        self._check_budget()
        torch_us = self.timer.per_call(self.torch_fn, x, weights, replays=self.final_replays)
        self.log.write(event="torch", phase="final", M=m, N=n, K=k, us=torch_us)
        for _, c, res in finalists:
            if c.label in seen:
                continue
            seen.add(c.label)
            self._check_budget()
            us = self.time(c, m, n, k, x, self.final_replays)
            if us is None:
                continue
            self._rec(c, m, n, k, phase="final", status="ok", us=us, rel_err=res["rel_err"], bad=res["bad"])
            final.append((us, c, res))
        final.sort(key=lambda r: r[0])
        lo = min(bucket) if bucket else m
        verified: dict[str, Optional[dict]] = {}

        def pick(rows, need_det: bool) -> Optional[Pick]:
            """The first of ``rows`` that is also exact (and repeatable, for need_det) at the bucket's smallest M."""
            for us, c, res in rows:
                if lo != m:
                    if c.label not in verified:
                        self._check_budget()
                        verified[c.label] = low = self.check(c, lo, n, k, f"verify M={lo}")
                        if low is not None:
                            self._rec(c, lo, n, k, phase="verify", status="ok", rel_err=low["rel_err"],
                                      repeatable=low.get("repeatable"), serves_row_m=m)
                    low = verified[c.label]
                    if low is None or (need_det and not low.get("repeatable", False)):
                        continue
                return Pick(c.backend.name, c.backend.libtype, c.kernel, us, res["rel_err"], res["bad"],
                            common.split_k_of(c.cfg), c.deterministic)
            return None

        fast = pick(final, False)
        det = pick([r for r in final if r[1].deterministic], True)
        return ShapeResult(m, n, k, torch_us, list(bucket), fast, det, timed=len(screened), rejected=rejected)


def torch_fn_for(device) -> Callable:
    if getattr(device, "type", "cuda") == "cuda":
        return timing.torch_mm
    from sglang_fp32gemm.backends import torch_ref

    return torch_ref.mm_fp32


# -- rows (pure) -------------------------------------------------------------------
def _row(key, r: ShapeResult, p: Optional[Pick]) -> TunedRow:
    m, n, k = r.m, r.n, r.k
    flops = 2 * m * n * k
    nbytes = n * k * 2 + m * k * 2 + m * n * 4
    if p is None:  # a torch pin
        us = r.torch_us
        return TunedRow(key.gfx, key.cu_num, m, n, k, False, DTYPE, OUTDTYPE, False, False, "torch", 0, 0,
                        round(us, 3), "", 0.0, round(flops / us / 1e6, 3) if us else 0.0,
                        round(nbytes / us / 1e3, 1) if us else 0.0)
    us = p.us
    return TunedRow(key.gfx, key.cu_num, m, n, k, False, DTYPE, OUTDTYPE, False, False, p.libtype, 0, p.split_k,
                    round(us, 3), p.kernel, p.bad, round(flops / us / 1e6, 3), round(nbytes / us / 1e3, 1))


def wins(p: Optional[Pick], torch_us: float, min_gain: float) -> bool:
    return p is not None and p.us * (1 + min_gain) <= torch_us


def build_rows(results: Iterable[ShapeResult], key, grid: Iterable[int], min_gain: float, deterministic: bool,
               pin_torch: bool = True) -> list[TunedRow]:
    """The table rows for the finished shapes (sorted by N, K, M)."""
    grid = sorted(set(grid))
    by_nk: dict[tuple[int, int], dict[int, ShapeResult]] = {}
    for r in results:
        by_nk.setdefault((r.n, r.k), {})[r.m] = r
    rows = []
    for (n, k), per_m in sorted(by_nk.items()):
        fast = {m: r for m, r in per_m.items() if wins(r.det if deterministic else r.fast, r.torch_us, min_gain)}
        for m, r in fast.items():
            rows.append(_row(key, r, r.det if deterministic else r.fast))
        if pin_torch:
            for m in torch_pins(grid, fast):
                if m in per_m:
                    rows.append(_row(key, per_m[m], None))
                else:  # not reached within the budget: pinned without a time
                    stub = ShapeResult(m, n, k, 0.0, [], None, None)
                    rows.append(_row(key, stub, None))
    rows.sort(key=lambda row: (row.N, row.K, row.M))
    return rows


def cutedsl_compiles(rows: Iterable[TunedRow], grid: Iterable[int], libtype: str = "cutedsl") -> int:
    """Exact (M, N, K) the rows of ``libtype`` serve: one JIT compile each on first use."""
    grid = sorted(set(grid))
    buckets = grid_buckets(grid)
    return sum(len(buckets.get(r.M, [r.M])) for r in rows if r.libtype == libtype)


# -- parallel precompile ----------------------------------------------------------
_worker_binds: Optional[common.BindCache] = None


def _precompile_job(job: tuple[str, str, int, int, int]) -> Optional[str]:
    """In a worker process: bind and run one kernel once (fills Triton's / the DSL's disk cache)."""
    global _worker_binds
    name, kernel, m, n, k = job
    try:
        if _worker_binds is None:
            _worker_binds = common.BindCache()
        b = common.backend_by_name(name)
        cfg = b.parse(kernel)
        dev = torch.device("cuda")
        fn = _worker_binds.get(b, cfg, kernel, dev, n, k)
        fn(common.randn_bf16(m, k, device=dev), common.randn_bf16(n, k, device=dev))
        torch.cuda.synchronize()
        return None
    except Exception as e:  # it fails again, and is logged, in the timing process
        return f"{name}:{kernel} M={m} N={n} K={k}: {type(e).__name__}: {str(e)[:200]}"


def precompile(jobs: list[tuple[str, str, int, int, int]], workers: int, until: Optional[float] = None,
               log: Optional[common.JsonLog] = None) -> dict:
    """Run ``jobs`` in ``workers`` spawned processes before anything is timed; stop at ``until``.

    Triton keeps compiled kernels on disk, so the timing process then only
    loads them. No kernel is timed while workers run.
    """
    jobs = list(dict.fromkeys(jobs))
    if workers <= 1 or not jobs:
        return {"jobs": len(jobs), "done": 0, "failed": 0, "skipped": True}
    t = time.monotonic()
    done = failed = 0
    fails = []
    ex = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
    try:
        futs = [ex.submit(_precompile_job, j) for j in jobs]
        timeout = None if until is None else max(0.0, until - time.monotonic())
        finished, pending = cf.wait(futs, timeout=timeout)
        for f in finished:
            try:
                r = f.result()
            except Exception as e:  # a worker that died
                r = f"worker: {type(e).__name__}: {e}"
            done += 1
            if r is not None:
                failed += 1
                fails.append(r)
        for f in pending:
            f.cancel()
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    out = {"jobs": len(jobs), "done": done, "failed": failed, "s": round(time.monotonic() - t, 1)}
    print(f"precompiled {done}/{len(jobs)} kernel jobs in {out['s']}s with {workers} workers, {failed} failed",
          flush=True)
    for f in fails[:5]:
        print("   ", f, flush=True)
    if log is not None:
        log.write(event="precompile", **out, failures=fails[:50])
    return out


# -- driver ------------------------------------------------------------------------
def _sigterm(_sig, _frame):
    raise BudgetExceeded()


def run(args, backends: Optional[list] = None, device=None, timer=None) -> int:
    device = device or torch.device("cuda")
    timer = timer or timing.CudaTimer()
    t0 = time.monotonic()
    deadline = t0 + args.budget_s if args.budget_s else None
    key = device_key(device) if device.type == "cuda" else args.device_key
    if key is None:
        print("no table key for this device", file=sys.stderr)
        return 2
    out = args.out or f"{key.gfx}.csv"
    out_det = args.out_det or f"{os.path.splitext(out)[0]}_deterministic.csv"
    summary_path = args.summary or f"{os.path.splitext(out)[0]}_summary.json"
    log = common.JsonLog(args.log)
    log.write(event="start", argv=sys.argv, device=str(key), versions=common.versions())
    grid = sorted(set(args.m))
    buckets = grid_buckets(grid)
    caps = parse_caps(args.max_per_backend)

    if backends is None:
        backends = common.all_backends()
    if args.backends:
        want = set(args.backends)
        backends = [b for b in backends if b.name in want]
    usable = []
    for b in backends:
        ok, why = common.available(b)
        log.write(event="backend", backend=b.name, libtype=b.libtype, available=ok, reason=why)
        print(f"backend {b.name:<12} libtype {b.libtype:<8} {'available' if ok else 'UNAVAILABLE: ' + why}",
              flush=True)
        if ok:
            usable.append(b)

    shapes = shape_order(grid, args.n, args.k)
    cands = {s: gather_candidates(usable, s[0], s[1], s[2], buckets[s[0]], caps, log) for s in shapes}
    per_backend: dict[str, int] = {}
    for cs in cands.values():
        for c in cs:
            per_backend[c.backend.name] = per_backend.get(c.backend.name, 0) + 1
    print(f"{len(shapes)} shapes, candidates per backend: {per_backend}", flush=True)
    jobs = [(c.backend.name, c.kernel, s[0], s[1], s[2]) for s in shapes for c in cands[s]]
    tuner = Tuner(usable, device, timer, log, caps=caps, top=args.top, screen_replays=args.screen_replays,
                  final_replays=args.final_replays, deadline=deadline)
    results: list[ShapeResult] = []
    stopped = None

    def write_tables() -> tuple[list[TunedRow], list[TunedRow]]:
        fast = build_rows(results, key, grid, args.min_gain, False, not args.no_pin_torch)
        det = build_rows(results, key, grid, args.min_gain, True, not args.no_pin_torch)
        for path, rows in ((out, fast), (out_det, det)):
            d = os.path.dirname(path)
            if d:
                os.makedirs(d, exist_ok=True)
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(format_rows(rows))
            os.replace(tmp, path)
        return fast, det

    # `timeout` sends SIGTERM: stop like the budget does, keeping what is finished.
    old = signal.signal(signal.SIGTERM, _sigterm) if device.type == "cuda" else None
    try:
        if device.type == "cuda":
            until = None if deadline is None else t0 + args.budget_s * args.precompile_share
            precompile(jobs, args.workers, until, log)
        for s in shapes:
            m, n, k = s
            if deadline is not None and time.monotonic() > deadline:
                stopped = f"budget of {args.budget_s:.0f}s reached before M={m} N={n} K={k}"
                break
            r = tuner.shape(m, n, k, buckets[m], cands[s])
            results.append(r)
            print(f"[{time.monotonic() - t0:5.0f}s] " + _shape_line(r, args.min_gain), flush=True)
            log.write(event="shape", **_shape_record(r, args.min_gain))
            write_tables()
    except BudgetExceeded:
        stopped = f"stopped (budget or SIGTERM) during a shape after {time.monotonic() - t0:.0f}s"
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    fast, det = write_tables()
    done = {(r.m, r.n, r.k) for r in results}
    missing = [s for s in shapes if s not in done]
    compiles = {"fast": cutedsl_compiles(fast, grid), "deterministic": cutedsl_compiles(det, grid)}
    summary = {"device": str(key), "argv": sys.argv, "elapsed_s": round(time.monotonic() - t0, 1),
               "stopped": stopped, "missing_shapes": missing, "rows": len(fast), "det_rows": len(det),
               "cutedsl_runtime_compiles": compiles,
               "shapes": [_shape_record(r, args.min_gain) for r in results]}
    common.write_json(summary_path, summary)
    log.write(event="end", stopped=stopped, rows=len(fast), det_rows=len(det), missing=len(missing))
    log.close()
    print(f"wrote {len(fast)} rows to {out} ({sum(r.libtype == 'torch' for r in fast)} torch pins), "
          f"{len(det)} rows to {out_det} ({sum(r.libtype == 'torch' for r in det)} torch pins); "
          f"{len(results)}/{len(shapes)} shapes in {summary['elapsed_s']}s"
          + (f"; {stopped}; {len(missing)} shapes not tuned" if stopped else ""), flush=True)
    if compiles["fast"] or compiles["deterministic"]:
        print(f"note: the cutedsl rows serve {compiles['fast']} (fast table) / {compiles['deterministic']} "
              "(deterministic table) exact (M, N, K): one JIT compile each (~1 s) on first use", flush=True)
    return 0


def _shape_record(r: ShapeResult, min_gain: float) -> dict:
    rec = {"M": r.m, "N": r.n, "K": r.k, "torch_us": round(r.torch_us, 3), "bucket": [min(r.bucket), max(r.bucket)]
           if r.bucket else None, "timed": r.timed, "rejected": r.rejected}
    for tag, p in (("fast", r.fast), ("det", r.det)):
        if p is not None:
            rec[tag] = {"backend": p.backend, "kernel": p.kernel, "us": round(p.us, 3), "rel_err": p.rel_err,
                        "speedup": round(r.torch_us / p.us, 3), "row": wins(p, r.torch_us, min_gain)}
    return rec


def _shape_line(r: ShapeResult, min_gain: float) -> str:
    def part(p):
        if p is None:
            return "-"
        mark = "*" if wins(p, r.torch_us, min_gain) else " "
        return f"{p.backend}{mark} {p.us:6.2f} ({r.torch_us / p.us:4.2f}x)"

    return (f"M={r.m:<3d} N={r.n:<4d} K={r.k:<4d} torch {r.torch_us:6.2f} | fast {part(r.fast):<30s} | "
            f"det {part(r.det):<30s} | {r.timed} timed, {r.rejected} rejected")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sglang_fp32gemm tune", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=list(M_DEFAULT), help="the M grid (default %(default)s)")
    ap.add_argument("--n", type=int, nargs="+", default=list(common.N_DSV4))
    ap.add_argument("--k", type=int, nargs="+", default=list(K_DEFAULT), help="K values, most important first")
    ap.add_argument("--min-gain", type=float, default=0.02,
                    help="a row only where the kernel is this much faster than torch (default 2%%)")
    ap.add_argument("--backends", nargs="+", default=None, help="backend names to tune (default: every available)")
    ap.add_argument("--max-per-backend", nargs="*", default=list(DEFAULT_CAPS), metavar="NAME=COUNT",
                    help="time only the first COUNT candidates of a backend (default %(default)s)")
    ap.add_argument("--top", type=int, default=3, help="finalists per table re-timed with more replays")
    ap.add_argument("--screen-replays", type=int, default=7)
    ap.add_argument("--final-replays", type=int, default=15)
    ap.add_argument("--workers", type=int, default=max(1, min(16, (os.cpu_count() or 1) - 1)),
                    help="processes that compile kernels before timing (<= 1: compile while timing)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop cleanly after this many seconds (0: none)")
    ap.add_argument("--precompile-share", type=float, default=0.5,
                    help="at most this share of --budget-s goes to the parallel precompile")
    ap.add_argument("--out", default=None, help="fastest-kernel table (default <gfx>.csv)")
    ap.add_argument("--out-det", default=None, help="deterministic table (default <out>_deterministic.csv)")
    ap.add_argument("--summary", default=None, help="per-shape JSON summary (default <out>_summary.json)")
    ap.add_argument("--log", default="tune_log.jsonl", help="every candidate, one JSON per line (.gz: gzipped)")
    ap.add_argument("--no-pin-torch", action="store_true", help="never write libtype torch rows")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.device_key = None
    if not torch.cuda.is_available():
        print("tune needs a CUDA GPU", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
