"""Run 22's diagnosis (device): why the serial step adds less than its calls alone (the SUSPECT case).

    python3 docs/benchmarks/h200/run22/serial_why.py OUT.json [fresh|after_overlapped]

What run 20's serial_overlap.py found (run 22a, H100, M=4): captured SGLang's way (one capture stream and
one pool) in a fresh process, the serial step with a PDL-launched N=2048 kernel (Triton's ``_pdl`` form,
vLLM's ll_bf16) or with torch's cuBLAS kernels added ~9 us a call less than the same step captured on a
fresh stream with a private pool, or captured after an overlapped step; non-PDL kernels (Triton, SGLang's
warp split-K) added the same both ways. 5.8 us for a 29.4 MB weight is past the H100's peak bandwidth, so the
kernel must run beside others. Its profile was of a private-way graph, where nothing overlapped.

This profiles the graphs the timer times. Per mode (M=4, V4-Pro, serial; one fp32 kernel per mode at N=2048,
or torch at every N), captured each way in turn:
- the step's median replay time;
- the captured graph's shape, read back through CUDA (``keep_graph``, ``cudaGraphGetEdges``): nodes,
  edges by type and port (programmatic ones are PDL), roots, and the kernels at each end of every
  programmatic edge;
- the kernels' start and end times (CUPTI, three replays): which kernels start before an earlier one ends,
  by how much, and which;
- a consumer check: each compressor's compress kernel (0.5 x its GEMM's output) read back after the last
  replay, with x refreshed before it: a compress that ran before its GEMM finished reads a stale output;
- a producer check (modes ``*_dep``): the GEMM reads a copy of x made by the kernel just before it, so that a
  GEMM that starts before its producer ends reads the last replay's x and fails the exactness check.
Writes JSON to argv[1].
"""

import json
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from serial_setup import M, spec, streams, tm, warmed, weights, x
from serial_setup import modes as all_modes
from sglang_fp32gemm import exactness
from sglang_fp32gemm.tools import region, timing

OUT_JSON = sys.argv[1]
ORDER = sys.argv[2] if len(sys.argv) > 2 else "fresh"
modes = all_modes()


def after_copy(fn):
    """``fn`` on a copy of x made by the kernel just before it: a GEMM that starts before that copy ends (in SGLang:
    before the kernel that writes its x) reads the last replay's x, which the check after refreshing x catches."""
    return lambda a, w: fn(a.clone(), w)


for name in ("torch2048", "triton_pdl2048", "ll2048", "dot_pdl2048"):
    if name in modes:
        modes[name + "_dep"] = {n: after_copy(f) for n, f in modes[name].items()}


def graph_shape(g: "torch.cuda.CUDAGraph") -> dict:
    """Nodes, edges by (type, from port), roots and the kernels at both ends of programmatic edges."""
    from cuda.bindings import driver, runtime

    def ok(ret):
        err, *rest = ret
        if int(err) != 0:
            raise RuntimeError(f"CUDA error {err}")
        return rest[0] if len(rest) == 1 else rest

    graph = runtime.cudaGraph_t(init_value=int(g.raw_cuda_graph()))
    _, n = ok(runtime.cudaGraphGetNodes(graph, 0))
    nodes, _ = ok(runtime.cudaGraphGetNodes(graph, n))
    frm, to, data, ne = ok(runtime.cudaGraphGetEdges(graph, 0))
    frm, to, data, ne = ok(runtime.cudaGraphGetEdges(graph, ne))
    idx = {int(nd): i for i, nd in enumerate(nodes)}

    def name(nd) -> str:
        try:
            p = ok(driver.cuGraphKernelNodeGetParams(driver.CUgraphNode(init_value=int(nd))))
            return ok(driver.cuFuncGetName(p.func)).decode()[:80]
        except Exception as e:  # not a kernel node, or no name
            return f"?{type(e).__name__}"

    kinds: dict = {}
    indeg = [0] * len(nodes)
    prog = []
    for a, b, d in zip(frm, to, data):
        key = f"type{int(d.type)}_port{int(d.from_port)}"
        kinds[key] = kinds.get(key, 0) + 1
        indeg[idx[int(b)]] += 1
        if int(d.type) != 0 or int(d.from_port) != 0:
            prog.append((name(a), name(b), key))
    pairs: dict = {}
    for p in prog:
        pairs[p] = pairs.get(p, 0) + 1
    return {"nodes": len(nodes), "edges": int(ne), "edge_kinds": kinds, "roots": indeg.count(0),
            "max_in": max(indeg, default=0),
            "programmatic": [[a, b, k, c] for (a, b, k), c in sorted(pairs.items(), key=lambda t: -t[1])[:12]]}


def timeline(p) -> dict:
    """Kernels that start before an earlier kernel of the same replay ends: count, the top overlaps."""
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in p.events()
                 if e.device_type == DeviceType.CUDA), key=lambda t: t[0])
    over, end, last = [], float("-inf"), ""
    for s0, e, n in ks:
        if s0 < end - 0.05:
            over.append((round(end - s0, 2), n[:70], last[:70]))
        if e > end:
            end, last = e, n
    durs: dict = {}
    for s0, e, n in ks:
        durs.setdefault(n[:80], []).append(e - s0)
    agg: dict = {}
    for us, n, prev in over:
        a = agg.setdefault((n, prev), [0, 0.0])
        a[0] += 1
        a[1] += us
    return {"kernels_per_replay": len(ks) / 3, "busy_us": round(sum(e - s0 for s0, e, _ in ks) / 3, 1),
            "wall_us": round((ks[-1][1] - ks[0][0]) / 3, 1) if ks else 0, "overlaps_per_replay": len(over) / 3,
            "overlap_us_per_replay": round(sum(o[0] for o in over) / 3, 1),
            "overlaps_by_pair": [[n, prev, c // 3, round(t / c, 2)] for (n, prev), (c, t) in
                                 sorted(agg.items(), key=lambda kv: -kv[1][1])[:10]],
            "top_kernels": [(round(statistics.median(v), 2), len(v) // 3, n) for n, v in
                            sorted(durs.items(), key=lambda kv: -statistics.median(kv[1]))[:6]]}


def consumers_ok(keep) -> dict:
    """Each compress output against 0.5 x its GEMM's output, after the last replay (bitwise: one multiply)."""
    bad = checked = 0
    # keep holds every tensor a step made, in issue order: a GEMM's output is followed by its compress.
    for a, b in zip(keep, keep[1:]):
        if a.dtype == torch.float32 and b.dtype == torch.float32 and a.shape == b.shape and a.ndim == 2:
            checked += 1
            bad += int(not torch.equal(b, a * 0.5))
    return {"checked": checked, "stale": bad}


out: dict = {"M": M, "order": ORDER, "versions": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()},
             "modes": {}}
timer = timing.CudaTimer("sglang")
if ORDER == "after_overlapped":
    over = region.Steps(spec, region.plan(spec, "overlapped"), weights, x, streams)
    us, _ = timer.step(over.of({512: tm, 1024: tm, 2048: tm}), 20)
    over.release()
    out["overlapped_torch_all_first_us"] = round(us, 2)

for way in ("sglang", "private"):
    for name, gemm in modes.items():
        rec: dict = {}
        try:
            if way == "sglang":
                stream, pool = timer._capture_on()
            else:
                stream, pool = torch.cuda.Stream(), None
            steps, fn = warmed(gemm, stream)
            try:
                g = torch.cuda.CUDAGraph(keep_graph=True)
            except TypeError:  # an older torch: no graph to read back
                g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool, stream=stream):
                outs = fn()
            rec["step_us"] = round(timing._replay_median_us(g, 20), 2)
            try:
                rec["graph"] = graph_shape(g)
            except Exception as e:  # the shape is a diagnosis aid: its failure must not cost the rest
                rec["graph"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(3):
                    g.replay()
                torch.cuda.synchronize()
            rec["timeline"] = timeline(p)
            exactness.refill(x)
            g.replay()
            torch.cuda.synchronize()
            if gemm is not None:
                rec["rel_err"] = max(exactness.measure(o, exactness.reference(xo, w)).rel_err
                                     for o, (xo, w) in zip(outs, steps.operands()))
            rec["consumers"] = consumers_ok(steps.keep)
            del g
            steps.release()
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        out["modes"][f"{way}:{name}"] = rec
        print(way, name, json.dumps(rec)[:1500], flush=True)
json.dump(out, open(OUT_JSON, "w"), indent=1)
