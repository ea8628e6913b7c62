"""Run 20, call D, second half (device): do kernels of V4-Pro's *serial* schedule overlap in time?

Calls C and C2 timed torch's N=2048 GEMM adding 4.65 us a call in the serial schedule (tune --rank serial,
20c2), below the 6.1 us it takes to read its 29.4 MB weight at the H200's 4.8 TB/s; run 16d had 13.55.
One stream and no PDL should serialize every kernel. This captures the serial step at M=4 (torch's GEMM at
N=2048 alone, then at every N; a Triton form at N=2048 with PDL and without), times it both capture ways,
and profiles three replays of each graph:
kernel start/end times from CUPTI, the pairs of consecutive kernels that overlap, and the fp32 GEMMs'
own durations. Writes JSON to argv[1].
"""

import json
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from sglang_fp32gemm import backends, exactness
from sglang_fp32gemm.tools import region, timing

M = 4
spec = region.MODELS["pro"]
x = exactness.random_bf16(M, spec.hidden, device="cuda")
weights = region.make_weights(spec, "cuda")
plans = region.plan(spec, "serial")
steps = region.Steps(spec, plans, weights, x, region.Streams("cuda"))
tm = timing.torch_fn("cuda")
tri = backends.by_name("triton")


def triton(name: str):
    return tri.bind(tri.parse(name), torch.device("cuda"), 2048, spec.hidden)


# 20C2's rank: this PDL form added 2.82 us a call; a Triton form without PDL (bk128, s4) 10.43
modes = {"none": None, "torch2048": {2048: tm}, "torch_all": {512: tm, 1024: tm, 2048: tm},
         "triton_pdl2048": {2048: triton("triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s6_pdl")},
         "triton2048": {2048: triton("triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s6")}}
out: dict = {"M": M, "timed": {}, "profile": {}}
for cap in ("sglang", "private"):
    timer = timing.CudaTimer(cap)
    for name, gemm in modes.items():
        us, _ = timer.step(steps.of(gemm), 20)
        steps.release()
        out["timed"][f"{cap}:{name}"] = round(us, 2)
        print(cap, name, round(us, 2), flush=True)

for name, gemm in modes.items():
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    fn = steps.of(gemm)
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in p.events()
                 if e.device_type == DeviceType.CUDA), key=lambda t: t[0])
    overl = [(a[2][:60], b[2][:60], round(a[1] - b[0], 2)) for a, b in zip(ks, ks[1:]) if b[0] < a[1] - 0.05]
    per_replay = len(ks) / 3
    busy = sum(e - s0 for s0, e, _ in ks)
    wall = ks[-1][1] - ks[0][0] if ks else 0
    names: dict = {}
    for s0, e, n in ks:
        names.setdefault(n[:90], []).append(e - s0)
    top = sorted(((statistics.median(v), len(v), n) for n, v in names.items()), reverse=True)[:8]
    out["profile"][name] = {"kernels_per_replay": per_replay, "busy_us": round(busy, 1), "wall_us": round(wall, 1),
                            "overlapping_pairs": len(overl), "overlaps_first": overl[:10],
                            "top_kernels": [(round(t, 2), c, n) for t, c, n in top]}
    print(name, json.dumps(out["profile"][name])[:1500], flush=True)
    del g
    steps.release()
json.dump(out, open(sys.argv[1], "w"), indent=1)
