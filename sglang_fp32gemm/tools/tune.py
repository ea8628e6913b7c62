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
             kernelName = backend.kernel_name(cfg), where it beats torch by
             --min-gain; otherwise a libtype ``torch`` row (torch serves the
             call; laid over another table, the row overrides that table's);
  --out-det  the same for deterministic candidates only (torch.mm counts as
             deterministic).
Rows are the same for both tables where the fastest kernel is deterministic.
An M of the grid the budget did not reach gets a torch row too where its
bucket would otherwise round up to another row's kernel (aiter's lookup only
rounds up). --no-pin-torch writes no torch rows.

Ranking: the --top finalists of each table are re-timed with more replays
and ordered by that time (--rank isolated), or by what each call adds where
SGLang runs it (then each backend's fastest form with PDL and without join
the finalists: replayed alone, a PDL form overlaps its own launch, which it
cannot there): --rank region times them in the model of SGLang's decode
region (tools/region.py) of the model that has the shape (V4-Pro at K=7168,
V4-Flash at K=4096; N 512/1024/2048), overlapped on SGLang's side streams up
to its multi-stream limit (M <= 64 on Hopper), serial above; --rank chain
(and region, for shapes no model has) in a 61-layer serial chain of bf16
GEMMs around the call; --rank serial in the region model's serial schedule at
every M, for the serial table (--out NAME_serial.csv: the rows that calls
outside SGLang's multi-stream region take, laid over the fast table; only the
shapes tuned get rows, torch rows included, and no deterministic or eager
table is written). Torch is timed the same way, and a row is written only
where the winner beats torch there. The median of --rounds interleaved rounds
counts; every time goes to the log. Ranked that way, the tune also writes
--out-eager: the fastest kernel alone whose backend launches cheaply outside a
graph, where it beats torch alone and either torch won the rank or it beats
the ranked winner's kernel alone too, by --min-gain (eager calls run alone,
with no graph; the router gives them that row).

--serial-table writes the serial table (as --rank serial does) whatever the
rank: for serial rows no serial step reads, ranked alone (--rank isolated).
V4-Pro's pair rows serve its ratio-4 layers' N=512 and N=2048 GEMMs at M
1-64, so the serial table's rows there serve calls alone (run 32).

Pairs: --pair (with --rank serial) tunes the pair table (--out NAME_pair.csv,
pairs.py): N is a ratio-4 layer's two compressor GEMMs joined (N1 + N2: 512 +
2048 = 2560 in V4-Pro and V4-Flash, the default), the candidates are the pair
forms of the backends that have one (cutedsl-dot, Triton), torch is its two
calls, and each is ranked by what one pair adds to the serial schedule. A row
names the kernel whose pair form won, where it beats torch's two calls by
--min-gain; whether it also beats the serial table's two kernels is for
`bench --region` (its routed+pair column) to say before a pair table ships.

The shipped row: where the packaged table the tune writes (the fast table; with
--rank serial or --serial-table the serial table over it; with --pair the pair table) routes a
shape to a kernel, that kernel is screened with the candidates and is always a
finalist, whichever available backend serves it (--backends and
--max-per-backend do not drop it), so a new row must beat the shipped one in
the same rank; its time is in the log (event ``shape``, ``shipped``) and on the
shape's line. With --rank region or serial the model's other fp32 GEMMs run
in the step as that table routes them (torch where it has a torch row or
none; event ``others``), in the base step too, instead of being left out: a
call's cost beside the calls SGLang runs with it. --no-vs-shipped leaves the
table out of both.

Budget: --budget-s stops cleanly between candidates, keeps every finished
shape and writes the tables; they are also rewritten after every shape, so a
run killed from outside keeps what it finished; SIGTERM (``timeout``) stops
like the budget. Shapes run in order of importance: M <= 32 first, the first
--k first. Progress (shapes done, candidates timed, time left) goes to stderr.

    python -m sglang_fp32gemm tune --out configs/sm90.csv --out-det configs/sm90_deterministic.csv
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import Optional

import torch

from sglang_fp32gemm import backends as backend_registry
from sglang_fp32gemm.table import TunedRow, TunedTable, TunedTables, device_key, format_rows
from sglang_fp32gemm.tools import common, region, timing
from sglang_fp32gemm.tools.buckets import grid_buckets, shape_order
from sglang_fp32gemm.tools.cli import Parser, add_capture, positive_int
from sglang_fp32gemm.tools.precompile import precompile
from sglang_fp32gemm.tools.progress import Progress
from sglang_fp32gemm.tools.stopping import Budget, Stop
from sglang_fp32gemm.tools.tune_rows import (ShapeResult, build_eager_rows, build_rows, cutedsl_compiles,
                                              eager_row, wins)
from sglang_fp32gemm.tools.tuner import RANKS, Tuner, gather_candidates, pair_forms, parse_caps, shipped_candidate

M_DEFAULT = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
K_DEFAULT = (common.K_PRO, common.K_FLASH)
DEFAULT_CAPS = ("cutedsl=4",)  # the default tactic + the first three of autotune_tactics


def usable_backends(backends: list, log: common.JsonLog) -> list:
    """The available ones; each backend's availability is printed and logged."""
    usable = []
    for b in backends:
        ok, why = common.available(b)
        log.write(event="backend", backend=b.name, libtype=b.libtype, available=ok, reason=why)
        print(f"backend {b.name:<12} libtype {b.libtype:<8} {'available' if ok else 'UNAVAILABLE: ' + why}",
              flush=True)
        if ok:
            usable.append(b)
    return usable


def writes_serial(args: argparse.Namespace) -> bool:
    """Whether the tune writes the serial table: --rank serial (--pair included), or --serial-table with another
    rank (run 32: serial rows that serial steps never read, ranked alone)."""
    return args.rank == "serial" or args.serial_table


def shipped_table(args: argparse.Namespace) -> TunedTable:
    """The packaged table whose rows the tune would replace: the pair table, the serial table as calls outside
    SGLang's multi-stream region read it (laid over the fast one), or the fast table; empty with
    --no-vs-shipped."""
    if not args.vs_shipped:
        return TunedTable([])
    tables = TunedTables.load()
    return tables.pair if args.pair else tables.outside if writes_serial(args) else tables.fast


def run(args: argparse.Namespace, backends: Optional[list] = None, device=None, timer=None,
        shipped: Optional[TunedTable] = None) -> int:
    """``shipped``: the table whose rows the tune times beside its candidates (default ``shipped_table``)."""
    device = device or torch.device("cuda")
    timer = timer or timing.CudaTimer(args.capture)
    budget = Budget(args.budget_s)
    key = device_key(device) if device.type == "cuda" else args.device_key
    if key is None:
        print("no table key for this device", file=sys.stderr)
        return 2
    suffix = "_pair" if args.pair else "_serial" if writes_serial(args) else ""
    out = args.out or f"{key.gfx}{suffix}.csv"
    out_det = args.out_det or f"{os.path.splitext(out)[0]}_deterministic.csv"
    out_eager = args.out_eager or f"{os.path.splitext(out)[0]}_eager.csv"
    summary_path = args.summary or f"{os.path.splitext(out)[0]}_summary.json"
    log = common.JsonLog(args.log)
    log.write(event="start", argv=sys.argv, device=str(key), versions=common.versions(),
              capture=getattr(timer, "capture", None))
    grid = sorted(set(args.m))
    buckets = grid_buckets(grid)
    caps = parse_caps(args.max_per_backend)
    if backends is None:
        backends = backend_registry.all_backends()
    every = backends  # the shipped rows' kernels are timed whichever backend serves them
    if args.backends:
        backends = [b for b in backends if b.name in set(args.backends)]
    usable = usable_backends(backends, log)
    ns = args.n or (region.joined_widths(args.k) if args.pair else list(common.N_DSV4))
    shapes = shape_order(grid, ns, args.k)
    if args.pair:
        unpaired = sorted({(n, k) for _, n, k in shapes if region.pair_spec_for(n, k) is None})
        if unpaired:
            print(f"--pair: no model's ratio-4 layer pairs two fp32 GEMMs of joined width N at K for (N, K) in "
                  f"{unpaired} (pairs: {region.joined_widths(args.k)} at these K)", file=sys.stderr)
            return 2

    shipped = shipped_table(args) if shipped is None else shipped
    serving = usable + [b for b in every if b not in backends and common.available(b)[0]]

    def others(m: int, n: int, k: int):  # what the region step runs at the model's other fp32 GEMMs
        return shipped_candidate(shipped.lookup(key, m, n, k), serving, m, n, k, [m], log)

    tuner = Tuner(usable, device, timer, log, caps=caps, top=args.top, screen_replays=args.screen_replays,
                  final_replays=args.final_replays, budget=budget, rank=args.rank,
                  rounds=args.rounds, pair=args.pair, others=others if args.vs_shipped else None)

    def offered(n: int, k: int) -> list:  # with --pair, the pair forms of the backends that have one
        return pair_forms(usable, *tuner.widths(n, k)) if args.pair else usable

    cands = {s: gather_candidates(offered(s[1], s[2]), s[0], s[1], s[2], buckets[s[0]], caps, log) for s in shapes}
    incumbent = {s: shipped_candidate(shipped.lookup(key, *s), pair_forms(serving, *tuner.widths(s[1], s[2]))
                                      if args.pair else serving, *s, buckets[s[0]], log) for s in shapes}
    for s, c in incumbent.items():  # precompiled with the rest
        if c is not None and all(x.label != c.label for x in cands[s]):
            cands[s] = [*cands[s], c]
    per_backend = dict(collections.Counter(c.backend.name for cs in cands.values() for c in cs))
    print(f"{len(shapes)} shapes, candidates per backend: {per_backend}", flush=True)
    jobs = [(c.backend.name, c.kernel, s[0], s[1], s[2]) for s in shapes for c in cands[s]]
    results: list[ShapeResult] = []
    stopped = None

    serial = writes_serial(args)  # with --pair too

    def write_tables() -> tuple[list[TunedRow], list[TunedRow], list[TunedRow]]:
        # A serial table lies over the fast one: a grid M it did not reach must leave the fast row be.
        fast = build_rows(results, key, grid, args.min_gain, False, not args.no_pin_torch, pin_unreached=not serial)
        common.write_text(out, format_rows(fast))
        det: list[TunedRow] = []
        eager: list[TunedRow] = []
        if serial:
            return fast, det, eager
        det = build_rows(results, key, grid, args.min_gain, True, not args.no_pin_torch)
        common.write_text(out_det, format_rows(det))
        if args.rank != "isolated":  # ranked alone, the fast table serves eager calls as they are
            eager = build_eager_rows(results, key, args.min_gain)
            common.write_text(out_eager, format_rows(eager))
        return fast, det, eager

    progress = Progress(len(shapes), "tune", left_s=budget.left)
    # `timeout` sends SIGTERM: stop like the budget does, keeping what is finished.
    try:
        with budget.sigterm():
            if device.type == "cuda" and not args.pair:  # the workers compile single forms; pairs compile here
                precompile(jobs, args.workers, budget.at(args.precompile_share), log)
            for s in shapes:
                m, n, k = s
                if budget.expired():
                    stopped = f"budget of {args.budget_s:.0f}s reached before M={m} N={n} K={k}"
                    break
                r = tuner.shape(m, n, k, buckets[m], cands[s], incumbent[s])
                results.append(r)
                print(f"[{budget.elapsed():5.0f}s] " + _shape_line(r, args.min_gain), flush=True)
                log.write(event="shape", **_shape_record(r, args.min_gain))
                write_tables()
                progress.update(1, r.timed)
    except Stop as e:
        stopped = f"stopped ({e}) during a shape after {budget.elapsed():.0f}s"
    finally:
        progress.close()
    fast, det, eager = write_tables()
    done = {(r.m, r.n, r.k) for r in results}
    missing = [s for s in shapes if s not in done]
    compiles = {"fast": cutedsl_compiles(fast, grid), "deterministic": cutedsl_compiles(det, grid)}
    summary = {"device": str(key), "argv": sys.argv, "elapsed_s": round(budget.elapsed(), 1),
               "stopped": stopped, "missing_shapes": missing, "rows": len(fast), "det_rows": len(det),
               "eager_rows": len(eager),
               "cutedsl_runtime_compiles": compiles,
               "shapes": [_shape_record(r, args.min_gain) for r in results]}
    common.write_json(summary_path, summary)
    log.write(event="end", stopped=stopped, rows=len(fast), det_rows=len(det), missing=len(missing))
    log.close()
    print(f"wrote {len(fast)} rows to {out} ({sum(r.libtype == 'torch' for r in fast)} torch rows)"
          + ("" if serial else f", {len(det)} rows to {out_det} ({sum(r.libtype == 'torch' for r in det)} torch rows)")
          + (f", {len(eager)} rows to {out_eager}" if args.rank not in ("isolated", "serial") else "") + "; "
          f"{len(results)}/{len(shapes)} shapes in {summary['elapsed_s']}s"
          + (f"; {stopped}; {len(missing)} shapes not tuned" if stopped else ""), flush=True)
    if compiles["fast"] or compiles["deterministic"]:
        print(f"note: the cutedsl rows serve {compiles['fast']} (fast table) / {compiles['deterministic']} "
              "(deterministic table) exact (M, N, K): one JIT compile each (~1 s) on first use", flush=True)
    return 0


def _shape_record(r: ShapeResult, min_gain: float) -> dict:
    rec = {"M": r.m, "N": r.n, "K": r.k, "torch_us": round(r.torch_us, 3), "bucket": [min(r.bucket), max(r.bucket)]
           if r.bucket else None, "timed": r.timed, "rejected": r.rejected}
    for tag, p, t in (("fast", r.fast, r.torch_us), ("det", r.det, r.torch_us), ("eager", r.eager, r.torch_alone_us)):
        if p is not None:
            row = eager_row(r, min_gain) if tag == "eager" else wins(p, t, min_gain)
            rec[tag] = {"backend": p.backend, "kernel": p.kernel, "us": round(p.us, 3), "rel_err": p.rel_err,
                        "speedup": round(t / p.us, 3), "row": row}
    if r.shipped is not None:
        rec["shipped"] = {"kernel": r.shipped, "us": None if r.shipped_us is None else round(r.shipped_us, 3)}
    return rec


def _shape_line(r: ShapeResult, min_gain: float) -> str:
    def part(p):
        if p is None:
            return "-"
        mark = "*" if wins(p, r.torch_us, min_gain) else " "
        return f"{p.backend}{mark} {p.us:6.2f} ({r.torch_us / p.us:4.2f}x)"

    shipped = ""
    if r.shipped is not None:
        shipped = f" | shipped {r.shipped} " + ("not timed" if r.shipped_us is None else f"{r.shipped_us:.2f}")
    return (f"M={r.m:<3d} N={r.n:<4d} K={r.k:<4d} torch {r.torch_us:6.2f} | fast {part(r.fast):<30s} | "
            f"det {part(r.det):<30s} | {r.timed} timed, {r.rejected} rejected{shipped}")


def parser() -> Parser:
    ap = Parser("python -m sglang_fp32gemm tune", __doc__)
    ap.add_argument("--m", type=positive_int, nargs="+", default=list(M_DEFAULT),
                    help="the M grid (default %(default)s)")
    ap.add_argument("--n", type=positive_int, nargs="+", default=None,
                    help=f"the N grid (default {' '.join(map(str, common.N_DSV4))}; with --pair the joined widths "
                         "of the models at --k)")
    ap.add_argument("--k", type=positive_int, nargs="+", default=list(K_DEFAULT), help="K values, most important first")
    ap.add_argument("--min-gain", type=float, default=0.02,
                    help="a row only where the kernel is this much faster than torch (default 2%%)")
    ap.add_argument("--backends", nargs="+", default=None, help="backend names to tune (default: every available)")
    ap.add_argument("--max-per-backend", nargs="*", default=list(DEFAULT_CAPS), metavar="NAME=COUNT",
                    help="time only the first COUNT candidates of a backend (Triton lists its PDL forms after all "
                         "its plain forms) (default %(default)s)")
    ap.add_argument("--top", type=positive_int, default=3, help="finalists per table re-timed with more replays")
    ap.add_argument("--rank", choices=RANKS, default="isolated",
                    help="order the finalists by their time alone, or by what a call adds in a serial decode chain, "
                         "in SGLang's decode region, or in its serial schedule at every M (the serial table) "
                         "(the tables' us column is then that) (default %(default)s)")
    ap.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds of --rank chain/region")
    ap.add_argument("--serial-table", action="store_true",
                    help="write the serial table whatever --rank orders by (implied by --rank serial): compare "
                         "against its shipped rows, rows only for the shapes tuned, no deterministic or eager "
                         "table (--out default <gfx>_serial.csv). For serial rows no serial step reads, e.g. "
                         "V4-Pro's N 512 / 2048 at M 1-64, which its pair rows serve: --rank isolated")
    ap.add_argument("--pair", action="store_true",
                    help="with --rank serial: tune the pair table (one launch for a ratio-4 layer's two compressor "
                         "GEMMs; --out default <gfx>_pair.csv)")
    add_capture(ap)
    ap.add_argument("--screen-replays", type=positive_int, default=7)
    ap.add_argument("--final-replays", type=positive_int, default=15)
    ap.add_argument("--workers", type=int, default=max(1, min(16, (os.cpu_count() or 1) - 1)),
                    help="processes that compile kernels before timing (<= 1: compile while timing)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop cleanly after this many seconds (0: none)")
    ap.add_argument("--precompile-share", type=float, default=0.5,
                    help="at most this share of --budget-s goes to the parallel precompile")
    ap.add_argument("--out", default=None, help="fastest-kernel table (default <gfx>.csv)")
    ap.add_argument("--out-det", default=None, help="deterministic table (default <out>_deterministic.csv)")
    ap.add_argument("--out-eager", default=None, help="with --rank chain/region: the eager table (default <out>_eager.csv)")
    ap.add_argument("--summary", default=None, help="per-shape JSON summary (default <out>_summary.json)")
    ap.add_argument("--log", default="tune_log.jsonl", help="every candidate, one JSON per line (.gz: gzipped)")
    ap.add_argument("--no-pin-torch", action="store_true", help="never write libtype torch rows")
    ap.add_argument("--no-vs-shipped", dest="vs_shipped", action="store_false",
                    help="leave the packaged table out: by default the kernel it routes each shape to is screened "
                         "and always a finalist, whichever backend serves it, and with --rank region/serial the "
                         "model's other fp32 GEMMs run its kernels in the step (else they are left out)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    args.device_key = None
    try:
        parse_caps(args.max_per_backend)
    except ValueError as e:
        ap.error(str(e))
    if args.pair and args.rank != "serial":
        ap.error("--pair ranks pairs where SGLang runs them, in the serial schedule: give --rank serial too")
    if args.pair and args.serial_table:
        ap.error("--pair writes the pair table, --serial-table the serial table: give one")
    if not torch.cuda.is_available():
        print("tune needs a CUDA GPU", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
