"""Run 22d (device): is the serial step's "fast" state a property of a graph, and of which part of it?

    python3 docs/benchmarks/h200/run22/serial_gaps.py OUT.json

Run 22c (why.sh) read the graphs back: every serial step is one chain (one root, one edge into each node);
the programmatic edges are cuBLAS's GEMM -> its split-K reduce, and torch's multiply -> a PDL-launched GEMM;
no compress kernel read a stale output. Under CUPTI, the SGLang-way graph with torch at N=2048 spent 0.14 us
between kernels where the `none` graph and the private-way graph of the same kernels spent 0.54: the step's
gaps, not the GEMM, made it fast. Its timings after the first CUPTI profile were all slower (CUPTI stays on).

This captures, SGLang's way (one stream, one pool), in this order: none, torch2048, triton2048, ll2048, none
again, triton_pdl2048, none a third time; keeps every graph; times them round-robin (events, 20 replays, four
rounds, before any profiling); then profiles each graph once: busy (sum of kernel durations) and wall per replay,
the mean gap between kernels, and the same for the kernels that are not fp32 GEMMs. Writes JSON to argv[1].
"""

import json
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from serial_setup import M, modes, warmed
from sglang_fp32gemm.tools import timing

m = modes()
order = [("none1", None), ("torch2048", m["torch2048"]), ("triton2048", m["triton2048"])]
order += [("ll2048", m["ll2048"])] if "ll2048" in m else []
order += [("none2", None), ("triton_pdl2048", m["triton_pdl2048"]), ("none3", None)]

stream, pool = torch.cuda.Stream(), torch.cuda.graph_pool_handle()
graphs = {}
for name, gemm in order:
    steps, fn = warmed(gemm, stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool, stream=stream):
        fn()
    steps.release()
    graphs[name] = g
    print("captured", name, flush=True)

timed: dict = {name: [] for name in graphs}
for rnd in range(4):
    names = list(graphs)
    names = names[rnd % len(names):] + names[:rnd % len(names)]
    for name in names:
        timed[name].append(round(timing._replay_median_us(graphs[name], 20), 2))
out: dict = {"M": M, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "timed": timed,
             "median": {n: statistics.median(v) for n, v in timed.items()}, "profile": {}}
print(json.dumps(out["median"]), flush=True)

GEMM_NAMES = ("nvjet_sm90_tss", "epoch_splitk", "ll_bf16", "splitKreduce_kernelILi32ELi16Eiffff",
              "splitKreduce_kernel<32, 16, int, float, float")
for name, g in graphs.items():
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in p.events()
                 if e.device_type == DeviceType.CUDA), key=lambda t: t[0])
    per = len(ks) // 3
    reps = [ks[i * per:(i + 1) * per] for i in range(3)]
    rec = {"kernels": per}
    walls, busys, gaps, base_busy = [], [], [], []
    for r in reps:
        walls.append(r[-1][1] - r[0][0])
        busys.append(sum(e - s for s, e, _ in r))
        gaps.append(statistics.mean(max(0.0, b[0] - a[1]) for a, b in zip(r, r[1:])))
        base_busy.append(sum(e - s for s, e, n in r if not any(k in n for k in GEMM_NAMES)))
    rec.update(wall_us=round(statistics.median(walls), 1), busy_us=round(statistics.median(busys), 1),
               mean_gap_us=round(statistics.median(gaps), 3),
               other_kernels_busy_us=round(statistics.median(base_busy), 1))
    out["profile"][name] = rec
    print("profile", name, json.dumps(rec), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
