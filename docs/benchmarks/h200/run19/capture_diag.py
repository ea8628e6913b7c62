"""Is a slow capture of the overlapped region slow for good (the graph instance) or for a while (the GPU's
state at the time)? One CUDA device, a few seconds; writes JSON to the folder named (default $OUT or .).

    python3 docs/benchmarks/h200/run19/capture_diag.py [--model pro] [--m 4] [--graphs 6] [--replays 20] [OUTDIR]

V4-Pro's overlapped region (tools/region.py) at one M, captured ``--graphs`` times for each of two modes,
alternating: ``none`` (no fp32 GEMM) and ``torch`` (torch.mm, fp32 out). Every graph is kept. Then three
passes replay every graph (median of ``--replays`` replays each): in capture order, in reverse order, and in
capture order again. A graph slow in all three passes, wherever it stands in the pass, is a slow *instance*;
slowness that follows a pass's position or time rather than the graph is the GPU's *state*. SM clocks
(``torch.cuda.clock_rate``, needs pynvml) are recorded after each graph's replays where available.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, ROOT)

from sglang_fp32gemm import exactness  # noqa: E402
from sglang_fp32gemm.tools import region, timing  # noqa: E402


def capture(steps: region.Steps, gemm) -> torch.cuda.CUDAGraph:
    """As timing.CudaTimer.step (warm-up twice on a side stream, then capture), keeping the graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            steps.of(gemm)()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        steps.of(gemm)()
    torch.cuda.synchronize()
    return graph


def clock() -> int | None:
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no pynvml here
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pro", choices=sorted(region.MODELS))
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--graphs", type=int, default=6)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("capture_diag needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    spec = region.MODELS[a.model]
    plans = region.plan(spec, "overlapped")
    weights = region.make_weights(spec, dev)
    x = exactness.random_bf16(a.m, spec.hidden, device=dev)
    steps = region.Steps(spec, plans, weights, x, region.Streams(dev))
    torch_gemm = {n: timing.torch_fn(dev) for n, _ in region.fp32_shapes(spec)}
    graphs, keep = [], []
    for i in range(a.graphs):
        for mode, gemm in (("none", None), ("torch", torch_gemm)):
            graphs.append((f"{mode}{i}", mode, capture(steps, gemm)))
            keep.append((steps.where, steps.keep))  # the captured tensors live as long as their graph
            steps.release()
    order = list(range(len(graphs)))
    passes = []
    t0 = time.perf_counter()
    for name, idx in (("forward", order), ("reverse", order[::-1]), ("forward again", order)):
        rows = {}
        for i in idx:
            us = timing._replay_median_us(graphs[i][2], a.replays)
            rows[graphs[i][0]] = {"us": round(us, 2), "at_s": round(time.perf_counter() - t0, 3), "sm_mhz": clock()}
        passes.append({"pass": name, "graphs": rows})
    print(f"{a.model} M={a.m} overlapped: step us per graph, three passes (forward, reverse, forward)")
    for gname, mode, _ in graphs:
        vals = [p["graphs"][gname]["us"] for p in passes]
        print(f"  {gname:8s} " + " ".join(f"{v:9.2f}" for v in vals))
    for mode in ("none", "torch"):
        firsts = [passes[0]["graphs"][g]["us"] for g, md, _ in graphs if md == mode]
        print(f"  {mode}: median {statistics.median(firsts):.2f}, fastest {min(firsts):.2f}, slowest {max(firsts):.2f}")
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"capture_diag_{a.model}_m{a.m}.json")
    with open(path, "w") as f:
        json.dump({"model": a.model, "M": a.m, "replays": a.replays, "graphs": [g for g, _, _ in graphs],
                   "passes": passes, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
