"""Benchmark torch, the routed call and every backend alone, in one process.

Per shape, in the same run and the same way (tools/timing.py: CUDA-graph
replay of many calls rotating over >= 8 weight sets >= 4x the L2, median):
``torch.mm(out_dtype=fp32)``, the routed call
(``sglang_fp32gemm.routing.linear_bf16_fp32``: table lookup, backend) and one
column per available backend, each kernel alone through its bound function
with that backend's best config for the shape (from ``--tune-log``: the
tuner's JSON-lines log or a tuned CSV; otherwise the backend's first
candidate). Every column's result is checked on fresh random inputs against
float64 (rel. error, allclose atol 1e-2 / rtol 1e-4, output memory poisoned
with NaN first).

Modes (any combination; graph alone when none is named; they run in the
order eager, decode, deterministic, graph, in one process so kernels compile
once):
  --graph          isolated calls, M 1-32 and 40..128, N 512/1024/2048/2560, K 7168 and 4096
  --deterministic  the same with SGLANG_FLYDSL_FP32_GEMM_DETERMINISTIC=1 (M 1-32, K 7168 by
                   default); the routed result must also repeat bit for bit
  --eager          host wall time per call without graphs (--eager-calls back-to-back calls,
                   one synchronize, median of --eager-runs), M 1/8/32, N 1024/2560; and the
                   plugin's fallback path (hooks.around_linear(torch_mm, x, w) at M=200, a shape
                   without a row) against torch_mm called directly
  --decode-seq     a 61-layer decode step per CUDA graph (per layer: bf16 linear N=1536 on x,
                   the fp32 call on x, bf16 linear N=512 on x; every layer its own weights), with
                   and without the fp32 call: what the call adds per layer; M 1/4/8/32,
                   N 1024/2560; a "+pdl" variant for each backend whose bind() takes pdl=True

Writes bench.json/.md/.png, bench_det.*, bench_eager.*, bench_decode.* under
--out-dir with the versions and the exact command, and prints a compact
summary last. ``python -m sglang_fp32gemm.tools.targets DIR`` checks them
against the targets.

    python -m sglang_fp32gemm bench --tune-log tune_log.jsonl.gz --out-dir docs/benchmarks/h200
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import statistics
import sys
import time
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import table as table_mod
from sglang_fp32gemm.tools import common, timing
from sglang_fp32gemm.tools.tune import served_by

GRAPH_M = "1-32,40-128:8"
DET_M = "1-32"
EAGER_M, EAGER_N = (1, 8, 32), (1024, 2560)
DECODE_M, DECODE_N = (1, 4, 8, 32), (1024, 2560)
FALLBACK_M = 200
SEQ_N1, SEQ_N2 = 1536, 512
DET_VAR = "SGLANG_FLYDSL_FP32_GEMM_DETERMINISTIC"
ENABLE_VAR = "SGLANG_ENABLE_FLYDSL_FP32_GEMM"


class Stop(Exception):
    pass


# -- which config each backend column runs ---------------------------------------
class Picks:
    """The best kernel per (backend, tuned M, N, K), from a tune log or tuned CSVs."""

    def __init__(self, best: Optional[dict[tuple[str, int, int, int], str]] = None, sources: tuple = ()):
        self.best = dict(best or {})
        self.sources = list(sources)

    @classmethod
    def load(cls, paths: list[str], backends: list) -> "Picks":
        best: dict[tuple[str, int, int, int], str] = {}
        for path in paths:
            if path.endswith(".csv"):
                rows = table_mod.parse_csv(open(path).read(), path)
                for r in rows:
                    for b in backends:
                        if b.libtype != r.libtype:
                            continue
                        try:
                            b.parse(r.kernelName)
                        except Exception:
                            continue
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
        return cls(best, tuple(paths))

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


# -- the bench ---------------------------------------------------------------------
class Bench:
    def __init__(self, backends: list, device, timer, picks: Picks, replays: int = 15):
        self.device = device
        self.timer = timer
        self.picks = picks
        self.replays = replays
        self.binds = common.BindCache()
        self.torch_fn = timing.torch_mm if device.type == "cuda" else _cpu_mm
        self.backends = []
        self.unavailable = {}
        for b in backends:
            ok, why = common.available(b)
            if ok:
                self.backends.append(b)
            else:
                self.unavailable[b.name] = why

    # the functions compared
    @staticmethod
    def routed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        from sglang_fp32gemm import routing

        return routing.linear_bf16_fp32(x, w)

    def columns(self, m: int, n: int, k: int, pdl: bool = False) -> tuple[list[tuple[str, Callable, str, str]], dict]:
        """[(name, fn, kernel, source)] for every available backend that takes the shape, and {name: why not}."""
        cols, notes = [], {}
        for b in self.backends:
            cfg, kernel, source = self.picks.choose(b, m, n, k)
            name = f"{b.name}+pdl" if pdl else b.name
            if cfg is None:
                notes[name] = source
                continue
            bind_pdl = pdl
            if pdl:
                if dataclasses.is_dataclass(cfg) and "pdl" in {f.name for f in dataclasses.fields(cfg)}:
                    # The config names PDL itself (cutedsl: the _pdl kernelName).
                    cfg = dataclasses.replace(cfg, pdl=True)
                    kernel, bind_pdl = b.kernel_name(cfg), False
                elif not common.bind_takes_pdl(b):
                    notes[name] = "no PDL variant (neither its config nor bind() takes pdl)"
                    continue
            try:
                fn = self.binds.get(b, cfg, kernel, self.device, n, k, pdl=bind_pdl)
            except Exception as e:
                notes[name] = f"bind() raised {type(e).__name__}: {str(e)[:200]}"
                continue
            cols.append((name, fn, kernel, source))
        return cols, notes

    def _time(self, fn, x, weights, notes: dict, name: str) -> Optional[float]:
        try:
            return round(self.timer.per_call(fn, x, weights, replays=self.replays), 3)
        except Stop:
            raise
        except Exception as e:
            notes[name] = f"timing raised {type(e).__name__}: {str(e)[:200]}"
            return None

    def _precision(self, fns: dict[str, Callable], m, n, k, rec: dict, repeat_for: tuple = ()) -> None:
        for name, fn in fns.items():
            try:
                err = common.check_fn(fn, m, n, k, self.device, repeat=2 if name in repeat_for else 0)
            except Stop:
                raise
            except Exception as e:
                rec["note"][name] = f"check raised {type(e).__name__}: {str(e)[:200]}"
                rec["rel_err"][name], rec["allclose"][name] = None, False
                continue
            rec["rel_err"][name] = err["rel_err"]
            rec["allclose"][name] = bool(err["allclose"] and err["finite"])
            if "repeatable" in err:
                rec.setdefault("repeatable", {})[name] = err["repeatable"]
            if err.get("error"):
                rec["note"][name] = err["error"]

    def graph_shape(self, m: int, n: int, k: int, weights, peers: bool, deterministic: bool) -> dict:
        x = common.randn_bf16(m, k, device=self.device)
        rec: dict[str, Any] = {"M": m, "N": n, "K": k, "us": {}, "rel_err": {}, "allclose": {}, "kernel": {},
                               "source": {}, "note": {}, "floor_us": round(timing.floor_us(m, n, k), 3)}
        rec["us"]["torch"] = self._time(self.torch_fn, x, weights, rec["note"], "torch")
        try:
            rec["route"] = common.route_of(x, weights[0])
        except Exception as e:
            rec["route"] = f"? ({type(e).__name__}: {e})"
        rec["us"]["routed"] = self._time(self.routed, x, weights, rec["note"], "routed")
        fns = {"torch": self.torch_fn, "routed": self.routed}
        if peers:
            cols, notes = self.columns(m, n, k)
            rec["note"].update(notes)
            for name, fn, kernel, source in cols:
                rec["us"][name] = self._time(fn, x, weights, rec["note"], name)
                rec["kernel"][name], rec["source"][name] = kernel, source
                fns[name] = fn
        self._precision(fns, m, n, k, rec, repeat_for=("routed",) if deterministic else ())
        return rec

    def eager_shape(self, m: int, n: int, k: int, weights, calls: int, runs: int, fallback: bool) -> dict:
        from sglang_fp32gemm import hooks

        torch_fn = self.torch_fn
        x = common.randn_bf16(m, k, device=self.device)
        if fallback:
            fns = {"direct": torch_fn, "fallback": lambda a, b: hooks.around_linear(torch_fn, a, b)}
        else:
            fns = {"torch": torch_fn, "routed": self.routed,
                   "hooked": lambda a, b: hooks.around_linear(torch_fn, a, b)}
        rec: dict[str, Any] = {"M": m, "N": n, "K": k, "kind": "fallback" if fallback else "routed", "us": {},
                               "enqueue_us": {}, "rel_err": {}, "allclose": {}, "kernel": {}, "note": {}}
        try:
            rec["route"] = common.route_of(x, weights[0])
        except Exception as e:
            rec["route"] = f"? ({type(e).__name__}: {e})"
        if not fallback:
            cols, notes = self.columns(m, n, k)
            rec["note"].update(notes)
            for name, fn, kernel, _source in cols:
                fns[name] = fn
                rec["kernel"][name] = kernel
        for name, fn in list(fns.items()):  # warm-up: compiles, binds, allocator
            try:
                for i in range(20):
                    fn(x, weights[i % len(weights)])
            except Exception as e:
                rec["note"][name] = f"raised {type(e).__name__}: {str(e)[:200]}"
                del fns[name]
        walls: dict[str, list[float]] = {k_: [] for k_ in fns}
        enq: dict[str, list[float]] = {k_: [] for k_ in fns}
        for _ in range(runs):  # interleaved, so drift hits every variant alike
            for name, fn in fns.items():
                wall, e = self.timer.eager(fn, x, weights, calls)
                walls[name].append(wall)
                enq[name].append(e)
        for name in fns:
            rec["us"][name] = round(statistics.median(walls[name]), 3)
            rec["enqueue_us"][name] = round(statistics.median(enq[name]), 3)
        if fallback and "fallback" in fns and "direct" in fns:
            rec["added_us"] = round(rec["us"]["fallback"] - rec["us"]["direct"], 3)
            rec["added_enqueue_us"] = round(rec["enqueue_us"]["fallback"] - rec["enqueue_us"]["direct"], 3)
        self._precision(fns, m, n, k, rec)
        return rec

    def decode_shape(self, m: int, n: int, k: int, layers: dict, replays: int) -> dict:
        import torch.nn.functional as F

        w1, wf, w2 = layers["w1"], layers["wf"], layers["w2"]
        L = len(wf)
        x = common.randn_bf16(m, k, device=self.device)
        rec: dict[str, Any] = {"M": m, "N": n, "K": k, "layers": L, "step_us": {}, "add_per_layer_us": {},
                               "rel_err": {}, "allclose": {}, "kernel": {}, "note": {}}

        def base():
            for i in range(L):
                F.linear(x, w1[i])
                F.linear(x, w2[i])
            return []

        def with_call(fn):
            def step():
                outs = []
                for i in range(L):
                    F.linear(x, w1[i])
                    outs.append(fn(x, wf[i]))
                    F.linear(x, w2[i])
                return outs
            return step

        variants: dict[str, Callable] = {"torch": self.torch_fn, "routed": self.routed}
        for pdl in (False, True):
            cols, notes = self.columns(m, n, k, pdl=pdl)
            rec["note"].update(notes)
            for name, fn, kernel, _source in cols:
                variants[name] = fn
                rec["kernel"][name] = kernel
        try:
            rec["route"] = common.route_of(x, wf[0])
        except Exception as e:
            rec["route"] = f"? ({type(e).__name__}: {e})"
        b0, _ = self.timer.step(base, replays)
        xd = x.double()
        for name, fn in variants.items():
            try:
                t, outs = self.timer.step(with_call(fn), replays)
            except Stop:
                raise
            except Exception as e:
                rec["note"][name] = f"raised {type(e).__name__}: {str(e)[:200]}"
                continue
            rec["step_us"][name] = round(t, 2)
            worst, close = 0.0, True
            for i, o in enumerate(outs):
                err = common.measure_error(o, xd @ wf[i].double().t())
                worst = max(worst, err["rel_err"])
                close = close and err["allclose"] and err["finite"]
            rec["rel_err"][name], rec["allclose"][name] = worst, close
        b1, _ = self.timer.step(base, replays)
        rec["base_step_us"] = [round(b0, 2), round(b1, 2)]
        base_us = (b0 + b1) / 2
        for name, t in rec["step_us"].items():
            rec["add_per_layer_us"][name] = round((t - base_us) / L, 3)
        return rec


def _cpu_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    from sglang_fp32gemm.backends import torch_ref

    return torch_ref.mm_fp32(x, w)


# -- settings ------------------------------------------------------------------------
def set_deterministic(on: bool) -> None:
    from sglang_fp32gemm import routing, settings

    os.environ[ENABLE_VAR] = "1"
    os.environ[DET_VAR] = "1" if on else "0"
    settings.reload()
    routing.reset_router()


def tables_info() -> list[dict]:
    out = []
    try:
        for name, text in table_mod.packaged_tables():
            rows = [line for line in text.splitlines()[1:] if line.strip() and not line.startswith("#")]
            out.append({"file": name, "rows": len(rows)})
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"})
    return out


def table_jobs(shapes: list[tuple[int, int, int]], backends: list) -> list[tuple[str, str, int, int, int]]:
    """Precompile jobs for the kernels the packaged tables would route these shapes to (best effort)."""
    jobs = []
    try:
        from sglang_fp32gemm.table import device_key

        key = device_key(torch.device("cuda"))
        for name, text in table_mod.packaged_tables():
            rows = [r for r in table_mod.parse_csv(text, name) if r.gfx == key.gfx and r.cu_num == key.cu_num]
            by = {(r.M, r.N, r.K): r for r in rows}
            for m, n, k in shapes:
                r = served_by(m, {mm for (mm, nn, kk) in by if nn == n and kk == k})
                if r is None:
                    continue
                row = by[(r, n, k)]
                for b in backends:
                    if b.libtype == row.libtype:
                        try:
                            b.parse(row.kernelName)
                        except Exception:
                            continue
                        jobs.append((b.name, row.kernelName, m, n, k))
    except Exception as e:
        print(f"(no table precompile jobs: {type(e).__name__}: {e})", flush=True)
    return jobs


# -- reports ---------------------------------------------------------------------------
def _fmt(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def col_names(results: list[dict], fixed=("torch", "routed")) -> list[str]:
    names = list(fixed)
    for r in results:
        for c in r.get("us", {}):
            if c not in names:
                names.append(c)
    return names


def markdown_graph(results: list[dict], title: str) -> str:
    cols = col_names(results)
    lines = [f"# {title}", "", "us per call (CUDA-graph replay, weights rotated past the L2, median); "
             "rel. error is the routed result's vs float64.", "",
             "| M | N | K | route | " + " | ".join(cols) + " | routed/torch | routed rel. err |",
             "|" + "---|" * (len(cols) + 6)]
    for r in results:
        us = r["us"]
        ratio = us["routed"] / us["torch"] if us.get("routed") and us.get("torch") else None
        rel = r["rel_err"].get("routed")
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r.get('route', '?')} | "
                     + " | ".join(_fmt(us.get(c)) for c in cols)
                     + f" | {_fmt(ratio, 3)} | {'-' if rel is None else f'{rel:.1e}'} |")
    kernels = {}
    for r in results:
        for c, kname in r.get("kernel", {}).items():
            kernels.setdefault(c, set()).add(f"{kname} ({r['source'].get(c, '')})" if r.get("source") else kname)
    if kernels:
        lines += ["", "Backend columns ran these kernels:", ""]
        for c, ks in kernels.items():
            lines.append(f"- {c}: {len(ks)} distinct: " + ", ".join(sorted(ks)[:6]) + (" ..." if len(ks) > 6 else ""))
    return "\n".join(lines) + "\n"


def markdown_eager(results: list[dict]) -> str:
    cols = col_names([r for r in results if r.get("kind") != "fallback"], ("torch", "routed", "hooked"))
    lines = ["# Eager: host wall time per call (us), no graphs", "",
             "| M | N | K | route | " + " | ".join(cols) + " | routed/torch |", "|" + "---|" * (len(cols) + 5)]
    for r in results:
        if r.get("kind") == "fallback":
            continue
        us = r["us"]
        ratio = us["routed"] / us["torch"] if us.get("routed") and us.get("torch") else None
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r.get('route', '?')} | "
                     + " | ".join(_fmt(us.get(c)) for c in cols) + f" | {_fmt(ratio, 3)} |")
    lines += ["", "Fallback path (no row): hooks.around_linear(torch_mm, x, w) vs torch_mm(x, w)", "",
              "| M | N | K | direct | fallback | added (wall) | added (host enqueue) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("kind") == "fallback":
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {_fmt(r['us'].get('direct'))} | "
                         f"{_fmt(r['us'].get('fallback'))} | {_fmt(r.get('added_us'))} | "
                         f"{_fmt(r.get('added_enqueue_us'))} |")
    return "\n".join(lines) + "\n"


def markdown_decode(results: list[dict]) -> str:
    cols = col_names([{"us": r["add_per_layer_us"]} for r in results])
    lines = ["# Decode sequence: what the fp32 call adds per layer (us)", "",
             "Per layer: bf16 linear N=1536, the fp32 call, bf16 linear N=512, all on x[M, K]; every layer its "
             "own weights; one CUDA graph per step; (step with the call - step without) / layers.", "",
             "| M | N | K | base step us | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 4)]
    for r in results:
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {'/'.join(_fmt(b) for b in r['base_step_us'])} | "
                     + " | ".join(_fmt(r["add_per_layer_us"].get(c), 3) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    groups = sorted({(r["K"], r["N"]) for r in results})
    if not groups:
        return False
    cols = col_names(results)
    fig, axes = plt.subplots(1, len(groups), figsize=(4.0 * len(groups), 3.6), squeeze=False)
    for ax, (k, n) in zip(axes[0], groups):
        rs = [r for r in results if r["N"] == n and r["K"] == k]
        for c in cols:
            pts = [(r["M"], r["us"][c]) for r in rs if r["us"].get(c) is not None]
            if pts:
                ax.plot(*zip(*pts), label=c, marker="." if len(pts) < 40 else None)
        ax.set_title(f"N={n} K={k}")
        ax.set_xlabel("M")
        ax.set_ylabel("us per call")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def summary_graph(results: list[dict], title: str) -> list[str]:
    out = [f"== {title}: torch / routed / best backend alone (us)"]
    show = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128}
    for k in sorted({r["K"] for r in results}, reverse=True):
        ns = sorted({r["N"] for r in results if r["K"] == k})
        out.append(f"K={k:<5d}M | " + " | ".join(f"N={n:<4d}  torch routed   best of backends" for n in ns))
        for m in sorted({r["M"] for r in results if r["K"] == k and r["M"] in show}):
            cells = []
            for n in ns:
                r = next((r for r in results if (r["M"], r["N"], r["K"]) == (m, n, k)), None)
                if r is None:
                    cells.append(" " * 25)
                    continue
                peers = {c: v for c, v in r["us"].items() if c not in ("torch", "routed") and v is not None}
                best = min(peers.items(), key=lambda kv: kv[1]) if peers else None
                cells.append(f"{_fmt(r['us'].get('torch')):>6s} {_fmt(r['us'].get('routed')):>6s} "
                             + (f"{best[1]:6.2f} {best[0][:10]:<10s}" if best else f"{'-':>6s} {'':10s}"))
            out.append(f"    {m:5d} | " + " | ".join(cells))
    ratios = [(r["us"]["routed"] / r["us"]["torch"], r) for r in results
              if r["us"].get("routed") and r["us"].get("torch")]
    if ratios:
        worst = max(ratios, key=lambda t: t[0])
        out.append(f"routed/torch: worst {worst[0]:.3f} at M={worst[1]['M']} N={worst[1]['N']} K={worst[1]['K']}"
                   f" ({worst[1].get('route')}); {sum(1 for q, _ in ratios if q > 1.01)} of {len(ratios)} over 1.01")
    out.append(precision_line(results))
    return out


def precision_line(results: list[dict]) -> str:
    bad = []
    for r in results:
        for c, e in r.get("rel_err", {}).items():
            if e is None or e > common.REL_TOL or not r["allclose"].get(c, False):
                bad.append(f"{c}@M={r['M']},N={r['N']},K={r['K']}:{e}")
        for c, same in r.get("repeatable", {}).items():
            if not same:
                bad.append(f"{c}@M={r['M']},N={r['N']},K={r['K']}: not bitwise repeatable")
    n = sum(len(r.get("rel_err", {})) for r in results)
    return f"precision: {n - len(bad)}/{n} results exact" + (f"; FAILED: {', '.join(bad[:8])}" if bad else "")


def summary_eager(results: list[dict]) -> list[str]:
    out = ["== eager wall us per call: torch / routed / hooked / backends; fallback path added"]
    for r in results:
        us = r["us"]
        if r.get("kind") == "fallback":
            out.append(f"  fallback M={r['M']} N={r['N']}: direct {_fmt(us.get('direct'))} plugin "
                       f"{_fmt(us.get('fallback'))} added {_fmt(r.get('added_us'))} (host enqueue "
                       f"{_fmt(r.get('added_enqueue_us'))})")
        else:
            rest = " ".join(f"{c} {_fmt(v)}" for c, v in us.items() if c not in ("torch", "routed", "hooked"))
            ratio = us["routed"] / us["torch"] if us.get("routed") and us.get("torch") else float("nan")
            out.append(f"  M={r['M']:<3d} N={r['N']:<5d} torch {_fmt(us.get('torch'))} routed {_fmt(us.get('routed'))}"
                       f" ({ratio:.3f}x) hooked {_fmt(us.get('hooked'))} {rest}")
    out.append(precision_line(results))
    return out


def summary_decode(results: list[dict]) -> list[str]:
    out = ["== decode sequence: us the call adds per layer"]
    for r in results:
        adds = " ".join(f"{c} {v:.2f}" for c, v in r["add_per_layer_us"].items())
        out.append(f"  M={r['M']:<3d} N={r['N']:<5d} base {'/'.join(_fmt(b) for b in r['base_step_us'])} | {adds}")
    notes = {c: v for r in results for c, v in r["note"].items() if "pdl" in c}
    for c, v in notes.items():
        out.append(f"  {c}: skipped, {v}")
    out.append(precision_line(results))
    return out


# -- driver ---------------------------------------------------------------------------------
def _stop(_sig, _frame):
    raise Stop()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sglang_fp32gemm bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", action="store_true", help="isolated calls under CUDA graphs (the default mode)")
    ap.add_argument("--deterministic", action="store_true", help="the routed call with the deterministic setting")
    ap.add_argument("--eager", action="store_true", help="host wall time per call, no graphs; the fallback path")
    ap.add_argument("--decode-seq", action="store_true", help="61-layer decode step per graph, with/without the call")
    ap.add_argument("--m", type=common.parse_ints, default=common.parse_ints(GRAPH_M),
                    help=f"graph-mode M values, ranges allowed, e.g. 1-32,40-128:8 (default {GRAPH_M})")
    ap.add_argument("--n", type=int, nargs="+", default=list(common.N_DSV4))
    ap.add_argument("--k", type=int, nargs="+", default=[common.K_PRO, common.K_FLASH], help="graph-mode K values")
    ap.add_argument("--peer-k", type=int, nargs="*", default=None,
                    help="K values that get the per-backend columns (default: every --k)")
    ap.add_argument("--det-m", type=common.parse_ints, default=common.parse_ints(DET_M))
    ap.add_argument("--det-k", type=int, nargs="+", default=[common.K_PRO])
    ap.add_argument("--seq-k", type=int, default=common.K_PRO, help="K of the eager and decode modes")
    ap.add_argument("--eager-m", type=common.parse_ints, default=list(EAGER_M))
    ap.add_argument("--eager-n", type=int, nargs="+", default=list(EAGER_N))
    ap.add_argument("--eager-calls", type=int, default=1000)
    ap.add_argument("--eager-runs", type=int, default=7)
    ap.add_argument("--fallback-m", type=int, default=FALLBACK_M)
    ap.add_argument("--decode-m", type=common.parse_ints, default=list(DECODE_M))
    ap.add_argument("--decode-n", type=int, nargs="+", default=list(DECODE_N))
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--replays", type=int, default=15, help="graph replays per isolated-call timing")
    ap.add_argument("--decode-replays", type=int, default=20)
    ap.add_argument("--tune-log", nargs="*", default=[],
                    help="tuner log(s) (.jsonl/.jsonl.gz) or tuned CSV(s): each backend column's config")
    ap.add_argument("--backends", nargs="+", default=None, help="backend columns (default: every available)")
    ap.add_argument("--workers", type=int, default=max(1, min(16, (os.cpu_count() or 1) - 1)),
                    help="processes that compile the columns' kernels first (<= 1: none)")
    ap.add_argument("--out-dir", default=".", help="where the JSON, Markdown and PNG files go")
    ap.add_argument("--versions", action="store_true", help="print the versions as JSON and exit")
    return ap


def main(argv: list[str] | None = None, backends: Optional[list] = None, device=None, timer=None) -> int:
    args = parser().parse_args(argv)
    if args.versions:
        import json

        print(json.dumps(common.versions(), indent=1))
        return 0
    device = device or torch.device("cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench needs a CUDA GPU", file=sys.stderr)
        return 2
    timer = timer or timing.CudaTimer()
    if backends is None:
        backends = common.all_backends()
    if args.backends:
        backends = [b for b in backends if b.name in set(args.backends)]
    modes = [m for m, on in (("eager", args.eager), ("decode", args.decode_seq), ("det", args.deterministic),
                             ("graph", args.graph)) if on] or ["graph"]
    peer_k = set(args.k if args.peer_k is None else args.peer_k)
    os.makedirs(args.out_dir, exist_ok=True)
    vers = common.versions()
    picks = Picks.load(args.tune_log, backends)
    set_deterministic(False)
    bench = Bench(backends, device, timer, picks, replays=args.replays)
    for name, why in bench.unavailable.items():
        print(f"backend {name}: unavailable ({why}); no column", flush=True)
    head = {"versions": vers, "argv": common.argv_line(), "args": list(sys.argv[1:] if argv is None else argv),
            "tables": tables_info(), "tune_log": args.tune_log,
            "backends": [b.name for b in bench.backends], "unavailable": bench.unavailable}
    print("versions: " + ", ".join(f"{k}={v}" for k, v in vers.items() if k in
                                   ("gpu", "driver", "torch", "cuda", "triton", "cutlass_dsl", "git")), flush=True)

    shapes_by_mode = {
        "graph": [(m, n, k) for k in args.k for n in args.n for m in args.m],
        "det": [(m, n, k) for k in args.det_k for n in args.n for m in args.det_m],
        "eager": [(m, n, args.seq_k) for n in args.eager_n for m in args.eager_m],
        "decode": [(m, n, args.seq_k) for n in args.decode_n for m in args.decode_m],
    }
    if device.type == "cuda" and args.workers > 1:
        from sglang_fp32gemm.tools.tune import precompile

        jobs = []
        for mode in modes:
            for m, n, k in shapes_by_mode[mode]:
                if mode in ("graph", "det") and k not in peer_k:
                    continue
                for b in bench.backends:
                    cfg, kernel, _ = picks.choose(b, m, n, k)
                    if cfg is not None:
                        jobs.append((b.name, kernel, m, n, k))
            jobs += table_jobs(shapes_by_mode[mode], bench.backends)
        precompile(jobs, args.workers)

    summaries: list[str] = []
    old = signal.signal(signal.SIGTERM, _stop) if device.type == "cuda" else None
    t0 = time.monotonic()
    current: tuple[str, list, Callable] | None = None
    try:
        for mode in modes:
            results: list[dict] = []
            if mode in ("graph", "det"):
                det = mode == "det"
                tag = "bench_det" if det else "bench"
                title = "Deterministic setting" if det else "Isolated calls"
                set_deterministic(det)

                def flush(results=results, tag=tag, title=title, det=det):
                    common.write_json(os.path.join(args.out_dir, f"{tag}.json"),
                                      {**head, "mode": "deterministic" if det else "graph", "results": results})
                    with open(os.path.join(args.out_dir, f"{tag}.md"), "w") as f:
                        f.write(markdown_graph(results, title))
                    return summary_graph(results, title)

                current = (mode, results, flush)
                ks = args.det_k if det else args.k
                ms = args.det_m if det else args.m
                for k in ks:
                    for n in args.n:
                        weights = timer.weights(n, k, device)
                        for m in ms:
                            r = bench.graph_shape(m, n, k, weights, peers=k in peer_k, deterministic=det)
                            results.append(r)
                            print(f"[{time.monotonic() - t0:4.0f}s] {mode} M={m:<3d} N={n:<5d} K={k} "
                                  + " ".join(f"{c}={_fmt(v)}" for c, v in r["us"].items()) + f" route={r['route']}",
                                  flush=True)
                        flush()
                        del weights
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                summaries += flush()
                if not det:
                    plot(results, os.path.join(args.out_dir, "bench.png"))
                set_deterministic(False)
            elif mode == "eager":
                def flush(results=results):
                    common.write_json(os.path.join(args.out_dir, "bench_eager.json"),
                                      {**head, "mode": "eager", "calls": args.eager_calls, "runs": args.eager_runs,
                                       "results": results})
                    with open(os.path.join(args.out_dir, "bench_eager.md"), "w") as f:
                        f.write(markdown_eager(results))
                    return summary_eager(results)

                current = (mode, results, flush)
                k = args.seq_k
                for n in args.eager_n:
                    weights = timer.weights(n, k, device)
                    for m in args.eager_m:
                        results.append(bench.eager_shape(m, n, k, weights, args.eager_calls, args.eager_runs, False))
                        print(f"[{time.monotonic() - t0:4.0f}s] eager M={m} N={n} "
                              + " ".join(f"{c}={_fmt(v)}" for c, v in results[-1]["us"].items()), flush=True)
                    results.append(bench.eager_shape(args.fallback_m, n, k, weights, args.eager_calls,
                                                     args.eager_runs, True))
                    print(f"[{time.monotonic() - t0:4.0f}s] eager fallback M={args.fallback_m} N={n} "
                          f"added {results[-1].get('added_us')} us", flush=True)
                summaries += flush()
            elif mode == "decode":
                def flush(results=results):
                    common.write_json(os.path.join(args.out_dir, "bench_decode.json"),
                                      {**head, "mode": "decode", "layers": args.layers, "results": results})
                    with open(os.path.join(args.out_dir, "bench_decode.md"), "w") as f:
                        f.write(markdown_decode(results))
                    return summary_decode(results)

                current = (mode, results, flush)
                k = args.seq_k
                for n in args.decode_n:
                    layers = {"w1": [common.randn_bf16(SEQ_N1, k, device=device) for _ in range(args.layers)],
                              "wf": [common.randn_bf16(n, k, device=device) for _ in range(args.layers)],
                              "w2": [common.randn_bf16(SEQ_N2, k, device=device) for _ in range(args.layers)]}
                    for m in args.decode_m:
                        results.append(bench.decode_shape(m, n, k, layers, args.decode_replays))
                        print(f"[{time.monotonic() - t0:4.0f}s] decode M={m} N={n} per layer "
                              + " ".join(f"{c}={v}" for c, v in results[-1]["add_per_layer_us"].items()), flush=True)
                    del layers
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                summaries += flush()
            current = None
    except Stop:
        print(f"stopped by SIGTERM after {time.monotonic() - t0:.0f}s; partial results written", flush=True)
        if current is not None:
            summaries += current[2]()
            summaries.append(f"(mode {current[0]} incomplete)")
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        set_deterministic(False)
    print("\n".join(summaries), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
