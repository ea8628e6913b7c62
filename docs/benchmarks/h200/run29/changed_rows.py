"""changed_rows.py [--kernels-only] SHIPPED TUNED OUT: the rows of TUNED whose key has another kernel in SHIPPED
(libtype and kernelName; a key SHIPPED lacks counts as changed), written to OUT with TUNED's header; prints them.
--kernels-only leaves out torch rows (run 32's isolated tunes of serial rows, whose calls never go to torch).
Exit 1 when none changed (nothing to A/B). Run 29's tune_ab.sh, run 32's iso_tune_ab.sh."""

import csv
import sys


def rows(path: str) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    return table[0], table[1:]


def main(shipped: str, tuned: str, out: str, kernels_only: bool = False) -> int:
    try:
        thead, new = rows(tuned)
    except (OSError, IndexError) as e:
        print(f"no tuned rows ({tuned}: {e}): no A/B")
        return 1
    head, ship = rows(shipped)
    key = [head.index(c) for c in ("gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype")]
    what = [head.index("libtype"), head.index("kernelName")]
    routed = {tuple(r[i] for i in key): tuple(r[i] for i in what) for r in ship}
    tkey = [thead.index(head[i]) for i in key]
    twhat = [thead.index(head[i]) for i in what]
    changed = [r for r in new if routed.get(tuple(r[i] for i in tkey)) != tuple(r[i] for i in twhat)
               and not (kernels_only and r[twhat[0]] == "torch")]
    with open(out, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([thead, *changed])
    for r in changed:
        k = tuple(r[i] for i in tkey)
        print(f"changed M={k[2]} N={k[3]} K={k[4]}: {routed.get(k, ('none', ''))} -> {tuple(r[i] for i in twhat)}")
    if not changed:
        print("no row differs from the shipped table: no A/B")
    return 0 if changed else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    only = "--kernels-only" in args
    sys.exit(main(*[a for a in args if a != "--kernels-only"], kernels_only=only))
