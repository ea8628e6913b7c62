"""Benchmark torch, the routed call and every backend alone, in one process.

Per shape, timed the same way (tools/timing.py): ``torch.mm(out_dtype=fp32)``,
the routed call and one column per available backend at its best config for
the shape (from ``--tune-log``, else its first candidate); every column's
result is checked against float64 (``exactness``). Modes (any combination,
graph alone when none is named, run in the order eager, decode, region,
deterministic, graph): --graph, --deterministic, --eager, --decode-seq,
--region; what each measures: docs/benchmarks/README.md.

Writes bench*.json/.md/.png under --out-dir (rewritten after every (N, K);
SIGTERM keeps what is finished) and prints a compact summary last;
``python -m sglang_fp32gemm.tools.targets DIR`` checks them against the targets.

    python -m sglang_fp32gemm bench --tune-log tune_log.jsonl.gz --out-dir docs/benchmarks/h200
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
from typing import Any, Callable, NamedTuple, Optional

import torch

from sglang_fp32gemm import backends as backend_registry
from sglang_fp32gemm.tools import bench_report as report
from sglang_fp32gemm.tools import common, region, region_bench, timing
from sglang_fp32gemm.tools.bench_measure import Bench, set_deterministic, tables_info
from sglang_fp32gemm.tools.cli import Parser, add_capture, parse_ints, positive_int
from sglang_fp32gemm.tools.picks import Picks, table_jobs
from sglang_fp32gemm.tools.precompile import precompile
from sglang_fp32gemm.tools.progress import Progress
from sglang_fp32gemm.tools.stopping import Budget, Stop

GRAPH_M = "1-32,40-128:8"
DET_M = "1-32"
EAGER_M, EAGER_N = (1, 8, 32), (1024, 2560)
DECODE_M, DECODE_N = (1, 4, 8, 32), (1024, 2560)
FALLBACK_M = 200


class Shape(NamedTuple):
    m: int
    n: int
    k: int
    fallback: bool = False  # eager mode: the plugin's fallback path, not the routed call
    variant: str = ""       # region mode: the schedule


@dataclasses.dataclass(frozen=True)
class Mode:
    """One bench mode: its shapes, how one is measured, what is written and printed."""

    name: str        # the name in progress lines
    flag: str        # the argparse dest that turns it on
    tag: str         # <tag>.json / <tag>.md under --out-dir
    json_mode: str   # the "mode" field of the JSON file
    shapes: Callable[[Any], list[Shape]]
    prepare: Callable[[Bench, Any, int, int], Any]          # once per (N, K): the weights
    measure: Callable[[Bench, Any, Shape, Any], dict]
    line: Callable[[dict], str]
    markdown: Callable[[list[dict]], str]
    summary: Callable[[list[dict]], list[str]]
    extra: Callable[[Any], dict] = lambda args: {}
    deterministic: bool = False
    plot: bool = False
    peers_by_k: bool = False   # backend columns only where K is in --peer-k
    gemm_shapes: Optional[Callable[[Any], list[tuple[int, int, int]]]] = None  # precompile; default: shapes


def _us_line(r: dict) -> str:
    return " ".join(f"{c}={report.fmt(v)}" for c, v in r["us"].items())


def _graph_mode(name: str, flag: str, tag: str, json_mode: str, title: str, det: bool) -> Mode:
    return Mode(
        name, flag, tag, json_mode,
        shapes=lambda a: [Shape(m, n, k) for k in (a.det_k if det else a.k) for n in a.n
                          for m in (a.det_m if det else a.m)],
        prepare=lambda bench, a, n, k: bench.timer.weights(n, k, bench.device),
        measure=lambda bench, a, s, w: bench.graph_shape(s.m, s.n, s.k, w, peers=s.k in a.peer_k_set,
                                                          deterministic=det),
        line=lambda r: f"M={r['M']:<3d} N={r['N']:<5d} K={r['K']} {_us_line(r)} route={r['route']}",
        markdown=lambda rs: report.markdown_graph(rs, title),
        summary=lambda rs: report.summary_graph(rs, title),
        deterministic=det, plot=not det, peers_by_k=True)


MODES = (  # the run order: eager and decode first, so a cut-short run still has them
    Mode("eager", "eager", "bench_eager", "eager",
         shapes=lambda a: [s for n in a.eager_n for s in
                           [Shape(m, n, a.seq_k) for m in a.eager_m] + [Shape(a.fallback_m, n, a.seq_k, True)]],
         prepare=lambda bench, a, n, k: bench.timer.weights(n, k, bench.device),
         measure=lambda bench, a, s, w: bench.eager_shape(s.m, s.n, s.k, w, a.eager_calls, a.eager_runs, s.fallback),
         line=lambda r: (f"fallback M={r['M']} N={r['N']} added {r.get('added_us')} us" if r["kind"] == "fallback"
                         else f"M={r['M']} N={r['N']} {_us_line(r)}"),
         markdown=report.markdown_eager, summary=report.summary_eager,
         extra=lambda a: {"calls": a.eager_calls, "runs": a.eager_runs}),
    Mode("decode", "decode_seq", "bench_decode", "decode",
         shapes=lambda a: [Shape(m, n, a.seq_k) for n in a.decode_n for m in a.decode_m],
         prepare=lambda bench, a, n, k: timing.chain_weights(a.layers, n, k, bench.device),
         measure=lambda bench, a, s, layers: bench.decode_shape(s.m, s.n, s.k, layers, a.decode_replays),
         line=lambda r: f"M={r['M']} N={r['N']} per layer "
                        + " ".join(f"{c}={v}" for c, v in r["add_per_layer_us"].items()),
         markdown=report.markdown_decode, summary=report.summary_decode,
         extra=lambda a: {"layers": a.layers}),
    Mode("region", "region", "bench_region", "region",
         shapes=lambda a: [Shape(m, 0, region.MODELS[name].hidden, variant=sched)
                           for name in a.region_model for m in a.region_m for sched in a.region_schedule],
         prepare=lambda bench, a, n, k: region_bench.prepare(bench, _region_spec(a, k)),
         measure=lambda bench, a, s, ctx: region_bench.measure(bench, ctx, s.m, s.variant, a.region_replays,
                                                                       a.region_rounds),
         line=region_bench.line, markdown=region_bench.markdown, summary=region_bench.summary,
         extra=lambda a: {"models": {n: region_bench.spec_info(region.MODELS[n]) for n in a.region_model},
                          "replays": a.region_replays, "rounds": a.region_rounds},
         gemm_shapes=lambda a: [(m, n, k) for name in a.region_model for m in a.region_m
                                for n, k in region.fp32_shapes(region.MODELS[name])]),
    _graph_mode("det", "deterministic", "bench_det", "deterministic", "Deterministic setting", True),
    _graph_mode("graph", "graph", "bench", "graph", "Isolated calls", False),
)


def _region_spec(args, k: int) -> "region.ModelSpec":
    # region shapes carry the model's hidden size as K: the models differ in it
    return next(region.MODELS[n] for n in args.region_model if region.MODELS[n].hidden == k)


def _names(choices: tuple[str, ...], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in names if t not in choices]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad) or repr(text)} "
                                             f"(one or more of {', '.join(choices)}, comma-separated)")
        return list(dict.fromkeys(names))
    return parse


def precompile_jobs(modes: list[Mode], args, bench: Bench, picks: Picks) -> list:
    jobs = []
    for mode in modes:
        shapes = (mode.gemm_shapes(args) if mode.gemm_shapes else
                  [(s.m, s.n, s.k) for s in mode.shapes(args) if not s.fallback])
        jobs += picks.jobs([s for s in shapes if not mode.peers_by_k or s[2] in args.peer_k_set], bench.backends)
        try:  # the kernels the routed column will run; best effort
            from sglang_fp32gemm.table import device_key

            jobs += table_jobs(shapes, bench.backends, device_key(bench.device))
        except Exception as e:
            print(f"(no table precompile jobs: {type(e).__name__}: {e})", flush=True)
    return jobs


def run_modes(modes: list[Mode], bench: Bench, args, head: dict) -> list[str]:
    """Every shape of every mode, one loop; files rewritten after each (N, K); the summaries."""
    budget = Budget(None)
    progress = Progress(sum(len(m.shapes(args)) for m in modes), "bench")
    summaries: list[str] = []
    current: Optional[tuple[Mode, list[dict]]] = None

    def write(mode: Mode, results: list[dict]) -> list[str]:
        common.write_json(os.path.join(args.out_dir, f"{mode.tag}.json"),
                          {**head, "mode": mode.json_mode, **mode.extra(args), "results": results})
        common.write_text(os.path.join(args.out_dir, f"{mode.tag}.md"), mode.markdown(results))
        return mode.summary(results)

    try:
        with budget.sigterm():
            for mode in modes:
                results: list[dict] = []
                current = (mode, results)
                set_deterministic(mode.deterministic)
                for (n, k), group in itertools.groupby(mode.shapes(args), key=lambda s: (s.n, s.k)):
                    ctx = mode.prepare(bench, args, n, k)
                    for s in group:
                        r = mode.measure(bench, args, s, ctx)
                        results.append(r)
                        print(f"[{budget.elapsed():4.0f}s] {mode.name} {mode.line(r)}", flush=True)
                        progress.update(1, len(r.get("us") or r.get("step_us") or {}))
                    write(mode, results)
                    del ctx
                    if bench.device.type == "cuda":
                        torch.cuda.empty_cache()
                summaries += write(mode, results)
                if mode.plot:
                    report.plot(results, os.path.join(args.out_dir, f"{mode.tag}.png"))
                current = None
    except Stop as e:
        print(f"stopped ({e}); partial results written", flush=True)
        if current is not None:
            summaries += write(*current)
            summaries.append(f"(mode {current[0].name} incomplete)")
    finally:
        progress.close()
        set_deterministic(False)
    return summaries


def parser() -> Parser:
    ap = Parser("python -m sglang_fp32gemm bench", __doc__)
    ap.add_argument("--graph", action="store_true", help="isolated calls under CUDA graphs (the default mode)")
    ap.add_argument("--deterministic", action="store_true", help="the routed call with the deterministic setting")
    ap.add_argument("--eager", action="store_true", help="host wall time per call, no graphs; the fallback path")
    ap.add_argument("--decode-seq", action="store_true", help="61-layer decode step per graph, with/without the call")
    ap.add_argument("--region", action="store_true", help="the DSv4 decode attention-prepare region model")
    ap.add_argument("--region-model", type=_names(tuple(region.MODELS), "model"), default=["pro"],
                    help="pro (V4-Pro: 61 layers, K 7168) and/or flash (V4-Flash: 43 layers, K 4096), e.g. pro,flash")
    ap.add_argument("--region-m", type=parse_ints, default=parse_ints(region_bench.DEFAULT_M),
                    help=f"region M values, ranges allowed (default {region_bench.DEFAULT_M})")
    ap.add_argument("--region-schedule", type=_names(region.SCHEDULES, "schedule"), default=list(region.SCHEDULES),
                    help="overlapped (SGLang's side streams) and/or serial (one stream)")
    ap.add_argument("--region-replays", type=positive_int, default=20)
    ap.add_argument("--region-rounds", type=positive_int, default=3,
                    help="captures of each region step, interleaved; the median counts (default 3)")
    add_capture(ap)
    ap.add_argument("--no-peer", "--no-region-peer", dest="peer", action="store_false",
                    help="leave out vLLM's ll_bf16 column (graph and region modes) even where it is importable")
    ap.add_argument("--m", type=parse_ints, default=parse_ints(GRAPH_M),
                    help=f"graph-mode M values, ranges allowed, e.g. 1-32,40-128:8 (default {GRAPH_M})")
    ap.add_argument("--n", type=positive_int, nargs="+", default=list(common.N_DSV4))
    ap.add_argument("--k", type=positive_int, nargs="+", default=[common.K_PRO, common.K_FLASH],
                    help="graph-mode K values")
    ap.add_argument("--peer-k", type=positive_int, nargs="*", default=None,
                    help="K values that get the per-backend columns (default: every --k)")
    ap.add_argument("--det-m", type=parse_ints, default=parse_ints(DET_M))
    ap.add_argument("--det-k", type=positive_int, nargs="+", default=[common.K_PRO])
    ap.add_argument("--seq-k", type=positive_int, default=common.K_PRO, help="K of the eager and decode modes")
    ap.add_argument("--eager-m", type=parse_ints, default=list(EAGER_M))
    ap.add_argument("--eager-n", type=positive_int, nargs="+", default=list(EAGER_N))
    ap.add_argument("--eager-calls", type=positive_int, default=1000)
    ap.add_argument("--eager-runs", type=positive_int, default=7)
    ap.add_argument("--fallback-m", type=positive_int, default=FALLBACK_M)
    ap.add_argument("--decode-m", type=parse_ints, default=list(DECODE_M))
    ap.add_argument("--decode-n", type=positive_int, nargs="+", default=list(DECODE_N))
    ap.add_argument("--layers", type=positive_int, default=61)
    ap.add_argument("--replays", type=positive_int, default=15, help="graph replays per isolated-call timing")
    ap.add_argument("--decode-replays", type=positive_int, default=20)
    ap.add_argument("--tune-log", nargs="*", default=[],
                    help="tuner log(s) (.jsonl/.jsonl.gz) or tuned CSV(s): each backend column's config")
    ap.add_argument("--backends", nargs="+", default=None, help="backend columns (default: every available)")
    ap.add_argument("--workers", type=int, default=max(1, min(16, (os.cpu_count() or 1) - 1)),
                    help="processes that compile the columns' kernels first (<= 1: none)")
    ap.add_argument("--out-dir", default=".", help="where the JSON, Markdown and PNG files go")
    ap.add_argument("--versions", action="store_true", help="print the versions as JSON and exit")
    return ap


def main(argv: list[str] | None = None, backends: Optional[list] = None, device=None, timer=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    missing = [p for p in args.tune_log if not os.path.isfile(p)]
    if missing:
        ap.error(f"--tune-log: no such file: {', '.join(missing)}")
    if args.versions:
        import json

        print(json.dumps(common.versions(), indent=1))
        return 0
    device = device or torch.device("cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench needs a CUDA GPU", file=sys.stderr)
        return 2
    timer = timer or timing.CudaTimer(args.capture)
    if backends is None:
        backends = backend_registry.all_backends()
    if args.backends:
        backends = [b for b in backends if b.name in set(args.backends)]
    # The modes named on the command line, in run order; graph alone when none is.
    modes = [m for m in MODES if getattr(args, m.flag)] or [m for m in MODES if m.name == "graph"]
    args.peer_k_set = set(args.k if args.peer_k is None else args.peer_k)
    os.makedirs(args.out_dir, exist_ok=True)
    vers = common.versions()
    picks = Picks.load(args.tune_log, backends)
    set_deterministic(False)
    bench = Bench(backends, device, timer, picks, replays=args.replays, peer=args.peer)
    for name, why in bench.unavailable.items():
        print(f"backend {name}: unavailable ({why}); no column", flush=True)
    head = {"versions": vers, "argv": " ".join([os.path.basename(sys.executable), *sys.argv]), "args": list(sys.argv[1:] if argv is None else argv),
            "tables": tables_info(), "tune_log": args.tune_log, "capture": getattr(timer, "capture", None),
            "backends": [b.name for b in bench.backends], "unavailable": bench.unavailable}
    print("versions: " + ", ".join(f"{k}={v}" for k, v in vers.items() if k in
                                   ("gpu", "driver", "torch", "cuda", "triton", "cutlass_dsl", "vllm_ll", "git")), flush=True)
    if device.type == "cuda" and args.workers > 1:
        precompile(precompile_jobs(modes, args, bench, picks), args.workers)
    summaries = run_modes(modes, bench, args, head)
    print("\n".join(summaries), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
