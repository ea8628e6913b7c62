"""Check bench results against the targets of issues 8, 9 and 15; PASS/FAIL with the numbers.

Reads the JSON files ``bench`` writes (bench.json, bench_det.json,
bench_eager.json, bench_decode.json, bench_region.json; and fuzz.json if present) from the
folders or files given. A target is PASS only if every shape it names was
measured and met it; FAIL lists the worst misses with their numbers; NODATA
says what was not measured. Exit status 0 only when every target passed.

    python -m sglang_fp32gemm.tools.targets OUT_DIR [--noise 0.01]
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Callable, Iterable, Optional

from sglang_fp32gemm.exactness import REL_TOL
from sglang_fp32gemm.tools.cli import Parser
from sglang_fp32gemm.tools.common import K_FLASH, K_PRO, N_DSV4, write_json

PEERS = ("cutedsl", "triton")
NS = N_DSV4


@dataclasses.dataclass
class Verdict:
    name: str
    status: str               # PASS, FAIL or NODATA
    detail: str
    misses: list[str] = dataclasses.field(default_factory=list)

    def lines(self, limit: int = 6) -> list[str]:
        out = [f"{self.status:<6s} {self.name}: {self.detail}"]
        out += [f"         {m}" for m in self.misses[:limit]]
        if len(self.misses) > limit:
            out.append(f"         ... {len(self.misses) - limit} more")
        return out


def _verdict(name: str, checked: int, misses: list[tuple[float, str]], missing: list[str], what: str) -> Verdict:
    misses.sort(key=lambda t: -t[0])
    if misses:
        return Verdict(name, "FAIL", f"{len(misses)} of {checked} {what} miss"
                       + (f"; {len(missing)} not measured" if missing else ""), [m for _, m in misses])
    if missing or not checked:
        return Verdict(name, "NODATA", f"{checked} {what} met, {len(missing)} not measured", missing)
    return Verdict(name, "PASS", f"all {checked} {what} met")


def _index(results: Iterable[dict]) -> dict[tuple[int, int, int], dict]:
    return {(r["M"], r["N"], r["K"]): r for r in results if "M" in r}


def _measured_ms(idx: dict[tuple[int, int, int], dict], k: int, max_m: int) -> list[int]:
    """The M values measured at ``k``, up to ``max_m``."""
    return sorted({m for (m, _, kk) in idx if kk == k and m <= max_m})


def _us(r: Optional[dict], col: str, field: str = "us") -> Optional[float]:
    if r is None:
        return None
    v = r.get(field, {}).get(col)
    return float(v) if isinstance(v, (int, float)) else None


def _routed_vs_fastest(idx: dict[tuple[int, int, int], dict], factor: float, peers: tuple[str, ...],
                       ms: Iterable[int], k: int) -> tuple[int, list[tuple[float, str]], list[str]]:
    """(checked, misses, missing): routed <= factor x the fastest of the ``peers`` columns, every N, at ``ms``."""
    checked, misses, missing = 0, [], []
    for n in NS:
        for m in ms:
            r = idx.get((m, n, k))
            routed = _us(r, "routed")
            times = {p: _us(r, p) for p in peers}
            absent = [p for p, v in times.items() if v is None]
            if routed is None or absent:
                missing.append(f"M={m} N={n}: " + ("no routed time" if routed is None else f"no {', '.join(absent)} column"))
                continue
            checked += 1
            best_p, best = min(times.items(), key=lambda kv: kv[1])  # type: ignore[arg-type,return-value]
            if routed > factor * best:
                misses.append((routed / best, f"M={m} N={n}: routed {routed:.2f} us > {factor} x {best_p} "
                                              f"{best:.2f} = {factor * best:.2f} ({routed / best:.3f}x; "
                                              f"route {r.get('route')})"))  # type: ignore[union-attr]
    return checked, misses, missing


def routed_vs_peers(graph: list[dict], factor: float = 0.95) -> Verdict:
    checked, misses, missing = _routed_vs_fastest(_index(graph), factor, PEERS, range(1, 33), K_PRO)
    return _verdict(f"routed <= {factor}x min({', '.join(PEERS)} alone), M 1..32, every N, K={K_PRO}",
                    checked, misses, missing, "shapes")


def routed_vs_best(graph: list[dict], factor: float = 1.02, peers: tuple[str, ...] = ("torch", "cutedsl", "vllm_ll"),
                   k: int = K_PRO) -> Verdict:
    """Issue 15: routed <= factor x the fastest of torch, SGLang's CuTe-DSL kernel and vLLM's ll_bf16 (its best
    config), at every measured M in 1..32 and every N, all columns timed in the same run."""
    idx = _index(graph)
    ms = _measured_ms(idx, k, 32)
    checked, misses, missing = _routed_vs_fastest(idx, factor, peers, ms, k)
    return _verdict(f"isolated: routed <= {factor}x min({', '.join(peers)}), measured M in 1..32 "
                    f"({','.join(map(str, ms)) or 'none'}), every N, K={k}", checked, misses,
                    missing if ms else [f"K={k}: no shapes measured"], "shapes")


def routed_absolute(graph: list[dict], n: int, max_m: int, limit: float) -> Verdict:
    idx = _index(graph)
    checked, misses, missing = 0, [], []
    for m in range(1, max_m + 1):
        routed = _us(idx.get((m, n, K_PRO)), "routed")
        if routed is None:
            missing.append(f"M={m} N={n}: not measured")
            continue
        checked += 1
        if routed > limit:
            misses.append((routed, f"M={m} N={n}: routed {routed:.2f} us > {limit}"))
    return _verdict(f"routed <= {limit} us at N={n}, M 1..{max_m}, K={K_PRO}", checked, misses, missing, "shapes")


def never_slower_than_torch(graph: list[dict], noise: float = 0.01) -> Verdict:
    idx = _index(graph)
    checked, misses, missing = 0, [], []
    for k in (K_PRO, K_FLASH):
        ms = _measured_ms(idx, k, 128)
        if not ms:
            missing.append(f"K={k}: no shapes measured")
            continue
        for n in NS:
            for m in ms:
                r = idx.get((m, n, k))
                routed, torch_us = _us(r, "routed"), _us(r, "torch")
                if routed is None or torch_us is None:
                    missing.append(f"M={m} N={n} K={k}: not measured")
                    continue
                checked += 1
                if routed > (1 + noise) * torch_us:
                    misses.append((routed / torch_us, f"M={m} N={n} K={k}: routed {routed:.2f} > torch "
                                                      f"{torch_us:.2f} ({routed / torch_us:.3f}x; route "
                                                      f"{r.get('route')})"))
    ms_note = sorted({m for (m, n, k) in idx if m <= 128})
    span = f"M {ms_note[0]}..{ms_note[-1]} ({len(ms_note)} values)" if ms_note else "no M"
    return _verdict(f"routed never slower than torch (+{noise:.0%} noise), {span}, K {K_PRO} and {K_FLASH}",
                    checked, misses, missing, "shapes")


def deterministic_vs_cutedsl(det: list[dict], noise: float = 0.01) -> Verdict:
    checked, misses, missing = 0, [], []
    rows = [r for r in det if r["M"] <= 32]
    for n in NS:
        for m in range(1, 33):
            r = next((r for r in rows if r["M"] == m and r["N"] == n and r["K"] == K_PRO), None)
            routed, cute = _us(r, "routed"), _us(r, "cutedsl")
            if routed is None or cute is None:
                missing.append(f"M={m} N={n}: " + ("not measured" if r is None else "no routed or cutedsl time"))
                continue
            checked += 1
            if routed > (1 + noise) * cute:
                misses.append((routed / cute, f"M={m} N={n}: deterministic routed {routed:.2f} > cutedsl "
                                              f"{cute:.2f} ({routed / cute:.3f}x; route {r.get('route')})"))
            if r.get("repeatable", {}).get("routed") is False:
                misses.append((float("inf"), f"M={m} N={n}: deterministic routed result not bitwise repeatable"))
    return _verdict(f"deterministic routed <= cutedsl alone (+{noise:.0%} noise: the same kernel timed twice), "
                    f"M 1..32, every N, K={K_PRO}", checked, misses, missing, "shapes")


def decode_add(decode: list[dict], n: int = 1024, m: int = 4, limit: float = 5.5) -> Verdict:
    r = next((r for r in decode if r["M"] == m and r["N"] == n and r["K"] == K_PRO), None)
    name = f"decode sequence N={n} M={m}: the routed call adds <= {limit} us per layer"
    if r is None or "routed" not in r.get("add_per_layer_us", {}):
        return Verdict(name, "NODATA", "not measured")
    if "routed" in r.get("suspect", {}):
        return Verdict(name, "NODATA", f"suspect: routed {r['suspect']['routed']}")
    add = r["add_per_layer_us"]
    others = ", ".join(f"{c} {v:.2f}" for c, v in add.items() if c != "routed")
    detail = f"routed adds {add['routed']:.2f} us per layer (others: {others})"
    return Verdict(name, "PASS" if add["routed"] <= limit else "FAIL", detail)


def eager_vs_torch(eager: list[dict], factor: float = 1.05) -> Verdict:
    checked, misses, missing = 0, [], []
    for n in (1024, 2560):
        for m in (1, 8, 32):
            r = next((r for r in eager if r.get("kind") != "fallback" and r["M"] == m and r["N"] == n), None)
            routed, torch_us = _us(r, "routed"), _us(r, "torch")
            if routed is None or torch_us is None:
                missing.append(f"M={m} N={n}: not measured")
                continue
            checked += 1
            if routed > factor * torch_us:
                misses.append((routed / torch_us, f"M={m} N={n}: eager routed {routed:.2f} us > {factor} x torch "
                                                  f"{torch_us:.2f} ({routed / torch_us:.3f}x)"))
    return _verdict(f"eager routed <= {factor}x torch.mm wall time, M 1/8/32, N 1024/2560", checked, misses, missing,
                    "shapes")


def eager_host_vs_torch(eager: list[dict], factor: float = 0.8) -> Verdict:
    """Issue 15: an eager routed call's host time <= factor x torch.mm's, at every measured M in 1..32 of the
    shapes the tables route (a call the table sends to torch is torch). Host time is the bench's
    ``enqueue_us`` (the loop's host time): where the GPU is the limit, the wall time is the kernels' and
    says nothing about the host. A result that lacks it is read by wall time."""
    checked, misses, missing = 0, [], []
    for r in eager:
        if r.get("kind") == "fallback" or r["M"] > 32:
            continue
        field = "enqueue_us" if r.get("enqueue_us") else "us"
        routed, torch_us = _us(r, "routed", field), _us(r, "torch", field)
        if routed is None or torch_us is None:
            missing.append(f"M={r['M']} N={r['N']}: not measured")
            continue
        if str(r.get("route", "torch")).startswith("torch"):
            continue
        checked += 1
        if routed > factor * torch_us:
            misses.append((routed / torch_us, f"M={r['M']} N={r['N']} K={r['K']}: eager routed {routed:.2f} us > "
                                              f"{factor} x torch {torch_us:.2f} ({routed / torch_us:.3f}x; route "
                                              f"{r.get('route')})"))
    return _verdict(f"eager routed host time <= {factor}x torch.mm's, measured M in 1..32, routed shapes",
                    checked, misses, missing, "shapes")


def fallback_added(eager: list[dict], limit: float = 1.0) -> Verdict:
    rows = [r for r in eager if r.get("kind") == "fallback"]
    name = f"fallback path adds <= {limit} us over the original (eager wall time)"
    if not rows:
        return Verdict(name, "NODATA", "not measured")
    misses = [(r["added_us"], f"M={r['M']} N={r['N']}: plugin {r['us']['fallback']:.2f} vs direct "
                              f"{r['us']['direct']:.2f}: adds {r['added_us']:.2f} us") for r in rows
              if r["added_us"] > limit]
    detail = "; ".join(f"N={r['N']}: {r['added_us']:+.2f} us" for r in rows)
    return Verdict(name, "FAIL" if misses else "PASS", detail, [m for _, m in misses])


def precision(files: dict[str, list[dict]]) -> Verdict:
    checked, misses = 0, []
    for mode, results in files.items():
        for r in results:
            for col, e in r.get("rel_err", {}).items():
                checked += 1
                close = r.get("allclose", {}).get(col, False)
                if e is None or not isinstance(e, (int, float)) or e > REL_TOL or not close:
                    misses.append((float("inf") if e is None else float(e),
                                   f"{mode} M={r['M']} N={r['N']} K={r['K']} {col}: rel. error {e} allclose {close}"))
    return _verdict(f"every result rel. error <= {REL_TOL:g} vs float64 and allclose(atol 1e-2, rtol 1e-4)",
                    checked, misses, [] if checked else ["no results"], "results")


def region_added(region: list[dict], schedule: str, ms: tuple[int, ...], name: str,
                 bound: Callable[[int, dict], Optional[float]], what: str, model: str = "pro") -> Verdict:
    """One target on what the fp32 GEMMs add per layer in a region model (V4-Pro unless named; issue 15):
    ``bound(m, added)`` is the most ``routed`` may add at M (None: that M lacks the ``what`` column). A row
    whose routed or ``what`` column ``bench --region`` marked suspect is not measured."""
    rows = {r["M"]: r for r in region
            if r.get("model") == model and r.get("schedule") == schedule and "routed" in r.get("add_per_layer_us", {})}
    checked, misses, missing = 0, [], []
    for m in ms:
        added = rows[m]["add_per_layer_us"] if m in rows else None
        suspect = sorted(c for c in rows[m].get("suspect", {}) if c in ("routed", what)) if m in rows else []
        if suspect:
            missing.append(f"M={m}: suspect ({', '.join(suspect)} added less than their calls alone)")
            continue
        limit = bound(m, added) if added is not None else None
        if limit is None:
            missing.append(f"M={m}: not measured" if added is None else f"M={m}: no {what} column")
            continue
        checked += 1
        if added["routed"] > limit:
            misses.append((added["routed"] / limit, f"M={m}: routed adds {added['routed']:.2f} us > {limit:.2f} "
                                                    f"({', '.join(f'{c} {v:.2f}' for c, v in added.items())})"))
    label = "" if model == "pro" else f" ({model})"
    return _verdict(f"region{label}, {schedule}: {name}", checked, misses, missing, "M")


def region_targets(region: list[dict], noise: float = 0.01) -> list[Verdict]:
    """Issue 15's region targets, at the M values ``bench --region`` measures by default."""
    def times(col: str, f: float) -> Callable[[int, dict], Optional[float]]:
        return lambda m, added: f * added[col] if col in added else None

    ms = (1, 2, 4, 8, 16, 32, 64)
    # Two targets hold for both models, a line each: a shape's winner never loses to torch in the region
    # (V4-Flash's too, K=4096), and the serial target, which names no model (stop 37).
    both = ("pro", "flash")
    return [
        *(region_added(region, "overlapped", ms, f"routed never adds more than torch (+{noise:.0%} noise)",
                       times("torch", 1 + noise), "torch", model=model) for model in both),
        region_added(region, "overlapped", ms, "routed adds <= 0.7x what torch adds", times("torch", 0.7), "torch"),
        region_added(region, "overlapped", ms[:-1], "routed adds <= 2.5 us per layer at M 1-8, <= 3.2 at M 16-32",
                     lambda m, added: 2.5 if m <= 8 else 3.2, ""),
        *(region_added(region, "serial", ms[:-1], "routed adds <= 0.9x what vLLM's ll_bf16 (best config) adds",
                       times("vllm_ll", 0.9), "vllm_ll", model=model) for model in both),
    ]


def fuzz_clean(fuzz: dict) -> Verdict:
    s = fuzz.get("summary", {})
    name = "fuzz: random shapes through the routed call, all exact"
    if "failures" not in s:
        return Verdict(name, "NODATA", "no summary")
    detail = f"{s.get('cases')} cases, {s['failures']} failures, max rel. error {s.get('max_rel_err')}, seed {s.get('seed')}"
    return Verdict(name, "FAIL" if s["failures"] else "PASS", detail)


def load(paths: list[str]) -> dict[str, object]:
    """{'graph'|'deterministic'|'eager'|'decode': results, 'fuzz': dict} from folders and files."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            for name in ("bench.json", "bench_det.json", "bench_eager.json", "bench_decode.json", "bench_region.json",
                         "fuzz.json"):
                if os.path.exists(os.path.join(p, name)):
                    files.append(os.path.join(p, name))
        else:
            files.append(p)
    data: dict[str, object] = {}
    for f in files:
        with open(f) as fh:
            obj = json.load(fh)
        if "mode" in obj and "results" in obj:
            data.setdefault(obj["mode"], []).extend(obj["results"])  # type: ignore[union-attr]
        elif "summary" in obj:
            data["fuzz"] = obj
    return data


def check(data: dict[str, object], noise: float = 0.01) -> list[Verdict]:
    """Every target, in the issues' order; a mode that was not run gives NODATA verdicts."""
    graph = data.get("graph") or []
    det = data.get("deterministic") or []
    eager = data.get("eager") or []
    decode = data.get("decode") or []
    region = data.get("region") or []
    out = [routed_vs_peers(graph), routed_absolute(graph, 1024, 8, 6.0), routed_absolute(graph, 2560, 32, 11.0),
           never_slower_than_torch(graph, noise), deterministic_vs_cutedsl(det, noise), decode_add(decode),
           routed_vs_best(graph), eager_vs_torch(eager), eager_host_vs_torch(eager), fallback_added(eager),
           *region_targets(region, noise),  # type: ignore[arg-type]
           precision({k: v for k, v in data.items() if k != "fuzz"})]  # type: ignore[misc]
    if "fuzz" in data:
        out.append(fuzz_clean(data["fuzz"]))  # type: ignore[arg-type]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = Parser("python -m sglang_fp32gemm.tools.targets", __doc__)
    ap.add_argument("paths", nargs="+", help="bench output folders or JSON files")
    ap.add_argument("--noise", type=float, default=0.01,
                    help="allowance where the targets compare two timings of what may be one kernel (default 1%%)")
    ap.add_argument("--json", default=None, help="also write the verdicts here")
    ap.add_argument("--limit", type=int, default=6, help="misses printed per target, worst first (default 6)")
    args = ap.parse_args(argv)
    verdicts = check(load(args.paths), args.noise)
    for v in verdicts:
        print("\n".join(v.lines(args.limit)))
    counts = {s: sum(v.status == s for v in verdicts) for s in ("PASS", "FAIL", "NODATA")}
    print(f"targets: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['NODATA']} NODATA")
    if args.json:
        write_json(args.json, [dataclasses.asdict(v) for v in verdicts])
    return 0 if counts["FAIL"] == 0 and counts["NODATA"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
