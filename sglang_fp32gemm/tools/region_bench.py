"""``bench --region``: time the region model (tools/region.py) with each fp32 GEMM in turn.

Per (model, M, schedule), one CUDA graph per step (tools/timing.py: warm-up, capture,
median of replays), for each fp32 mode: ``none`` (the GEMMs removed: the base), ``torch``
(torch.mm out_dtype fp32), ``routed`` (``routing.linear_bf16_fp32``), each available backend
alone at its tuned config for every fp32 shape (``Bench.columns``), and vLLM's ll_bf16 at the
best config of a small sweep when importable (tools/vllm_peer.py). Each mode is captured
``--region-rounds`` times, interleaved with the others (each round starts one mode later);
its median capture counts. Added per
layer = (step - base) / layers. Every fp32 output of each capture's last replay is checked
against float64 (``exactness``). In ``routed`` mode the router's counters, reset after the
eager warm-up and read after each capture, must show every captured call on the kernel the
table names for its shape (``route_check``). Before the last replay of each capture x gets fresh
values (``refresh``), so that the check also shows that every captured kernel ran in the replays.
In the serial schedule (one stream) each column's calls are also timed alone at every fp32 shape:
a column that adds much less than their sum (``timing.one_stream_suspect``) is marked ``suspect``. A process's
first serial row comes after one overlapped capture (``region.overlapped_first``).
Serial rows also time ``routed+pair`` where a backend's pair form takes the shape: the routed column
with each ratio-4 layer's two fp32 GEMMs one launch (``region.PAIR``, ``Bench.pair_fn``); a candidate
measured, not the plugin's route.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from typing import Any, Optional

import torch

from sglang_fp32gemm import exactness, pairs
from sglang_fp32gemm.tools import bench_report as report
from sglang_fp32gemm.tools import region, timing
from sglang_fp32gemm.tools.bench_measure import PEER

DEFAULT_M = "1,2,4,8,16,32,64"
#: The routed column with each ratio-4 layer's ``region.PAIR`` one launch of a pair form (serial rows).
PAIRED = "routed+pair"


@dataclasses.dataclass
class Ctx:
    """One model's weights and streams, made once for every M, schedule and mode."""

    spec: region.ModelSpec
    plans: dict[str, list]
    weights: list
    streams: region.Streams
    sweep_weights: dict = dataclasses.field(default_factory=dict)


def prepare(bench, spec: region.ModelSpec) -> Ctx:
    dev = bench.device
    return Ctx(spec, {s: region.plan(spec, s) for s in region.SCHEDULES}, region.make_weights(spec, dev),
               region.Streams(dev))


def spec_info(spec: region.ModelSpec) -> dict:
    r = spec.compress_ratios
    return {**dataclasses.asdict(spec), "layers": spec.layers, "hca": r.count(128), "csa": r.count(4),
            "swa": r.count(0), "fp32_shapes": region.fp32_shapes(spec), "fp32_calls": region.fp32_calls(spec)}


def _fp32_modes(bench, ctx: Ctx, m: int, schedule: str, rec: dict) -> dict[str, Any]:
    from sglang_fp32gemm import routing

    shapes = region.fp32_shapes(ctx.spec)
    modes: dict[str, Any] = {"none": None, "torch": {n: bench.torch_fn for n, _ in shapes},
                             "routed": {n: bench.routed for n, _ in shapes}}
    if routing.get_router().pairs is not None:
        modes["routed"]["pair"] = bench.routed_pair  # the plugin's pair table (serial layers only)
    if region.pairs(ctx.plans[schedule]):
        n1, n2 = region.pair_widths(ctx.spec)
        fn, what = bench.pair_fn(m, n1, n2, ctx.spec.hidden)
        if fn is None:
            rec["note"][PAIRED] = what
        else:
            modes[PAIRED] = {**{n: bench.routed for n, _ in shapes}, "pair": fn}
            rec["kernel"][PAIRED] = {"pair": what, "other": "routed"}
    cols: dict[str, dict] = collections.defaultdict(dict)
    for n, k in shapes:
        found, notes = bench.columns(m, n, k)
        for name, fn, kernel, source in found:
            cols[name][n] = (fn, kernel, source)
        for name, why in notes.items():
            rec["note"][f"{name}@N={n}"] = why
    for name, per_n in cols.items():
        if len(per_n) == len(shapes):
            modes[name] = {n: fn for n, (fn, _, _) in per_n.items()}
            rec["kernel"][name] = {str(n): f"{kern} ({src})" for n, (_, kern, src) in per_n.items()}
        else:
            rec["note"][name] = "takes only N=" + ",".join(str(n) for n in per_n) + ": no region column"
    if bench.peer_absent(rec):
        return modes
    fns = {}
    for n, k in shapes:
        cfg, fn = bench.peer_fn(m, n, k, _sweep_weights(bench, ctx, n, k), rec)
        if fn is None:
            return modes
        fns[n] = fn
        rec["kernel"].setdefault(PEER, {})[str(n)] = f"{cfg} (best of the sweep, isolated)"
    modes[PEER] = fns
    return modes


def _route_check(ctx: Ctx, x: torch.Tensor, counted: dict, schedule: str) -> dict:
    """Did every captured routed call run the kernel the table names for its shape (the serial table's
    outside the multi-stream region, where there is one)?"""
    from sglang_fp32gemm import routing

    router = routing.get_router()
    expected: collections.Counter = collections.Counter()
    table: dict[str, str] = {}
    ok = True
    for steps, w in zip(ctx.plans[schedule], ctx.weights):
        joined = None
        if router.pairs is not None and region.paired(steps):
            joined = router.pairs.get(x, w[region.PAIR[0]], w[region.PAIR[1]])  # resolved in the warm-up
            joined = joined if joined.run is not None else None
        for s in steps:
            if s.kind != region.GEMM_FP32:
                continue
            if joined is not None and s.name in region.PAIR:
                expected[joined.key] += 1  # both GEMMs of the pair count under its kernel
                table[f"{s.n} (pair)"] = f"{joined.bound.backend}:{joined.bound.kernel_name}"
                continue
            with region.layer_mark(steps):
                e = router.decide(x, w[s.name], captured=True)
            expected[e.key] += 1
            named = (e.row.kernelName or None) if e.row is not None else None  # a torch row names none
            table[str(s.n)] = f"{e.route}:{e.detail}"
            ok = ok and (named is None or (e.run is not None and e.detail == named))
    exp = {f"{r}:{d}": c for (r, d), c in expected.items()}
    got = {f"{r}:{d}": c for (r, d), c in counted.items()}
    return {"ok": ok and exp == got, "expected": exp, "counted": got, "table": table}


def measure(bench, ctx: Ctx, m: int, schedule: str, replays: int, rounds: int) -> dict:
    """One (model, M, schedule): every mode captured ``rounds`` times, interleaved (``timing.rotated_rounds``);
    the median capture counts. One capture is not enough in the overlapped region: about one in nine
    runs 3-28% slower than the same step captured again (H200; docs/benchmarks/README.md, "Slow captures")."""
    from sglang_fp32gemm import routing

    spec = ctx.spec
    x = exactness.random_bf16(m, spec.hidden, device=bench.device)
    L = spec.layers
    rec: dict[str, Any] = {"model": spec.name, "M": m, "N": "/".join(str(n) for n, _ in region.fp32_shapes(spec)),
                           "K": spec.hidden, "schedule": schedule, "layers": L, "step_us": {},
                           "add_per_layer_us": {}, "rel_err": {}, "allclose": {}, "kernel": {}, "note": {}}
    if schedule == "overlapped" and region.schedule_for(m, bench.device) == "serial":
        rec["note"]["schedule"] = f"SGLang runs M={m} serially on this device (above its multi-stream limit)"
    if schedule == "serial" and region.overlapped_first(bench.timer, spec, ctx.weights, x, ctx.streams,
                                                        bench.torch_fn):  # before any timing of this row
        rec["note"]["overlapped_first"] = ("this process had captured no overlapped step: one (torch) was "
                                           "captured first, as a SGLang server has (run 22)")
    modes = {name: gemm for name, gemm in _fp32_modes(bench, ctx, m, schedule, rec).items()
             if name == "none" or gemm}
    steps = region.Steps(spec, ctx.plans[schedule], ctx.weights, x, ctx.streams)
    times: dict[str, list[float]] = {name: [] for name in modes}
    router = routing.get_router()
    for name in timing.rotated_rounds(times, rounds):  # a mode that raised is dropped from times
        try:
            t, outs = bench.timer.step(steps.of(modes[name]), replays,
                                       before_capture=router.reset_counters if name == "routed" else None,
                                       refresh=lambda: exactness.refill(x))
        except Exception as e:  # one failing mode is a note, not the end of the run
            rec["note"][name] = f"raised {type(e).__name__}: {str(e)[:200]}"
            del times[name]
            steps.release()
            if name == "none":
                return rec  # nothing is added to a step that was not timed
            continue
        times[name].append(t)
        if name == "routed":
            check = _route_check(ctx, x, router.counters(), schedule)
            if rec.get("route_check", {}).get("ok", True):  # a failing round's check stays
                rec["route_check"] = check
        if name != "none":
            _check_outputs(rec, name, outs, steps.operands())
        steps.release()
    rec["rounds_step_us"] = {name: [round(t, 2) for t in ts] for name, ts in times.items()}
    step = {name: statistics.median(ts) for name, ts in times.items()}
    base = step.pop("none")
    rec["step_us"] = {"none": round(base, 2), **{name: round(t, 2) for name, t in step.items()}}
    rec["add_per_layer_us"] = {name: round((t - base) / L, 3) for name, t in step.items()}
    if schedule == "serial":
        _serial_check(bench, ctx, m, {name: modes[name] for name in step}, rec)
    return rec


def _serial_check(bench, ctx: Ctx, m: int, modes: dict, rec: dict) -> None:
    """Each column's calls timed alone at each fp32 shape (``isolated_us``; a pair form's call at N1+N2), their
    sum per layer (``isolated_per_layer_us``), and the columns that added much less than it (``suspect``)."""
    spec = ctx.spec
    x = exactness.random_bf16(m, spec.hidden, device=bench.device)
    rec.update(isolated_us={}, isolated_per_layer_us={}, suspect={})
    n1, n2 = region.pair_widths(spec)
    paired_layers = region.pairs(ctx.plans["serial"])
    for name, gemm in modes.items():
        fused = paired_layers if "pair" in gemm else 0
        # What a step calls, a call per width (the pair's at N1 + N2): (fn, width) and how many times.
        calls: dict[Any, int] = {n: region.fp32_calls(spec, n) - (fused if n in (n1, n2) else 0)
                                 for n, _ in region.fp32_shapes(spec)}
        fns: dict[Any, tuple] = {n: (gemm[n], n) for n, c in calls.items() if c}
        if fused:
            calls["pair"], fns["pair"] = fused, (pairs.on_halves(gemm["pair"], n1), n1 + n2)
        try:
            per = {key: bench.timer.per_call(fn, x, _sweep_weights(bench, ctx, width, spec.hidden))
                   for key, (fn, width) in fns.items()}
        except Exception as e:  # the check is a note; the row's times stand
            rec["note"][f"{name} alone"] = f"raised {type(e).__name__}: {str(e)[:200]}"
            continue
        total = sum(calls[key] * us for key, us in per.items()) / spec.layers
        rec["isolated_us"][name] = {str(n): round(us, 3) for n, us in per.items()}
        rec["isolated_per_layer_us"][name] = round(total, 3)
        why = timing.one_stream_suspect(rec["add_per_layer_us"][name], total)
        if why:
            rec["suspect"][name] = why + " (a layer)"


def _sweep_weights(bench, ctx: Ctx, n: int, k: int) -> list:
    """The weight sets a call of width ``n`` is timed alone on (made once a model)."""
    if n not in ctx.sweep_weights:
        ctx.sweep_weights[n] = bench.timer.weights(n, k, bench.device)
    return ctx.sweep_weights[n]


def _check_outputs(rec: dict, name: str, outs: list, operands: list) -> None:
    """Every fp32 output against float64; the worst over the mode's captures is kept."""
    worst, close = rec["rel_err"].get(name, 0.0), rec["allclose"].get(name, True)
    for o, (x, w) in zip(outs, operands):
        r = exactness.measure(o, exactness.reference(x, w))
        worst, close = max(worst, r.rel_err), close and r.ok
    rec["rel_err"][name], rec["allclose"][name] = worst, close


# -- what is written and printed ---------------------------------------------------------------
def line(r: dict) -> str:
    adds = " ".join(f"{c}={v:.2f}" for c, v in r["add_per_layer_us"].items())
    chk = r.get("route_check", {}).get("ok")
    spread = spread_pct(r)
    suspect = ", ".join(f"{c} {r['add_per_layer_us'][c] / r['isolated_per_layer_us'][c]:.2f}x"
                        for c in r.get("suspect", {}))
    return (f"{r['model']} M={r['M']} {r['schedule']} base {r['step_us'].get('none', '-')} us; added per layer: "
            f"{adds}" + ("" if spread is None else f"; captures spread {spread:.1f}%")
            + ("" if chk is None else f"; routed as the table says: {chk}")
            + (f"; SUSPECT (below {timing.ONE_STREAM_FLOOR}x the calls alone): {suspect}" if suspect else ""))


def spread_pct(r: dict) -> Optional[float]:
    """The widest spread of one mode's captures, (slowest - fastest) / fastest in %; None with one capture."""
    rounds = [ts for ts in r.get("rounds_step_us", {}).values() if len(ts) > 1]
    return max((100 * (max(ts) - min(ts)) / min(ts) for ts in rounds), default=None)


def markdown(results: list[dict]) -> str:
    cols = report.col_names([{"us": r["add_per_layer_us"]} for r in results], ("torch", "routed"))
    lines = ["# Region: what the fp32 GEMMs add per decode layer (us)", "",
             "A model of SGLang 0.5.23's DeepSeek-V4 decode attention-prepare region (docs/benchmarks/README.md): "
             "every layer its own weights, one CUDA graph per step, each step captured several times (interleaved "
             "with the other modes; the median capture counts); added per layer = (step - step without the "
             "fp32 GEMMs) / layers. Overlapped: SGLang's side streams (bs <= 64 on Hopper); serial: one stream. "
             "Spread: the widest of one mode's captures, (slowest - fastest) / fastest.", "",
             "| model | M | schedule | base step us | " + " | ".join(cols) + " | spread % | routed as the table says |",
             "|" + "---|" * (len(cols) + 6)]
    for r in results:
        chk = r.get("route_check", {}).get("ok")
        lines.append(f"| {r['model']} | {r['M']} | {r['schedule']} | {report.fmt(r['step_us'].get('none'))} | "
                     + " | ".join(report.fmt(r["add_per_layer_us"].get(c), 2) for c in cols)
                     + f" | {report.fmt(spread_pct(r), 1)} | {'-' if chk is None else chk} |")
    kernels: dict[str, set] = {}
    for r in results:
        for c, per_n in r.get("kernel", {}).items():
            kernels.setdefault(c, set()).update(f"N={n}: {k}" for n, k in per_n.items())
    if kernels:
        lines += ["", "Columns ran these kernels:", ""]
        lines += [f"- {c}: " + "; ".join(sorted(ks)[:8]) for c, ks in kernels.items()]
    suspect = [f"{r['model']} M={r['M']} {r['schedule']} {c}: {why}" for r in results
               for c, why in r.get("suspect", {}).items()]
    if suspect:
        lines += ["", f"Suspect (on one stream, below {timing.ONE_STREAM_FLOOR}x the sum of the column's calls alone):",
                  ""]
        lines += [f"- {s}" for s in suspect]
    notes = {f"{c}: {v}" for r in results for c, v in r["note"].items() if c != "schedule"}
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in sorted(notes)[:20]]
    return "\n".join(lines) + "\n"


def summary(results: list[dict]) -> list[str]:
    out = ["== region: us the fp32 GEMMs add per layer (step minus the step without them, / layers)"]
    out += ["  " + line(r) for r in results]
    bad = [f"{r['model']} M={r['M']} {r['schedule']}" for r in results
           if r.get("route_check") is not None and not r["route_check"]["ok"]]
    checked = sum(1 for r in results if r.get("route_check") is not None)
    out.append(f"route check: {checked - len(bad)}/{checked} routed steps ran the table's kernels"
               + (f"; FAILED: {', '.join(bad[:6])}" if bad else ""))
    out.append(report.precision_line(results))
    return out
