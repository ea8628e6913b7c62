"""Tune the Triton split-K kernel on the current GPU and write table rows.

For each (M, N) it compiles and times candidate configurations under
CUDA-graph replay, rejects every candidate whose result is not fp32-exact
(rel. error vs float64 > 1e-5, any element outside atol 1e-2 / rtol 1e-4,
a non-finite or unwritten element), and keeps the fastest only if it beats
torch.mm(out_dtype=fp32) measured in the same run by ``--min-gain``.

    python -m sglang_fp32gemm tune --out configs/sm90.csv
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import logging
import multiprocessing as mp
import os
import sys
import time

import torch

from sglang_fp32gemm.backends import triton_splitk as ts
from sglang_fp32gemm.table import TunedRow, device_key, format_rows
from sglang_fp32gemm.tools import timing

logger = logging.getLogger(__name__)

K_DSV4 = 7168
N_DSV4 = (512, 1024, 2048, 2560)
M_DEFAULT = (1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128)
REL_TOL = 1e-5
ATOL, RTOL = 1e-2, 1e-4


def candidates(m: int, n: int, k: int, wide: bool = False) -> list[ts.SplitKConfig]:
    """The search space for one shape.

    Split counts need not be powers of two (K=7168 = 7 * 1024): 7, 14 and 28
    give grids that fill 132 SMs better. BM=16 with two M tiles is tried for
    M up to 32 (the second read of W then hits the L2).
    """
    big = m > 32
    if big:
        bms = {32, 64}
    else:
        bms = {max(16, 1 << (m - 1).bit_length()), 16}
    out = []
    for bm in sorted(bms):
        for bn in ((16, 32, 64, 128) if not big else (32, 64)):
            if n % bn or (bn == 16 and n > 1024):
                continue
            for bk in ((64, 128, 256) if not big else (128, 256)):
                iters = k // bk
                for sk in range(1, 33):
                    if iters % sk or iters // sk < 2:
                        continue
                    programs = (n // bn) * sk * ((m + bm - 1) // bm)
                    if not 64 <= programs <= 1200:
                        continue
                    warps_set = (2, 4, 8) if wide else ((4, 8) if bn >= 64 else (4,))
                    for warps in warps_set:
                        for stages in ((2, 3, 4, 5, 6) if wide else ((3, 4, 5) if not big else (3, 4))):
                            if bm * bk * 2 * stages + bn * bk * 2 * stages > 200 * 1024:
                                continue  # over the 227 KB of shared memory
                            out.append(ts.SplitKConfig(bm, bn, bk, sk, warps, stages))
    return out


def groups(ms: list[int]) -> list[list[int]]:
    """M values that share a candidate space; the largest stands for the group."""
    by: dict[tuple, list[int]] = {}
    for m in sorted(ms):
        key = (max(16, 1 << (m - 1).bit_length())) if m <= 32 else (64 if m <= 64 else 128)
        by.setdefault(key, []).append(m)
    return list(by.values())


def check(cfg: ts.SplitKConfig, m: int, n: int, k: int) -> tuple[bool, float, float]:
    """(ok, rel_err, bad_fraction) on fresh random inputs and a poisoned output."""
    dev = torch.device("cuda")
    x = torch.randn(m, k, device=dev).bfloat16()
    w = torch.randn(n, k, device=dev).bfloat16()
    out = torch.full((m, n), float("nan"), device=dev)
    ws = torch.full((max(1, cfg.workspace_floats(m, n)),), float("nan"), device=dev)
    cnt = torch.zeros(max(1, cfg.counters(m, n)), dtype=torch.int32, device=dev)
    ts.launch(x, w, cfg, out, ws, cnt)
    torch.cuda.synchronize()
    ref = x.double() @ w.double().t()
    finite = bool(torch.isfinite(out).all())
    rel = float((out.double() - ref).norm() / ref.norm()) if finite else float("inf")
    bad = float((~torch.isclose(out.double(), ref, atol=ATOL, rtol=RTOL)).double().mean())
    counters_clean = bool((cnt == 0).all())
    return finite and rel <= REL_TOL and bad == 0.0 and counters_clean, rel, bad


def _warm_one(args):
    cfg, m, n, k = args
    try:
        check(cfg, m, n, k)
        return True
    except Exception as e:  # a config that does not compile is just skipped
        return f"{cfg.name}: {type(e).__name__}: {e}"


def precompile(jobs: list[tuple], workers: int) -> None:
    """Fill Triton's disk cache in parallel processes; timing then only loads."""
    if workers <= 1 or not jobs:
        return
    t = time.time()
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        res = list(ex.map(_warm_one, jobs, chunksize=4))
    fails = [r for r in res if r is not True]
    print(f"precompiled {len(jobs)} kernels in {time.time() - t:.0f}s, {len(fails)} failed", flush=True)
    for f in fails[:5]:
        print("  ", f)


def tune(ms, ns, k: int, min_gain: float, wide: bool, workers: int, log, top: int = 8) -> tuple[list[TunedRow], list[dict]]:
    dev = torch.device("cuda")
    key = device_key(dev)
    jobs = []
    for n in ns:
        for group in groups(list(ms)):
            for cfg in candidates(group[-1], n, k, wide):
                jobs.append((cfg, group[-1], n, k))
    # one compile per (config, BM bucket): M is not specialised
    seen, uniq = set(), []
    for j in jobs:
        sig = (j[0], j[2])
        if sig not in seen:
            seen.add(sig)
            uniq.append(j)
    precompile(uniq, workers)
    rows, records = [], []
    for n in ns:
        weights = timing.weight_sets(n, k, dev)

        def time_cfg(cfg, m, x, replays=15):
            try:
                ok, rel, bad = check(cfg, m, n, k)
            except Exception as e:
                log.write(json.dumps({"m": m, "n": n, "cfg": cfg.name, "error": str(e)[:200]}) + "\n")
                return None
            if not ok:
                log.write(json.dumps({"m": m, "n": n, "cfg": cfg.name, "rejected": True, "rel": rel, "bad": bad}) + "\n")
                return None
            be = ts.TritonSplitKBackend()
            stub = TunedRow(key.gfx, key.cu_num, m, n, k, False, "torch.bfloat16", "torch.float32",
                            False, False, "triton", 0, cfg.split_k, 0.0, cfg.name, 0.0, 0.0, 0.0)
            us = timing.time_per_call_us(lambda xx, ww: be.run(xx, ww, stub), x, weights, replays=replays)
            log.write(json.dumps({"m": m, "n": n, "cfg": cfg.name, "us": us, "rel": rel}) + "\n")
            return us, cfg, rel, bad

        for group in groups(list(ms)):
            # Phase 1: every candidate at the group's largest M; phase 2: the
            # best few again at each M of the group, beside torch.
            rep = group[-1]
            x = torch.randn(rep, k, device=dev).bfloat16()
            scored = [r for r in (time_cfg(c, rep, x, replays=7) for c in candidates(rep, n, k, wide)) if r]
            scored.sort(key=lambda r: r[0])
            finalists = [r[1] for r in scored[:top]]
            for m in group:
                x = torch.randn(m, k, device=dev).bfloat16()
                t_torch = timing.time_per_call_us(timing.torch_mm, x, weights)
                results = [r for r in (time_cfg(c, m, x) for c in finalists) if r]
                best = min(results, key=lambda r: r[0]) if results else None
                rec = {"M": m, "N": n, "K": k, "torch_us": t_torch}
                if best is not None:
                    us, cfg, rel, bad = best
                    rec.update(best_us=us, kernel=cfg.name, rel_err=rel, speedup=t_torch / us)
                    if us * (1 + min_gain) <= t_torch:
                        flops = 2 * m * n * k
                        nbytes = n * k * 2 + m * k * 2 + m * n * 4
                        rows.append(TunedRow(
                            key.gfx, key.cu_num, m, n, k, False, "torch.bfloat16", "torch.float32",
                            False, False, "triton", 0, cfg.split_k, round(us, 3), cfg.name,
                            bad, round(flops / us / 1e6, 3), round(nbytes / us / 1e3, 1)))
                        rec["row"] = True
                records.append(rec)
                print(json.dumps(rec), flush=True)
                log.flush()
        del weights
        torch.cuda.empty_cache()
    return rows, records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_fp32gemm tune", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=list(M_DEFAULT))
    ap.add_argument("--n", type=int, nargs="+", default=list(N_DSV4))
    ap.add_argument("--k", type=int, default=K_DSV4)
    ap.add_argument("--min-gain", type=float, default=0.03,
                    help="keep a row only if it is this much faster than torch (default 3%%)")
    ap.add_argument("--wide", action="store_true", help="also search num_warps and num_stages")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1),
                    help="processes that precompile kernels in parallel")
    ap.add_argument("--out", default="tuned_triton.csv", help="CSV of the kept rows")
    ap.add_argument("--log", default="tune_log.jsonl", help="every candidate, one JSON per line")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("tune needs a CUDA GPU", file=sys.stderr)
        return 2
    with open(args.log, "w") as log:
        rows, records = tune(args.m, args.n, args.k, args.min_gain, args.wide, args.workers, log)
    with open(args.out, "w") as f:
        f.write(format_rows(rows))
    with open(os.path.splitext(args.out)[0] + "_summary.json", "w") as f:
        json.dump(records, f, indent=1)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
