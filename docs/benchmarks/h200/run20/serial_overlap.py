"""Run 20's diagnosis (device): do kernels of V4-Pro's *serial* schedule overlap in time, or run short?

    python3 docs/benchmarks/h200/run20/serial_overlap.py OUT.json [fresh|after_overlapped]

Calls C and C2 timed the serial schedule alone in a process and every column but Triton's added 3-5 us a
layer less than run 19b, which had timed the overlapped schedule first in the same process. The lead of
stop 31 (PDL launches freed from waiting) does not fit 20C's own B processes: at M=4 their routed column ran
only forms launched without PDL (Triton at N=512/1024, SGLang's warp split-K at N=2048) and still added 6.41
us a layer against the Triton column's 10.92. What the columns that moved share is that they are not
Triton's kernels (cuBLAS, SGLang's warp split-K, vLLM's ll_bf16).

This captures the serial step at M=4 with one fp32 kernel per mode, times it both capture ways, and
profiles three replays of each graph: kernel start/end times from CUPTI (do consecutive kernels overlap on
the one stream?) and each kernel's own median duration (does the N=2048 call run shorter than reading its
29.4 MB weight allows, 5.97 us at the H200's peak?). Each timed graph's outputs are checked after x got
fresh values before its last replay (a kernel launched outside the capture would leave them wrong). It
counts the graph's nodes and edges from CUDA's DOT dump (a serial step must be one chain) and keeps the
dumps. ``after_overlapped``: the
overlapped step (torch at every N) is captured and replayed first on the same capture stream and pool, as
19b's process did. Writes JSON to argv[1]; the DOT dumps beside it.
"""

import gzip
import json
import os
import re
import statistics
import sys
import tempfile

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from sglang_fp32gemm import backends, exactness
from sglang_fp32gemm.tools import region, timing, vllm_peer

M = 4
OUT_JSON = sys.argv[1]
ORDER = sys.argv[2] if len(sys.argv) > 2 else "fresh"
spec = region.MODELS["pro"]
x = exactness.random_bf16(M, spec.hidden, device="cuda")
weights = region.make_weights(spec, "cuda")
streams = region.Streams("cuda")
steps = region.Steps(spec, region.plan(spec, "serial"), weights, x, streams)
tm = timing.torch_fn("cuda")
dev = torch.device("cuda")


def bound(backend: str, form: str, n: int):
    be = backends.by_name(backend)
    return be.bind(be.parse(form), dev, n, spec.hidden)


# 20C2's rank: the PDL form added 2.82 us a call, the same form without PDL 10.43; 20C's routed column at M=4
# ran the two Triton forms at N=512/1024 and SGLang's warp split-K at N=2048 (none launched with PDL).
t512 = bound("triton", "triton_epoch_fp32_bm16_bn64_bk64_sk16_w4_s6", 512)
t1024 = bound("triton", "triton_epoch_fp32_bm16_bn64_bk64_sk14_w4_s6", 1024)
modes = {"none": None, "torch2048": {2048: tm}, "torch_all": {512: tm, 1024: tm, 2048: tm},
         "triton_pdl2048": {2048: bound("triton", "triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s6_pdl", 2048)},
         "triton2048": {2048: bound("triton", "triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s6", 2048)}}
try:
    warp = bound("cutedsl", "cutedsl_warpsplitk_o16_t8_k256_s16_b2", 2048)
    modes["warp2048"] = {2048: warp}
    modes["routed_m4"] = {512: t512, 1024: t1024, 2048: warp}
except Exception as e:  # SGLang's kernel absent: say so, time the rest
    print("warp split-K unavailable:", type(e).__name__, str(e)[:200], flush=True)
peer, why = vllm_peer.load(dev)
if peer is not None:
    modes["ll2048"] = {2048: peer.fn("splitk_2x4", M, spec.hidden)}
else:
    print("ll_bf16 unavailable:", why, flush=True)

out: dict = {"M": M, "order": ORDER, "timed": {}, "profile": {}, "graph": {}, "exact": {}}
timers = {cap: timing.CudaTimer(cap) for cap in ("sglang", "private")}
if ORDER == "after_overlapped":
    over = region.Steps(spec, region.plan(spec, "overlapped"), weights, x, streams)
    us, _ = timers["sglang"].step(over.of({512: tm, 1024: tm, 2048: tm}), 20)
    over.release()
    out["timed"]["sglang:overlapped_torch_all_first"] = round(us, 2)
    print("overlapped torch_all first", round(us, 2), flush=True)

for cap, timer in timers.items():
    for name, gemm in modes.items():
        # x gets fresh values before the last replay: an output the replays did not compute is then wrong
        us, outs = timer.step(steps.of(gemm), 20, refresh=lambda: exactness.refill(x))
        if gemm is not None:
            worst = max(exactness.measure(o, exactness.reference(xo, w)).rel_err
                        for o, (xo, w) in zip(outs, steps.operands()))
            out["exact"][f"{cap}:{name}"] = worst
        steps.release()
        out["timed"][f"{cap}:{name}"] = round(us, 2)
        print(cap, name, round(us, 2), flush=True)

EDGE = re.compile(r'^\s*"?(\w+)"?\s*->\s*"?(\w+)"?(.*)$')


def graph_shape(g: "torch.cuda.CUDAGraph", name: str) -> dict:
    """Nodes and edges of a captured graph from CUDA's DOT dump (kept beside the JSON, gzipped)."""
    with tempfile.TemporaryDirectory() as tmp:
        dot = os.path.join(tmp, "g.dot")
        g.debug_dump(dot)
        text = open(dot).read()
    with gzip.open(os.path.join(os.path.dirname(OUT_JSON) or ".", f"graph_{ORDER}_{name}.dot.gz"), "wt") as f:
        f.write(text)
    edges = [m.groups() for m in map(EDGE.match, text.splitlines()) if m]
    indeg: dict = {}
    outdeg: dict = {}
    for a, b, _ in edges:
        outdeg[a] = outdeg.get(a, 0) + 1
        indeg[b] = indeg.get(b, 0) + 1
    return {"kernel_nodes": text.count("KERNEL"), "edges": len(edges),
            "edge_attrs": sorted({a.strip()[:80] for _, _, a in edges if a.strip()})[:6],
            "max_in": max(indeg.values(), default=0), "max_out": max(outdeg.values(), default=0)}


for name, gemm in modes.items():
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    fn = steps.of(gemm)
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    g.enable_debug_mode()
    with torch.cuda.graph(g, stream=s):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    # The graph's shape: one stream must give one chain (every node one edge in and one out).
    try:
        out["graph"][name] = graph_shape(g, name)
    except Exception as e:  # the dump is a diagnosis aid: its failure must not cost the profile
        out["graph"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in p.events()
                 if e.device_type == DeviceType.CUDA), key=lambda t: t[0])
    overl = [(a[2][:60], b[2][:60], round(a[1] - b[0], 2)) for a, b in zip(ks, ks[1:]) if b[0] < a[1] - 0.05]
    names: dict = {}
    for s0, e, n in ks:
        names.setdefault(n[:90], []).append(e - s0)
    top = sorted(((statistics.median(v), len(v), n) for n, v in names.items()), reverse=True)[:8]
    out["profile"][name] = {"kernels_per_replay": len(ks) / 3, "busy_us": round(sum(e - s0 for s0, e, _ in ks), 1),
                            "wall_us": round(ks[-1][1] - ks[0][0], 1) if ks else 0,
                            "overlapping_pairs": len(overl), "overlaps_first": overl[:10],
                            "top_kernels": [(round(t, 2), c, n) for t, c, n in top]}
    print(name, json.dumps(out["graph"][name]), json.dumps(out["profile"][name])[:1300], flush=True)
    del g
    steps.release()
json.dump(out, open(OUT_JSON, "w"), indent=1)
