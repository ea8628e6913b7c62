"""What bench writes and prints: Markdown tables, the plot, the compact summaries."""

from __future__ import annotations

from sglang_fp32gemm.exactness import REL_TOL


def fmt(v, nd=2) -> str:
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
                     + " | ".join(fmt(us.get(c)) for c in cols)
                     + f" | {fmt(ratio, 3)} | {'-' if rel is None else f'{rel:.1e}'} |")
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
                     + " | ".join(fmt(us.get(c)) for c in cols) + f" | {fmt(ratio, 3)} |")
    lines += ["", "Fallback path (no row): hooks.around_linear(torch_mm, x, w) vs torch_mm(x, w)", "",
              "| M | N | K | direct | fallback | added (wall) | added (host enqueue) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("kind") == "fallback":
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {fmt(r['us'].get('direct'))} | "
                         f"{fmt(r['us'].get('fallback'))} | {fmt(r.get('added_us'))} | "
                         f"{fmt(r.get('added_enqueue_us'))} |")
    return "\n".join(lines) + "\n"


def markdown_decode(results: list[dict]) -> str:
    cols = col_names([{"us": r["add_per_layer_us"]} for r in results])
    lines = ["# Decode sequence: what the fp32 call adds per layer (us)", "",
             "Per layer: bf16 linear N=1536, the fp32 call, bf16 linear N=512, all on x[M, K]; every layer its "
             "own weights; one CUDA graph per step; (step with the call - step without) / layers.", "",
             "| M | N | K | base step us | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 4)]
    for r in results:
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {'/'.join(fmt(b) for b in r['base_step_us'])} | "
                     + " | ".join(fmt(r["add_per_layer_us"].get(c), 3) for c in cols) + " |")
    suspect = [f"- M={r['M']} N={r['N']} {c}: {why}" for r in results for c, why in r.get("suspect", {}).items()]
    if suspect:
        lines += ["", "Suspect (one stream: a call cannot add much less than it takes alone):", "", *suspect]
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
                cells.append(f"{fmt(r['us'].get('torch')):>6s} {fmt(r['us'].get('routed')):>6s} "
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
            if e is None or e > REL_TOL or not r["allclose"].get(c, False):
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
            out.append(f"  fallback M={r['M']} N={r['N']}: direct {fmt(us.get('direct'))} plugin "
                       f"{fmt(us.get('fallback'))} added {fmt(r.get('added_us'))} (host enqueue "
                       f"{fmt(r.get('added_enqueue_us'))})")
        else:
            rest = " ".join(f"{c} {fmt(v)}" for c, v in us.items() if c not in ("torch", "routed", "hooked"))
            ratio = us["routed"] / us["torch"] if us.get("routed") and us.get("torch") else float("nan")
            out.append(f"  M={r['M']:<3d} N={r['N']:<5d} torch {fmt(us.get('torch'))} routed {fmt(us.get('routed'))}"
                       f" ({ratio:.3f}x) hooked {fmt(us.get('hooked'))} {rest}")
    out.append(precision_line(results))
    return out


def summary_decode(results: list[dict]) -> list[str]:
    out = ["== decode sequence: us the call adds per layer"]
    for r in results:
        adds = " ".join(f"{c} {v:.2f}" for c, v in r["add_per_layer_us"].items())
        out.append(f"  M={r['M']:<3d} N={r['N']:<5d} base {'/'.join(fmt(b) for b in r['base_step_us'])} | {adds}")
        for c, why in r.get("suspect", {}).items():
            out.append(f"  SUSPECT {c}: {why}")
    notes = {c: v for r in results for c, v in r["note"].items() if "pdl" in c}
    for c, v in notes.items():
        out.append(f"  {c}: skipped, {v}")
    out.append(precision_line(results))
    return out
