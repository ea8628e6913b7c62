"""Is a slow capture of the overlapped region slow for good (the graph instance) or for a while (the GPU's
state at the time)? One CUDA device, about 15 s; writes JSON to the folder named (default $OUT or .).

    python3 docs/benchmarks/h200/run19/capture_diag.py [--model pro] [--m 4] [--graphs 6] [--replays 20] [OUTDIR]

V4-Pro's overlapped region (tools/region.py) at one M, captured ``--graphs`` times for each of two modes,
alternating: ``none`` (no fp32 GEMM) and ``torch`` (torch.mm, fp32 out). Every graph is kept. Then three
passes replay every graph (median of ``--replays`` replays each): in capture order, in reverse order, and in
capture order again. A graph slow in all three passes, wherever it stands in the pass, is a slow *instance*;
slowness that follows a pass's position or time rather than the graph is the GPU's *state*. SM clocks
(``torch.cuda.clock_rate``, needs pynvml) are recorded after each graph's replays where available.

Two capture settings, each its own experiment: ``timer`` captures as tools/timing.py does (a fresh stream
from torch's pool and a private memory pool per graph); ``sglang`` as SGLang's graph runner does (one
capture stream and one memory pool shared by every graph). If only the first shows slow graphs, the timer
should capture the way SGLang does.
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


def capture(steps: region.Steps, gemm, stream=None, pool=None) -> tuple[torch.cuda.CUDAGraph, list]:
    """As timing.CudaTimer.step (warm-up twice on the capture stream, then capture): (the graph, its outputs),
    ``stream`` None: a fresh one from torch's pool; ``pool``: a shared memory pool handle (None: private)."""
    stream = stream or torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            steps.of(gemm)()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        outs = steps.of(gemm)()
    torch.cuda.synchronize()
    return graph, outs


def experiment(steps: region.Steps, torch_gemm: dict, a, stream, pool) -> dict:
    """Capture the graphs (kept), then the three passes: {"graphs": names, "passes": [...]}."""
    graphs, keep = [], []
    for i in range(a.graphs):
        for mode, gemm in (("none", None), ("torch", torch_gemm)):
            graph, outs = capture(steps, gemm, stream, pool)
            graphs.append((f"{mode}{i}", graph))
            # Every tensor the capture made lives as long as its graph: in a shared pool no later capture
            # may take their memory.
            keep.append((outs, steps.where, steps.keep))
            steps.release()
    order = list(range(len(graphs)))
    passes = []
    t0 = time.perf_counter()
    for name, idx in (("forward", order), ("reverse", order[::-1]), ("forward again", order)):
        rows = {}
        for i in idx:
            us = timing._replay_median_us(graphs[i][1], a.replays)
            rows[graphs[i][0]] = {"us": round(us, 2), "at_s": round(time.perf_counter() - t0, 3), "sm_mhz": clock()}
        passes.append({"pass": name, "graphs": rows})
    del graphs, keep
    return {"graphs": [g for g in passes[0]["graphs"]], "passes": passes}


def show(title: str, r: dict) -> None:
    print(f"{title}: step us per graph, three passes (forward, reverse, forward)")
    for g in r["graphs"]:
        print(f"  {g:8s} " + " ".join(f"{p['graphs'][g]['us']:9.2f}" for p in r["passes"]))
    for mode in ("none", "torch"):
        firsts = [r["passes"][0]["graphs"][g]["us"] for g in r["graphs"] if g.startswith(mode)]
        print(f"  {mode}: median {statistics.median(firsts):.2f}, fastest {min(firsts):.2f}, slowest {max(firsts):.2f}")


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
    results = {}
    for setting in ("timer", "sglang"):
        stream, pool = (torch.cuda.Stream(), torch.cuda.graph_pool_handle()) if setting == "sglang" else (None, None)
        results[setting] = experiment(steps, torch_gemm, a, stream, pool)
        show(f"{a.model} M={a.m} overlapped, capture setting {setting!r}", results[setting])
        torch.cuda.synchronize()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"capture_diag_{a.model}_m{a.m}.json")
    with open(path, "w") as f:
        json.dump({"model": a.model, "M": a.m, "replays": a.replays, "settings": results,
                   "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
