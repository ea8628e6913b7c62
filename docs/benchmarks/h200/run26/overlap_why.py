"""Run 26's diagnosis of the overlapped region (device): where the fp32 GEMMs' added time comes from, and whether
launching them at a higher stream priority takes any of it off.

    python3 docs/benchmarks/h200/run26/overlap_why.py OUT.json [pro:1,pro:8,flash:1]

Why: issue 15's overlapped target (<= 0.7x what torch adds, <= 2.5 us a V4-Pro layer at M 1-8) failed at
every M in every run (24a: routed 0.82-0.95x torch, 3.97-5.54 us a layer). The region's base step is about
31 us a V4-Pro layer, while its bytes take about 15 us at the H200's peak: HBM is idle most of the step, yet
the fp32 GEMMs (25.5 MB a layer on average) add 4-5.5 us. Either they sit on the critical path (the
compressor stream ends after the main stream's work and the main stream waits for it), or they slow the
main stream's kernels beside them. Nothing recorded says which.

Per (model, M), the overlapped schedule of ``tools/region.py``, one process:
0. Each fp32 shape's calls alone (routed and torch, graph replay), and the rate of ``torch.cuda._sleep``'s
   one-thread spin kernel.
1. Modes captured SGLang's way, 3 rounds interleaved (``timing.rotated_rounds``), 20 replays each; the
   median capture counts, as in ``bench --region``:
   - ``none``, ``torch``, ``routed``;
   - ``routed_hi``, ``torch_hi``: each fp32 GEMM launched from a stream of the highest priority torch gives
     (one per side stream, so that the indexer's and the compressor's GEMMs stay on separate streams),
     joined back at once. SGLang's streams all have the default priority, the lowest, so a high-priority
     launch is the only direction a plugin can move; PyTorch instantiates graphs with
     ``cudaGraphInstantiateFlagUseNodePriority``, so a kernel node keeps the priority of the stream it was
     captured from;
   - ``spin_as_routed``: each fp32 GEMM replaced by a spin as long as the routed call alone (one thread: no
     bandwidth, no SMs to speak of). What it adds is what the GEMMs' latency costs on their streams; routed
     less that is what their reads cost the other streams' kernels;
   - ``routed+spin2``: routed, then a 2 us spin on the same stream after each fp32 GEMM: near 2 us a call
     added if the compressor/indexer streams are on the critical path, near 0 if they have slack;
   - at M <= 4 with ``DOT_MODES=1``: every fp32 GEMM on one cutedsl-dot form, uncapped (``dot``) and with
     its CTAs capped (``dot_g132``, ``dot_g264``).
   Every output checked against float64 after x got fresh values.
2. Then (CUPTI stays on in a process once started, and slows later timings by 5-7%, run 22c) one more
   capture of each mode, one replay profiled: every kernel's name, stream, start, duration and grid, written
   as ``OUT.trace_<model>_m<M>.json.gz`` for analysis on the CPU, and a summary here: the span, the kernels'
   busy time, per-stream busy time, and the fp32 GEMM kernels' durations in the step (kernel names absent
   from ``none``) against those same kernels timed alone.
A priority check first: a three-kernel graph with its middle kernel captured from the high-priority stream,
read back through CUDA (``keep_graph``): each kernel node's priority attribute.
Writes JSON to argv[1] (printed as it goes).
"""

import collections
import dataclasses
import gzip
import json
import os
import statistics
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

from sglang_fp32gemm import exactness
from sglang_fp32gemm.tools import region, timing
from sglang_fp32gemm.tools.bench_measure import Bench, set_deterministic

OUT_JSON = sys.argv[1]
CASES = [(c.split(":")[0], int(c.split(":")[1])) for c in (sys.argv[2] if len(sys.argv) > 2 else
                                                           "pro:1,pro:8,flash:1").split(",")]
ROUNDS, REPLAYS = 3, 20
KEPT: list = []
#: The args of the first kernel event of each trace (the last one seen wins), as written to OUT.json.
ARG_KEYS: dict = {}
dev = torch.device("cuda")


class HighPriority:
    """``wrap(fn)``: fn launched from a high-priority stream, one per calling stream, joined back at once."""

    def __init__(self) -> None:
        self.streams: dict = {}

    def stream_for(self, cur: "torch.cuda.Stream") -> "torch.cuda.Stream":
        s = self.streams.get(cur.stream_id)
        if s is None:
            s = self.streams[cur.stream_id] = torch.cuda.Stream(priority=-10)  # torch maps it to its highest
        return s

    def wrap(self, fn):
        def hopped(x, w):
            cur = torch.cuda.current_stream()
            hi = self.stream_for(cur)
            hi.wait_stream(cur)
            with torch.cuda.stream(hi):
                out = fn(x, w)
            cur.wait_stream(hi)
            return out
        return hopped


def priority_check(hp: HighPriority) -> dict:
    """The priority attribute of each kernel node of a graph whose middle kernel was captured from a
    high-priority stream."""
    rec: dict = {}
    try:
        rec["priority_range"] = list(torch.cuda.Stream.priority_range())
    except Exception as e:
        rec["priority_range"] = f"{type(e).__name__}: {e}"
    cap = torch.cuda.Stream()
    hi = hp.stream_for(cap)
    rec["stream_priority"] = {"capture": cap.priority, "high": hi.priority}
    try:
        from cuda.bindings import driver, runtime

        a = torch.randn(4096, device=dev)
        g = torch.cuda.CUDAGraph(keep_graph=True)
        KEPT.append(g)  # never freed before exit (run 22c: a kept graph freed mid-run tripped an allocator assert)
        with torch.cuda.graph(g, stream=cap):
            b = a * 2
            hi.wait_stream(cap)
            with torch.cuda.stream(hi):
                c = b + 3
            cap.wait_stream(hi)
            d = c * 5
        g.replay()
        torch.cuda.synchronize()
        rec["result_ok"] = bool(torch.equal(d, (a * 2 + 3) * 5))

        def ok(ret):
            err, *rest = ret
            if int(err) != 0:
                raise RuntimeError(f"CUDA error {err}")
            return rest[0] if len(rest) == 1 else rest

        graph = runtime.cudaGraph_t(init_value=int(g.raw_cuda_graph()))
        _, n = ok(runtime.cudaGraphGetNodes(graph, 0))
        nodes, _ = ok(runtime.cudaGraphGetNodes(graph, n))
        prios = []
        ids = driver.CUkernelNodeAttrID
        attr = getattr(ids, "CU_KERNEL_NODE_ATTRIBUTE_PRIORITY", None) or ids.CU_LAUNCH_ATTRIBUTE_PRIORITY
        for nd in nodes:
            node = driver.CUgraphNode(init_value=int(nd))
            if ok(driver.cuGraphNodeGetType(node)) != driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                continue
            prios.append(int(ok(driver.cuGraphKernelNodeGetAttribute(node, attr)).priority))
        rec["kernel_node_priorities"] = prios  # issue order is not guaranteed; the middle one should differ
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return rec


#: The dot modes: (label, threads (0: 448, or 256 where 448 does not tile K), rows, cap): the plain form, then
#: capped at one and two CTAs an SM on a 132-SM H100/H200, with four rows a trip (more W in flight a CTA), and
#: with 128 threads (a Triton CTA's footprint).
DOT_FORMS = (("dot", 0, 1, 0), ("dot_g132", 0, 1, 132), ("dot_g264", 0, 1, 264), ("dot_r4_g132", 0, 4, 132),
             ("dot_t128_g264", 128, 1, 264))


def dot_modes(spec, m: int, shapes, kernels: dict) -> dict:
    """At M <= 4 (with DOT_MODES=1, set by overlap.sh once the ``_g`` forms passed their GPU tests): every fp32 GEMM
    on one cutedsl-dot form of ``DOT_FORMS``, uncapped (``dot``) and capped: whether the plain form (a wave's
    whole share of W in flight at once) holds up the other streams' kernels (the ``_g`` forms launch one or two CTAs an
    SM, all resident at once, with 1.9-7.6 MB of W in flight)."""
    if m > 4 or os.environ.get("DOT_MODES") != "1":
        return {}
    from sglang_fp32gemm.backends import by_name
    from sglang_fp32gemm.backends.cutedsl_dot import DotConfig

    be = by_name("cutedsl-dot")
    out = {}
    for label, threads, rows, cap in DOT_FORMS:
        threads = threads or (448 if spec.hidden % (8 * 448) == 0 else 256)
        cfg = DotConfig(m, threads, rows, True, m > 1, False, cap)
        # Where the cap caps nothing (no more blocks than it), the plain form: the same launch.
        per_n = {n: cfg if cfg.check_shape(m, n, k)[0] else dataclasses.replace(cfg, ctas_cap=0) for n, k in shapes}
        try:
            out[label] = {n: be.bind(per_n[n], dev, n, k) for n, k in shapes}
            kernels[label] = {str(n): c.name for n, c in per_n.items()}
        except Exception as e:  # a form that does not bind is a note, not the end of the run
            kernels[label] = f"{cfg.name}: {type(e).__name__}: {str(e)[:200]}"
    return out


#: Cycles of ``torch.cuda._sleep`` timed to find its rate (one thread spinning on the SM clock).
SPIN_CALIBRATION = 20000


def spin(cycles: int):
    """An fp32 GEMM replaced by a spin of one thread for ``cycles`` (``torch.cuda._sleep``): the GEMM's time on its
    stream without its reads (its consumer reads the placeholder: the fn gives None)."""
    def fn(x, w):
        torch.cuda._sleep(cycles)
        return None
    return fn


def then_spin(f, cycles: int):
    """``f``, then a spin of ``cycles`` on the same stream: how much a longer chain on that stream costs the step."""
    def fn(x, w):
        out = f(x, w)
        torch.cuda._sleep(cycles)
        return out
    return fn


def kernels_of(p) -> list:
    """[(name, stream, start us, duration us, grid)] of one profiled replay, by start."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    p.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    os.unlink(path)
    events = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    if events:  # what else CUPTI gave for a graph's kernel (graph node ids?), for the analysis
        ARG_KEYS.update(events[0].get("args", {}))
    ks = [(e.get("name", "?"), e.get("args", {}).get("stream", -1), float(e["ts"]), float(e.get("dur", 0.0)),
           e.get("args", {}).get("grid")) for e in events]
    ks.sort(key=lambda t: t[2])
    if ks:
        t0 = ks[0][2]
        ks = [(n, s, round(t - t0, 3), round(d, 3), g) for n, s, t, d, g in ks]
    return ks


def summary(ks: list, base_names: set) -> dict:
    if not ks:
        return {"kernels": 0}
    per_stream: dict = collections.defaultdict(float)
    for _, s, _, d, _ in ks:
        per_stream[s] += d
    fp32 = collections.defaultdict(list)
    for n, _, _, d, _ in ks:
        if n not in base_names:
            fp32[n[:90]].append(d)
    return {"kernels": len(ks), "span_us": round(ks[-1][2] + ks[-1][3], 1),
            "busy_us": round(sum(k[3] for k in ks), 1), "streams": len(per_stream),
            "busy_per_stream_us": {str(s): round(v, 1) for s, v in sorted(per_stream.items(), key=lambda kv: -kv[1])},
            "fp32_kernels_in_step": {n: {"calls": len(v), "median_us": round(statistics.median(v), 2),
                                         "sum_us": round(sum(v), 1)} for n, v in fp32.items()}}


def pin_pool(timer) -> None:
    """Keep one graph captured into the timer's shared pool for the whole process, as SGLang's graph runner keeps
    its graphs. Run 26b (H100): a pool whose graphs were all gone while one of its blocks lived on (a per-stream
    workspace first allocated inside a capture, on a high-priority stream) failed the next capture's
    ``use_count > 0`` assert in PyTorch's allocator, and every capture after it."""
    stream, pool = timer._capture_on()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool, stream=stream):
        torch.ones(1, device=dev).add_(1)
    KEPT.append(g)


def main() -> None:
    set_deterministic(False)  # the plugin enabled, its packaged tables
    timer = timing.CudaTimer("sglang")
    pin_pool(timer)
    bench = Bench([], dev, timer, picks=None)
    hp = HighPriority()
    out: dict = {"versions": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                              "cuda": torch.version.cuda}, "cases": {}}
    out["priority_check"] = priority_check(hp)
    print("priority check", json.dumps(out["priority_check"]), flush=True)
    for model, m in CASES:
        spec = region.MODELS[model]
        weights = region.make_weights(spec, dev)
        streams = region.Streams(dev)
        x = exactness.random_bf16(m, spec.hidden, device=dev)
        shapes = region.fp32_shapes(spec)
        tm, rt = bench.torch_fn, bench.routed
        # Each fp32 shape's calls alone (graph replay, the fast table's kernel as inside the region), and the
        # spin kernel's rate, before anything else is timed.
        alone = {}
        for n, k in shapes:
            ws = timer.weights(n, k, dev)
            with region.layer_mark(region.plan(spec, "overlapped")[-1]):
                alone[str(n)] = {"routed": round(timer.per_call(rt, x, ws, 15), 2),
                                 "torch": round(timer.per_call(tm, x, ws, 15), 2)}
            del ws
        us_per_cycle = timer.per_call(spin(SPIN_CALIBRATION), x, [x], 15) / SPIN_CALIBRATION
        from sglang_fp32gemm import routing

        with region.layer_mark(region.plan(spec, "overlapped")[-1]):  # what routed's captured calls run
            routes = {str(n): "/".join(routing.get_router().describe_call(x, torch.empty(n, k, dtype=torch.bfloat16,
                                                                                         device=dev), captured=True))
                      for n, k in shapes}

        def cycles(us: float) -> int:
            return max(1, round(us / us_per_cycle))

        modes = {"none": None, "torch": {n: tm for n, _ in shapes}, "routed": {n: rt for n, _ in shapes},
                 "routed_hi": {n: hp.wrap(rt) for n, _ in shapes}, "torch_hi": {n: hp.wrap(tm) for n, _ in shapes},
                 "spin_as_routed": {n: spin(cycles(alone[str(n)]["routed"])) for n, _ in shapes},
                 "routed+spin2": {n: then_spin(rt, cycles(2.0)) for n, _ in shapes}}
        modes.update(dot_modes(spec, m, shapes, rec_kernels := {}))
        steps = region.Steps(spec, region.plan(spec, "overlapped"), weights, x, streams)
        rec: dict = {"layers": spec.layers, "rounds_step_us": {k: [] for k in modes}, "rel_err": {}, "note": {},
                     "kernels": rec_kernels, "routes": routes, "alone_us": alone,
                     "spin_us_per_kcycle": round(1e3 * us_per_cycle, 4)}
        times = rec["rounds_step_us"]
        for name in timing.rotated_rounds(times, ROUNDS):
            try:
                t, outs = timer.step(steps.of(modes[name]), REPLAYS, refresh=lambda: exactness.refill(x))
            except Exception as e:
                rec["note"][name] = f"raised {type(e).__name__}: {str(e)[:300]}"
                del times[name]
                steps.release()
                continue
            times[name].append(round(t, 2))
            if outs:
                worst = max((exactness.measure(o, exactness.reference(xo, w)).rel_err
                             for o, (xo, w) in zip(outs, steps.operands())), default=0.0)
                rec["rel_err"][name] = max(worst, rec["rel_err"].get(name, 0.0))
            steps.release()
        med = {k: statistics.median(v) for k, v in times.items() if v}
        if "none" in med:
            rec["add_per_layer_us"] = {k: round((v - med["none"]) / spec.layers, 3) for k, v in med.items()
                                       if k != "none"}
        print(model, m, "added per layer", rec.get("add_per_layer_us"), "rel_err", rec["rel_err"], rec["note"],
              flush=True)
        # Profiles: after every timing above (CUPTI stays on).
        traces, base_names = {}, set()
        for name in modes:
            try:
                g, _ = timer.graph_of(steps.of(modes[name]))
                for _ in range(3):
                    g.replay()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as p:
                    g.replay()
                    torch.cuda.synchronize()
                ks = kernels_of(p)
                del g
            except Exception as e:
                rec["note"][f"profile {name}"] = f"raised {type(e).__name__}: {str(e)[:300]}"
                steps.release()
                continue
            steps.release()
            if name == "none":
                base_names = {k[0] for k in ks}
            traces[name] = ks
            rec.setdefault("profile", {})[name] = summary(ks, base_names)
            print(model, m, name, json.dumps(rec["profile"][name])[:900], flush=True)
        names = sorted({k[0] for ks in traces.values() for k in ks})
        idx = {n: i for i, n in enumerate(names)}
        with gzip.open(f"{OUT_JSON[:-5]}.trace_{model}_m{m}.json.gz", "wt") as f:
            json.dump({"names": names, "fields": ["name", "stream", "start_us", "dur_us", "grid"],
                       "modes": {k: [[idx[a], s, t, d, gr] for a, s, t, d, gr in v] for k, v in traces.items()}}, f)
        out["cases"][f"{model}:{m}"] = rec
        out["trace_args_example"] = {k: str(v)[:80] for k, v in ARG_KEYS.items()}
        with open(OUT_JSON, "w") as f:  # after each case: a timeout keeps the cases done
            json.dump(out, f, indent=1)
        del steps, weights
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
