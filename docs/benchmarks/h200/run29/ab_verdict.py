"""ab_verdict.py AB_DIR: run 19c's shipping rule read from region_ab's four processes (AB_DIR/{A1,B1,A2,B2}/
bench_region.json): per model, schedule and M, what routed adds per layer in each, and "ship" only where A
added less than B in both pairs by more than MIN_MARGIN_US (run 35), every result was exact and every route
check held; "keep" otherwise, with why. Prints one line per case; exit 0 when any case ships, 1 when none does
or a process left no results. Run 29's tune_ab.sh, after region_ab."""

import json
import os
import sys

RUNS = ("A1", "B1", "A2", "B2")
#: Run 35e ran the same tables as A and B (the tune's pick was the row the H100 already read): A added 0.13 and
#: 0.18 us a layer less than B in its two pairs. Until then a win by any margin shipped; from run 35, A must
#: win each pair by more than twice that gap. AB_MIN_MARGIN_US overrides it (0: the rule before).
MIN_MARGIN_US = float(os.environ.get("AB_MIN_MARGIN_US", "0.36"))


def load(ab_dir: str) -> dict[str, dict[tuple, dict]]:
    """{run: {(model, schedule, M): result}}; a run without results is missing."""
    out = {}
    for run in RUNS:
        path = os.path.join(ab_dir, run, "bench_region.json")
        try:
            with open(path) as f:
                results = json.load(f)["results"]
        except (OSError, ValueError, KeyError) as e:
            print(f"{run}: no results ({path}: {e})")
            continue
        out[run] = {(r["model"], r["schedule"], r["M"]): r for r in results}
    return out


def verdict(cases: dict[str, dict]) -> tuple[bool, str]:
    """(ship, the line's detail) for one (model, schedule, M) across the four runs."""
    add = {run: r["add_per_layer_us"].get("routed") for run, r in cases.items()}
    torch_us = [t for t in (r["add_per_layer_us"].get("torch") for r in cases.values()) if t is not None]
    why = []
    if any(v is None for v in add.values()):
        why.append("a routed column is missing")
    if not all(all(r.get("allclose", {}).values()) for r in cases.values()):
        why.append("a result not exact")
    if not all(r.get("route_check", {}).get("ok") for r in cases.values()):
        why.append("a route check failed")
    pairs = [("A1", "B1"), ("A2", "B2")]
    margins = [add[b] - add[a] for a, b in pairs if None not in (add[a], add[b])]
    wins = sum(1 for d in margins if d > MIN_MARGIN_US)
    if wins < 2:
        why.append(f"A won {wins} of 2 pairs by more than {MIN_MARGIN_US:g} us")
    detail = " / ".join(f"{run} {add[run]}" for run in RUNS) + \
        (f"; B - A {', '.join(f'{d:.2f}' for d in margins)}" if margins else "") + \
        (f"; torch {min(torch_us):.2f}-{max(torch_us):.2f}" if torch_us else "; no torch column")
    return not why, detail + ("" if not why else f" ({'; '.join(why)})")


def main(ab_dir: str) -> int:
    runs = load(ab_dir)
    if len(runs) < len(RUNS):
        print("keep everything: a process left no results")
        return 1
    ship_any = False
    for case in sorted(set.intersection(*(set(r) for r in runs.values())), key=str):
        ship, detail = verdict({run: runs[run][case] for run in RUNS})
        ship_any |= ship
        model, schedule, m = case
        print(f"{'ship' if ship else 'keep'} {model} {schedule} M={m}: added per layer, us: {detail}")
    return 0 if ship_any else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
