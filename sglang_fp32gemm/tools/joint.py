"""``joint``: time the tables' kernels together where SGLang runs them; put torch back where they lose.

The tuner ranks one shape at a time (``tune --rank region``) with the step's other
fp32 GEMMs left out. SGLang's decode step runs all of them, and kernels that each
win alone can lose together (H200 run 12c: V4-Flash's routed step at M=1 added
4.05 us per layer against torch's 2.90). For each model and M, this times the
region step (tools/region.py; overlapped up to SGLang's multi-stream limit,
serial above) once without the fp32 GEMMs and once per subset of the shapes
the fast table routes to a kernel: those on their routed kernel, the rest on
torch. ``--rounds`` interleaved rounds; medians count. The fastest subset is
kept where it adds at least ``--min-gain`` (5%) less than all-torch, else none is.

Each routed shape left out gets a libtype torch row at that M in ``--out``
(laid over the tables through SGLANG_FLYDSL_FP32_GEMM_CONFIG, it overrides
them there) and, where eager calls ran a kernel, a row in ``--out-eager`` so
that they still do (eager calls run on one stream, as the kernel was ranked
alone). The deterministic table is not changed. Every time goes to ``--json``.

    python -m sglang_fp32gemm joint --out sm90_joint.csv --out-eager sm90_joint_eager.csv
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import sys
from typing import Optional, Sequence

import torch

from sglang_fp32gemm import exactness
from sglang_fp32gemm.table import DeviceKey, TunedRow, format_rows
from sglang_fp32gemm.tools import common, region, timing
from sglang_fp32gemm.tools.bench_measure import Bench, set_deterministic
from sglang_fp32gemm.tools.cli import Parser, add_capture, parse_ints, positive_int
from sglang_fp32gemm.tools.tune_rows import ShapeResult, table_row

DEFAULT_M = "1,2,4,8,16,32,48,64"


def subsets(ns: Sequence[int]) -> list[frozenset]:
    """Every subset of ``ns``, the empty one (all torch) first."""
    ns = sorted(ns)
    return [frozenset(c) for r in range(len(ns) + 1) for c in itertools.combinations(ns, r)]


def choose(added: dict[frozenset, float], min_gain: float) -> frozenset:
    """The subset whose step adds least (fewer kernels on a tie), where it adds at least
    ``min_gain`` less than all-torch (the empty subset); else the empty subset."""
    none = frozenset()
    best = min(added, key=lambda s: (added[s], len(s)))
    return best if added[best] <= added[none] * (1 - min_gain) else none


@dataclasses.dataclass
class Routed:
    """One shape the fast table sends to a kernel at this M, and where its eager calls go."""

    n: int
    row: TunedRow
    kernel: str
    eager_row: Optional[TunedRow]  # the row eager calls run (None: torch)


def overlay(m: int, k: int, dropped: Sequence[Routed], torch_call_us: float) -> tuple[list[TunedRow], list[TunedRow]]:
    """(torch rows, eager rows) for the routed shapes the joint check drops at ``m``."""
    fast, eager = [], []
    for r in dropped:
        key = DeviceKey(r.row.gfx, r.row.cu_num)
        fast.append(table_row(key, ShapeResult(m, r.n, k, torch_call_us, [], None, None), None))
        if r.eager_row is not None:
            eager.append(dataclasses.replace(r.eager_row, M=m, source=""))
    return fast, eager


def routed_shapes(router, plans: list, weights: list, x: torch.Tensor) -> list[Routed]:
    """The step's fp32 shapes the fast table routes to a kernel when captured at x's M (resolving them)."""
    out, seen = [], set()
    for steps, w in zip(plans, weights):
        for s in steps:
            if s.kind != region.GEMM_FP32 or s.n in seen:
                continue
            seen.add(s.n)
            with region.layer_mark(steps):
                e = router.decide(x, w[s.name], captured=True)
            if e.run is None:
                continue
            ea = e.eager if e.eager is not None else e
            out.append(Routed(s.n, e.row, e.detail, ea.row if ea.run is not None else None))
    return sorted(out, key=lambda r: r.n)


@dataclasses.dataclass
class Ctx:
    """What one model's steps need, made once for every M."""

    spec: region.ModelSpec
    weights: list
    streams: region.Streams
    device: torch.device
    timer: object
    torch_fn: object


def measure(ctx: Ctx, m: int, rounds: int, replays: int, min_gain: float
            ) -> tuple[dict, list[TunedRow], list[TunedRow]]:
    """One (model, M): (the record of every subset's time and the choice, its torch rows, its eager rows)."""
    from sglang_fp32gemm import routing

    spec, dev = ctx.spec, ctx.device
    schedule = region.schedule_for(m, dev)
    plans = region.plan(spec, schedule)
    x = exactness.random_bf16(m, spec.hidden, device=dev)
    shapes = [n for n, _ in region.fp32_shapes(spec)]
    if schedule == "serial":
        region.overlapped_first(ctx.timer, spec, ctx.weights, x, ctx.streams, ctx.torch_fn)
    steps = region.Steps(spec, plans, ctx.weights, x, ctx.streams)
    routed = routed_shapes(routing.get_router(), plans, ctx.weights, x)
    subs = subsets([r.n for r in routed])
    gemm = {s: {n: Bench.routed if n in s else ctx.torch_fn for n in shapes} for s in subs}
    times: dict = {s: [] for s in [None] + subs}
    router = routing.get_router()
    fell: dict[str, dict[str, int]] = {}
    stale: dict[str, str] = {}
    for s in timing.rotated_rounds(times, rounds):
        # Counters reset after the eager warm-up: a routed call captured on torch is a fallback.
        t, outs = ctx.timer.step(steps.of(None if s is None else gemm[s]), replays,
                                 before_capture=router.reset_counters if s else None,
                                 refresh=lambda: exactness.refill(x))
        times[s].append(t)
        bad = {f"{r}:{d}": c for (r, d), c in router.counters().items() if r == "torch"} if s else {}
        if bad:
            fell.setdefault(_name(s), bad)
        try:  # outputs after fresh x: a call the graph did not run leaves its output wrong
            exactness.check_replayed(outs, steps.operands())
        except exactness.StaleOutputs as e:
            stale.setdefault(_name(s), str(e)[:200])
    steps.release()
    base = statistics.median(times.pop(None))
    added = {s: (statistics.median(t) - base) / spec.layers for s, t in times.items()}
    # A subset whose captured calls fell back, or did not run, was not timed on its kernels: it cannot be kept
    # (and if torch's did not run, nothing was measured against it: no kernel is kept).
    keep = frozenset() if "torch" in stale else \
        choose({s: v for s, v in added.items() if _name(s) not in fell and _name(s) not in stale}, min_gain)
    dropped = [r for r in routed if r.n not in keep]
    torch_call_us = added[frozenset()] * spec.layers / region.fp32_calls(spec)
    fast, eager = overlay(m, spec.hidden, dropped, torch_call_us)
    rec = {"model": spec.name, "M": m, "K": spec.hidden, "schedule": schedule, "base_step_us": round(base, 2),
           "routed": {str(r.n): r.kernel for r in routed},
           "added_per_layer_us": {_name(s): round(v, 3) for s, v in added.items()},
           "rounds_step_us": {_name(s): [round(t, 2) for t in v] for s, v in times.items()},
           "kept": sorted(keep), "dropped": [r.n for r in dropped], "fallbacks": fell, "stale": stale,
           "rows": [r.to_csv_fields() for r in fast], "eager_rows": [r.to_csv_fields() for r in eager]}
    return rec, fast, eager


def _name(s) -> str:
    return "+".join(str(n) for n in sorted(s)) or "torch"


def line(rec: dict) -> str:
    a = rec["added_per_layer_us"]
    kept, every = _name(rec["kept"]), _name(int(n) for n in rec["routed"])
    return (f"{rec['model']} M={rec['M']} {rec['schedule']}: added per layer torch {a['torch']:.2f}, "
            f"as routed ({every}) {a[every]:.2f}, kept {kept} {a[kept]:.2f}"
            + (f"; torch rows for N={','.join(str(n) for n in rec['dropped'])}" if rec["dropped"] else "")
            + (f"; FELL BACK (not kept): {rec['fallbacks']}" if rec.get("fallbacks") else "")
            + (f"; NOT RUN IN THE GRAPH (not kept): {', '.join(rec['stale'])}" if rec.get("stale") else ""))


def run(args: argparse.Namespace, device=None, timer=None) -> int:
    device = device or torch.device("cuda")
    set_deterministic(False)  # the fast table: what the router serves by default
    recs, fast, eager = [], [], []
    for name in args.model:
        spec = region.MODELS[name]
        ctx = Ctx(spec, region.make_weights(spec, device), region.Streams(device), device,
                  timer or timing.CudaTimer(args.capture), timing.torch_fn(device))
        for m in args.m:
            rec, f, e = measure(ctx, m, args.rounds, args.replays, args.min_gain)
            fast += f
            eager += e
            recs.append(rec)
            print(line(rec), flush=True)
            common.write_text(args.out, format_rows(fast))
            if args.out_eager:
                common.write_text(args.out_eager, format_rows(eager))
            if args.json:
                common.write_json(args.json, {"argv": sys.argv, "versions": common.versions(),
                                              "capture": getattr(ctx.timer, "capture", None), "results": recs})
    print(f"wrote {len(fast)} torch rows to {args.out}"
          + (f", {len(eager)} rows to {args.out_eager}" if args.out_eager else ""), flush=True)
    return 0


def parser() -> Parser:
    ap = Parser("python -m sglang_fp32gemm joint", __doc__)
    ap.add_argument("--model", type=lambda t: [s for s in t.split(",") if s], default=["pro", "flash"],
                    help="region models, e.g. pro,flash (default both)")
    ap.add_argument("--m", type=parse_ints, default=parse_ints(DEFAULT_M), help=f"M values (default {DEFAULT_M})")
    ap.add_argument("--rounds", type=positive_int, default=3)
    add_capture(ap)
    ap.add_argument("--replays", type=positive_int, default=15)
    # 5%: between device calls the overlapped region varies by several percent (H200 run 12).
    ap.add_argument("--min-gain", type=float, default=0.05,
                    help="keep kernels only where the step adds this much less than all-torch (default 5%%)")
    ap.add_argument("--out", required=True, help="the torch rows (a fast table to lay over the others)")
    ap.add_argument("--out-eager", default=None, help="the eager rows (name it *_eager.csv)")
    ap.add_argument("--json", default=None, help="every time, per model and M")
    return ap


def main(argv: list[str] | None = None, device=None, timer=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    bad = [m for m in args.model if m not in region.MODELS]
    if bad:
        ap.error(f"--model: unknown model {bad[0]} (one of {', '.join(region.MODELS)})")
    if device is None and not torch.cuda.is_available():
        print("joint needs a CUDA GPU", file=sys.stderr)
        return 2
    return run(args, device, timer)


if __name__ == "__main__":
    sys.exit(main())
