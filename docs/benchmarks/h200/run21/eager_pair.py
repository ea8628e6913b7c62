"""Run 21: what a ratio-4 layer's two compressor GEMMs cost as eager calls (batches SGLang does not capture),
as two calls and as one pair launch, on the device. Usage: python3 eager_pair.py OUT.json

Per M (1, 2, 4, 8, 16), V4-Pro (K=7168, N=512 and N=2048), one process, 1000 calls a variant, 5 interleaved
runs, medians (wall us per pair of GEMMs, and the host's enqueue time): torch.mm twice; the plugin's routed
call twice (the packaged tables, or SGLANG_FLYDSL_FP32_GEMM_CONFIG); ``pairs.call`` with the candidate pair
table laid over (one launch where a row names one, as the compressor hook makes it: a pair launch at the
indexer's call; the layer's call then only takes the held output); and each pair form bound directly (its
config: run21/sm90_candidate_pair.csv's row at that M). Every output checked against float64.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

from sglang_fp32gemm import exactness, pairs, routing
from sglang_fp32gemm.backends import default_backends
from sglang_fp32gemm.table import read_csv_file
from sglang_fp32gemm.tools import timing

K, N1, N2 = 7168, 512, 2048
PAIR_TABLE = "docs/benchmarks/h200/run21/sm90_candidate_pair.csv"


def main(out_path: str) -> None:
    dev = torch.device("cuda")
    timer = timing.CudaTimer()
    torch_fn = timing.torch_fn(dev)
    ws = [(a, b) for a, b in zip(timer.weights(N1, K, dev), timer.weights(N2, K, dev))]
    rows = {r.M: r for r in read_csv_file(PAIR_TABLE) if r.K == K}
    pair_backends = [b for bs in default_backends().values() for b in bs if hasattr(b, "bind_pair")]
    os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
    plain = routing.reset_router()
    os.environ["SGLANG_FLYDSL_FP32_GEMM_CONFIG"] = ":".join(
        p for p in (os.environ.get("SGLANG_FLYDSL_FP32_GEMM_CONFIG", ""), PAIR_TABLE) if p)
    with_pairs = routing.build_router()
    report = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "results": []}
    for m in (1, 2, 4, 8, 16):
        x = exactness.random_bf16(m, K, device=dev)
        fns = {
            "torch x2": lambda a, w: (torch_fn(a, w[0]), torch_fn(a, w[1])),
            "routed x2": lambda a, w: (plain.call(a, w[0]), plain.call(a, w[1])),
            "pairs.call": lambda a, w: pairs.call(with_pairs, a, w[0], w[1])[:2],
        }
        row = rows.get(m)
        rec = {"M": m, "row": row.kernelName if row else None, "wall_us": {}, "enqueue_us": {}, "exact": {},
               "note": {}}
        if row is not None:
            for b in pair_backends:
                try:
                    cfg = b.parse(row.kernelName)
                except ValueError:
                    continue
                pair = b.bind_pair(cfg, dev, N1, N2, K)
                fns[f"{b.name} pair alone"] = lambda a, w, pair=pair: pair(a, w[0], w[1])
        for name, fn in list(fns.items()):
            try:
                for i in range(20):
                    got = fn(x, ws[i % len(ws)])
                torch.cuda.synchronize()
                rec["exact"][name] = all(exactness.measure(o, exactness.reference(x, w)).ok
                                         for o, w in zip(got, ws[19 % len(ws)]))
            except Exception as e:
                rec["note"][name] = f"raised {type(e).__name__}: {str(e)[:200]}"
                del fns[name]
        walls = {n: [] for n in fns}
        enq = {n: [] for n in fns}
        for _ in range(5):
            for name, fn in fns.items():
                wall, e = timer.eager(fn, x, ws, 1000)
                walls[name].append(wall)
                enq[name].append(e)
        rec["wall_us"] = {n: round(statistics.median(v), 3) for n, v in walls.items()}
        rec["enqueue_us"] = {n: round(statistics.median(v), 3) for n, v in enq.items()}
        rec["counters"] = {f"{r_}:{d}": c for (r_, d), c in with_pairs.counters().items()}
        with_pairs.reset_counters()
        report["results"].append(rec)
        print(f"M={m} " + " ".join(f"{n}={v:.2f}" for n, v in rec["wall_us"].items())
              + f" exact={all(rec['exact'].values())}", flush=True)
    with open(out_path, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
