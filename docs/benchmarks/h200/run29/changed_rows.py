"""changed_rows.py [--kernels-only] [--summary SUMMARY] SHIPPED TUNED OUT: the rows of TUNED whose key has another
kernel in SHIPPED (libtype and kernelName; a key SHIPPED lacks counts as changed), written to OUT with TUNED's
header; prints them. --kernels-only leaves out torch rows (run 32's isolated tunes of serial rows, whose calls
never go to torch). --summary (the tune's summary.json, stop 48): a row whose kernel is the one the tuner found
the tuned device routing at its shape ("shipped", read with that GPU model's rows) is unchanged, whatever
SHIPPED's generic row says; run 35e A/B'd such a row against itself. Exit 1 when none changed (nothing to A/B).
Run 29's tune_ab.sh, run 32's iso_tune_ab.sh, run 33's serial_tune_ab.sh."""

import csv
import json
import sys


def rows(path: str) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    return table[0], table[1:]


def device_routes(summary: str) -> dict[tuple[str, str, str], str]:
    """{(M, N, K): kernelName} the tuned device routed at each shape, from the tune's summary ("shipped": the
    candidate label "backend:kernel"); shapes with no shipped kernel (torch, or none offered) are left out."""
    with open(summary) as f:
        shapes = json.load(f).get("shapes", [])
    return {(str(s["M"]), str(s["N"]), str(s["K"])): s["shipped"]["kernel"].split(":", 1)[1]
            for s in shapes if s.get("shipped") and ":" in s["shipped"].get("kernel", "")}


def main(shipped: str, tuned: str, out: str, kernels_only: bool = False, summary: str = "") -> int:
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
    on_device = device_routes(summary) if summary else {}
    changed = [r for r in new if routed.get(tuple(r[i] for i in tkey)) != tuple(r[i] for i in twhat)
               and not (kernels_only and r[twhat[0]] == "torch")
               and on_device.get(tuple(r[tkey[i]] for i in (2, 3, 4))) != r[twhat[1]]]
    with open(out, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([thead, *changed])
    for r in changed:
        k = tuple(r[i] for i in tkey)
        print(f"changed M={k[2]} N={k[3]} K={k[4]}: {routed.get(k, ('none', ''))} -> {tuple(r[i] for i in twhat)}")
    if not changed:
        print("no row differs from the shipped table (or what the tuned device routes): no A/B")
    return 0 if changed else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    only = "--kernels-only" in args
    args = [a for a in args if a != "--kernels-only"]
    summ = ""
    if "--summary" in args:
        i = args.index("--summary")
        summ = args[i + 1]
        del args[i:i + 2]
    sys.exit(main(*args, kernels_only=only, summary=summ))
