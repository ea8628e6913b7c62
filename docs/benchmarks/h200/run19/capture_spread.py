"""How much one region capture can differ from the same step captured again (CPU only: reads committed JSON).

Two sources, both from the H200 runs under docs/benchmarks/h200/:
- ``joint`` records (runs 12-14) time every subset in 3 interleaved rounds, each a fresh capture of the same
  step in the same process: the spread of one subset's rounds is capture-to-capture variation.
- ``bench --region`` records before run 19 captured the step without fp32 GEMMs twice (first and last,
  ``base_step_us``): the two are the same step in the same process. From run 19 on, every mode is captured
  in rounds (``rounds_step_us``), read as joint's are.

    python3 docs/benchmarks/h200/run19/capture_spread.py [FILE.json ...]   (default: every committed run)
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
H200 = os.path.dirname(HERE)
SLOW = 0.03  # a capture this much above the fastest of its set counts as slow


def _rel(path: str) -> str:
    return os.path.relpath(path, H200)


def rounds(paths: list[str], title: str) -> None:
    """Sets of interleaved captures of one step (joint's, and bench --region's from run 19 on)."""
    by_schedule = collections.Counter()
    slow_sets = collections.Counter()
    positions = collections.Counter()
    extra = []
    for path in paths:
        for r in json.load(open(path)).get("results", []):
            for name, ts in r.get("rounds_step_us", {}).items():
                if len(ts) < 2:
                    continue
                by_schedule[r["schedule"]] += 1
                lo = min(ts)
                slow = [i for i, t in enumerate(ts) if t > lo * (1 + SLOW)]
                if slow:
                    slow_sets[r["schedule"]] += 1
                    positions[tuple(slow)] += 1
                    extra += [(ts[i] - lo) / lo for i in slow]
    if not by_schedule:
        return
    print(f"{title}: sets of interleaved captures of one step, by schedule")
    for s, n in sorted(by_schedule.items()):
        print(f"  {s}: {n} sets, {slow_sets[s]} with a capture > {SLOW:.0%} above the fastest")
    print(f"  which rounds were slow: {dict(positions)}")
    if extra:
        extra.sort()
        print(f"  a slow capture's excess: {extra[0]:.1%} to {extra[-1]:.1%}, median {extra[len(extra) // 2]:.1%}")


def bench_bases() -> None:
    total = collections.Counter()
    apart = collections.Counter()
    runs_apart = collections.defaultdict(set)
    for path in sorted(glob.glob(os.path.join(H200, "**", "bench_region*.json"), recursive=True)):
        for r in json.load(open(path)).get("results", []):
            b = r.get("base_step_us")
            if not b or len(b) != 2:
                continue
            total[r["schedule"]] += 1
            if abs(b[0] - b[1]) / min(b) > 0.02:
                apart[r["schedule"]] += 1
                runs_apart[r["schedule"]].add(_rel(path))
    print("bench --region (runs 7-18): the step without fp32 GEMMs captured first and last in one process")
    for s, n in sorted(total.items()):
        print(f"  {s}: {n} rows, {apart[s]} whose two captures differ by > 2% "
              f"({', '.join(sorted(runs_apart[s])) or 'none'})")


if __name__ == "__main__":
    if sys.argv[1:]:
        rounds(sys.argv[1:], "the files named")
    else:
        rounds([p for p in sorted(glob.glob(os.path.join(H200, "run1*", "joint_*.json"))) if "invalid" not in p],
               "joint (runs 12c, 13b, 14a, 14b)")
        rounds(sorted(glob.glob(os.path.join(H200, "run19", "**", "bench_region*.json"), recursive=True)),
               "bench --region, run 19 on")
        bench_bases()
