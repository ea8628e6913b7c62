"""Read run 26's overlap diagnosis on the CPU: ``python3 docs/benchmarks/h200/run26/overlap_read.py DIR``.

DIR holds ``overlap_why.json`` and its ``overlap_why.trace_<model>_m<M>.json.gz`` (overlap_why.py). Per case:
what each mode added per layer (the median of its rounds, and the rounds), the calls alone, and from the
profiled replays, for every kernel class (name and grid: a bf16 GEMM of one shape, an elementwise kernel of one
size, an fp32 GEMM) the calls and median duration in ``none`` and in each mode. A kernel that takes longer
beside our fp32 GEMMs than in ``none`` is held up by them; the span against the busy time says how much of the
step overlapped.
"""

from __future__ import annotations

import collections
import gzip
import json
import pathlib
import statistics
import sys


def classes(rows: list, names: list) -> dict:
    """(short name, grid) -> [durations] of one replay."""
    out: dict = collections.defaultdict(list)
    for i, _stream, _start, dur, grid in rows:
        out[(names[i], str(grid))].append(dur)
    return out


def short(name: str) -> str:
    """A kernel's name, its middle left out past 100 characters (the head names the kernel, the tail often its
    element type)."""
    return name if len(name) <= 100 else name[:60] + " ... " + name[-35:]


def report(d: pathlib.Path) -> str:
    main = json.loads((d / "overlap_why.json").read_text())
    lines = [f"versions: {main.get('versions')}", f"priority check: {main.get('priority_check')}",
             f"trace args: {main.get('trace_args_example')}"]
    for case, rec in main.get("cases", {}).items():
        model, m = case.split(":")
        lines.append(f"\n== {case}: {rec.get('layers')} layers; calls alone (us): {rec.get('alone_us')}; "
                     f"spin {rec.get('spin_us_per_kcycle')} us per 1000 cycles")
        added = rec.get("add_per_layer_us", {})
        for mode, ts in rec.get("rounds_step_us", {}).items():
            lines.append(f"  {mode:<16} added {added.get(mode, '-'):>7} us a layer   rounds {ts}   "
                         f"rel_err {rec.get('rel_err', {}).get(mode, '-')}")
        for k, v in rec.get("note", {}).items():
            lines.append(f"  note {k}: {v}")
        lines.append(f"  routed (captured, in the region): {rec.get('routes')}")
        if rec.get("kernels"):
            lines.append(f"  dot forms: {rec['kernels']}")
        trace = d / f"overlap_why.trace_{model}_m{m}.json.gz"
        if not trace.exists():
            lines.append(f"  no trace ({trace.name})")
            continue
        t = json.load(gzip.open(trace, "rt"))
        names, modes = t["names"], t["modes"]
        base = classes(modes.get("none", []), names)
        for mode, rows in modes.items():
            prof = rec.get("profile", {}).get(mode, {})
            lines.append(f"  -- {mode}: span {prof.get('span_us')} us, busy {prof.get('busy_us')} us, "
                         f"{prof.get('streams')} streams {prof.get('busy_per_stream_us')}")
            if mode == "none":
                continue
            cur = classes(rows, names)
            keys = sorted(set(base) | set(cur), key=lambda k: -sum(cur.get(k, [0.0])))
            for key in keys[:12]:
                b, c = base.get(key, []), cur.get(key, [])
                bm = f"{statistics.median(b):7.2f}" if b else "      -"
                cm = f"{statistics.median(c):7.2f}" if c else "      -"
                lines.append(f"     {len(b):4d} x {bm} -> {len(c):4d} x {cm} us  {short(key[0])}  grid {key[1]}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(pathlib.Path(sys.argv[1])))
