"""The fast NVIDIA backends on a real GPU, through ``bind()`` (skipped elsewhere).

``triton-det`` (ticket kernel), ``triton`` (epoch kernel) and ``cutedsl``
(SGLang's CuTe-DSL warp split-K), the Triton kernels with and without PDL,
at the DSv4 shapes: K 7168 and 4096, N 512,
1024, 2048 and 2560, M 1..32. Reference in float64, fresh random inputs each
check, the caching allocator's block for ``out`` poisoned with NaN before
each call so that unwritten elements show.
"""

from __future__ import annotations

import collections

import time

import pytest
import torch

from sglang_fp32gemm.backends import triton as te
from sglang_fp32gemm.backends import triton_det as ts
from sglang_fp32gemm.backends.base import NotReadyInCapture
from sglang_fp32gemm.backends.cutedsl_warp import CuteDSLWarpBackend
from sglang_fp32gemm.exactness import measure, reference

cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
    reason="needs an NVIDIA GPU",
)
pytestmark = cuda

KS = (7168, 4096)
NS = (512, 1024, 2048, 2560)
MS = (1, 2, 5, 8, 16, 31, 32)
K = 7168

_BACKENDS: dict[str, object] = {}
_BOUND: dict[tuple, object] = {}


def backend(which: str):
    if which not in _BACKENDS:
        _BACKENDS[which] = {"triton-det": ts.TritonSplitKBackend, "triton": te.TritonEpochBackend,
                            "cutedsl": CuteDSLWarpBackend}[which]()
    be = _BACKENDS[which]
    ok, why = be.available()
    if not ok:
        pytest.skip(f"{which}: {why}")
    return be


def config_for(be, m: int, n: int, k: int):
    """The first tuner candidate for this shape's M bucket (its default for cutedsl)."""
    cands = be.candidates(m, n, k)
    assert cands, (be.name, m, n, k)
    return cands[0]


def bound(which: str, m: int, n: int, k: int):
    be = backend(which)
    cfg = config_for(be, m, n, k)
    key = (which, cfg, n, k)
    if key not in _BOUND:
        _BOUND[key] = be.bind(cfg, torch.device("cuda"), n, k)
    return be, cfg, _BOUND[key]


def rnd(*shape):
    return torch.randn(*shape, device="cuda").bfloat16()


def captured(warm, body):
    """(graph, body's result, stream): ``warm()`` runs eagerly on a new stream (so its buffers exist
    there), then ``body()`` is captured on that stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        warm()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        result = body()
    return g, result, s


def replay_checked(g, outs, times, inputs, expect):
    """``times`` replays of ``g``; before each, ``outs`` poisoned with NaN and ``inputs`` refilled with fresh
    values; after each, ``outs[i]`` checked against the product of ``expect(i)`` = (x, w)."""
    for _ in range(times):
        for t in outs:
            t.fill_(float("nan"))
        for t in inputs:
            t.copy_(torch.randn_like(t, dtype=torch.float32).bfloat16())
        g.replay()
        torch.cuda.synchronize()
        for i, o in enumerate(outs):
            check_exact(o, *expect(i))


def poisoned_call(fn, x, w):
    """Call ``fn`` right after freeing a NaN-filled block of the size ``out`` will take."""
    m, n = x.shape[0], w.shape[0]
    p = torch.full((m, n), float("nan"), device="cuda")
    del p
    return fn(x, w)


def check_exact(out, x, w):
    ref = reference(x, w)
    assert out.dtype == torch.float32 and tuple(out.shape) == tuple(ref.shape)
    r = measure(out, ref)
    assert r.finite, "unwritten or non-finite output"
    assert r.ok, r


@pytest.mark.parametrize("which", ["triton-det", "triton", "cutedsl"])
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("n", NS)
def test_bound_kernels_are_fp32_exact_on_dsv4_shapes(which, n, k):
    for m in MS:
        _, cfg, fn = bound(which, m, n, k)
        for layout in ("contiguous", "row stride K+64", "row stride K+8"):
            if layout == "contiguous":
                x = rnd(m, k)
            else:
                pad = 64 if "64" in layout else 8
                x = rnd(m, k + pad)[:, :k]
            w = rnd(n, k)
            out = poisoned_call(fn, x, w)
            torch.cuda.synchronize()
            check_exact(out, x, w)


@pytest.mark.parametrize("which", ["triton-det", "triton"])
def test_triton_bound_kernels_take_the_fast_launch(which):
    _, cfg, fn = bound(which, 8, 1024, K)
    assert fn.launcher.fast, fn.launcher.reason
    # Triton's C launcher called directly (triton_launch.direct_launcher): the Triton this project runs on
    # the GPU (3.6) has a launcher whose __call__ only passes arguments on.
    assert fn.launcher.direct, fn.launcher.direct_reason


@pytest.mark.parametrize("which", ["triton-det", "cutedsl"])
@pytest.mark.parametrize("n", NS)
def test_deterministic_backends_repeat_bitwise(which, n):
    be = backend(which)
    for m in (1, 8, 32):
        _, cfg, fn = bound(which, m, n, K)
        assert be.deterministic(cfg)
        x, w = rnd(m, K), rnd(n, K)
        first = fn(x, w)
        for _ in range(20):
            assert torch.equal(first, poisoned_call(fn, x, w))


def test_epoch_kernel_50_calls_in_a_row_on_one_stream():
    be = backend("triton")
    cfg = te.EpochConfig(16, 64, 128, 14, 4, 4)
    fn = be.bind(cfg, torch.device("cuda"), 1024, K)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    outs = []
    with torch.cuda.stream(s):
        xs = [rnd(8, K) for _ in range(5)]
        ws = [rnd(1024, K) for _ in range(5)]
        for i in range(50):
            outs.append(fn(xs[i % 5], ws[i % 5]))
    torch.cuda.synchronize()
    for i, o in enumerate(outs):
        check_exact(o, xs[i % 5], ws[i % 5])
    sync = fn.buffers.by_stream[s.cuda_stream]
    tiles = cfg.tiles(8, 1024)
    assert (sync.scratch[:tiles] == 50).all(), sync.scratch[:tiles]
    assert (sync.counters[:tiles * cfg.split_k] == 50).all()
    assert (sync.scratch[tiles:] == 0).all() and (sync.counters[tiles * cfg.split_k:] == 0).all()


def test_epoch_kernel_under_cuda_graph_replay_20_times():
    be = backend("triton")
    cfg = te.EpochConfig(16, 64, 64, 16, 4, 4)
    fn = be.bind(cfg, torch.device("cuda"), 1024, K)
    xs = [rnd(5, K) for _ in range(4)]
    ws = [rnd(1024, K) for _ in range(4)]
    # the eager call allocates this stream's flags
    g, outs, s = captured(lambda: fn(xs[0], ws[0]), lambda: [fn(xs[i], ws[i]) for i in range(4)])
    replay_checked(g, outs, 20, xs, lambda i: (xs[i], ws[i]))
    sync = fn.buffers.by_stream[s.cuda_stream]
    # 1 eager call + 4 captured calls (capture does not run them) x 20 replays
    assert (sync.scratch[:cfg.tiles(5, 1024)] == 1 + 4 * 20).all(), sync.scratch


@pytest.mark.parametrize("which", ["triton-det", "triton"])
def test_two_streams_get_their_own_buffers(which):
    _, cfg, fn = bound(which, 8, 2048, K)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    xs = [rnd(8, K) for _ in range(2)]
    ws = [rnd(2048, K) for _ in range(2)]
    outs: list = [[], []]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(10):
        for j, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[j].append(fn(xs[j], ws[j]))
    torch.cuda.synchronize()
    for j in range(2):
        for o in outs[j]:
            check_exact(o, xs[j], ws[j])


@pytest.mark.parametrize("which", ["triton-det", "triton", "cutedsl"])
def test_first_call_on_a_new_stream_during_capture_raises(which):
    # A fresh backend: torch's stream pool hands out raw streams again, and
    # triton-det shares workspaces per raw stream across its bound kernels.
    be = type(backend(which))()
    cfg = config_for(be, 4, 512, K)
    fn = be.bind(cfg, torch.device("cuda"), 512, K)
    x, w = rnd(4, K), rnd(512, K)
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError) as e:
        with torch.cuda.graph(g, stream=s):
            fn(x, w)
    # Ours, not some other capture error (ending the broken capture may raise
    # its own error, with ours as the context).
    assert isinstance(e.value, NotReadyInCapture) or isinstance(e.value.__context__, NotReadyInCapture), e.value


@pytest.mark.parametrize("which", ["triton-det", "triton", "cutedsl"])
def test_bound_kernels_under_cuda_graph_replay_equal_the_product(which):
    n = 1024
    _, cfg, fn = bound(which, 8, n, K)
    xs = [rnd(8, K) for _ in range(4)]
    ws = [rnd(n, K) for _ in range(4)]
    g, outs, _ = captured(lambda: fn(xs[0], ws[0]), lambda: [fn(xs[i], ws[i]) for i in range(4)])
    replay_checked(g, outs, 3, [], lambda i: (xs[i], ws[i]))


@pytest.mark.parametrize("which", ["triton-det", "triton"])
def test_fast_launch_costs_less_host_time_than_the_ordinary_one(which):
    """Host time per eager call (printed with -s); the fast path must beat kernel[grid](...)."""
    _, cfg, fn = bound(which, 4, 1024, K)
    x, w = rnd(4, K), rnd(1024, K)
    xs = rnd(4, K + 8)[:, :K]  # row stride not a multiple of 16: the ordinary launch

    def host_us(f, a):
        for _ in range(20):
            f(a, w)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(200):
            f(a, w)
        dt = (time.perf_counter() - t) / 200 * 1e6
        torch.cuda.synchronize()
        return dt

    mm = host_us(lambda a, b: torch.mm(a, b.t(), out_dtype=torch.float32), x)
    fast, slow = host_us(fn, x), host_us(fn, xs)
    print(f"\n{which}: host us per call: torch.mm {mm:.1f}, fast {fast:.1f}, ordinary {slow:.1f}")
    assert fast < slow


@pytest.mark.parametrize("which", ["triton", "triton-det"])
def test_tuner_candidates_with_their_pdl_forms_are_exact(which):
    be = backend(which)
    cands = be.candidates(4, 1024, K)
    pdl = [c for c in cands if c.pdl]
    if torch.cuda.get_device_capability()[0] >= 9:
        assert pdl
    for cfg in cands[:3] + pdl[:3]:
        fn = be.bind(cfg, torch.device("cuda"), 1024, K)
        x, w = rnd(4, K), rnd(1024, K)
        out = poisoned_call(fn, x, w)
        torch.cuda.synchronize()
        check_exact(out, x, w)


PDL_CONFIGS = [("triton", te.EpochConfig(16, 64, 128, 14, 4, 4, True)),
               ("triton", te.EpochConfig(16, 64, 256, 1, 4, 4, True)),
               ("triton-det", ts.SplitKConfig(16, 32, 128, 7, 4, 4, True))]


@pytest.mark.parametrize("which,cfg", PDL_CONFIGS, ids=[c.name for _, c in PDL_CONFIGS])
def test_pdl_kernels_read_what_the_kernel_before_them_wrote(which, cfg):
    """Under graph replay, each PDL call's x is written by the torch kernel right before it.

    A PDL kernel may start before its predecessor ends: it must wait
    (gdc_wait) before it reads x or writes out. 12 calls, 5 replays, x
    changed before every replay.
    """
    be = backend(which)
    n, m = 1024, 4
    fn = be.bind(cfg, torch.device("cuda"), n, K)
    assert fn.launcher.fast and fn.launcher.options.get("launch_pdl") is True, fn.launcher.reason
    srcs = [rnd(m, K) for _ in range(12)]
    ws = [rnd(n, K) for _ in range(4)]
    xs, outs = [], []

    def body():
        for i in range(12):
            xs.append((srcs[i].float() * 2.0).bfloat16())  # the kernel right before: writes x
            outs.append(fn(xs[i], ws[i % 4]))

    g, _, _ = captured(lambda: fn(srcs[0], ws[0]), body)
    replay_checked(g, outs, 5, srcs, lambda i: ((srcs[i].float() * 2.0).bfloat16(), ws[i % 4]))


def test_raw_launch_helpers_still_work():
    """``launch`` (tests, tuner): explicit buffers, ordinary launches."""
    cfg = ts.SplitKConfig(16, 32, 128, 7, 4, 4)
    x, w = rnd(3, K), rnd(512, K)
    out = torch.full((3, 512), float("nan"), device="cuda")
    ws = torch.full((cfg.workspace_floats(3, 512),), float("nan"), device="cuda")
    cnt = torch.zeros(cfg.counters(3, 512), dtype=torch.int32, device="cuda")
    ts.launch(x, w, cfg, out, ws, cnt)
    check_exact(out, x, w)
    assert (cnt == 0).all()
    ecfg = te.EpochConfig(16, 64, 128, 14, 4, 4)
    flags, counters = te.new_sync_buffers(ecfg, 1024, torch.device("cuda"))
    x, w = rnd(3, K), rnd(1024, K)
    out = torch.full((3, 1024), float("nan"), device="cuda")
    te.launch(x, w, ecfg, out, flags, counters)
    check_exact(out, x, w)


@cuda
def test_routed_decode_sequence_under_graph_replay_equals_eager(monkeypatch):
    """61 compressor-like calls (HCA/CSA/indexer/fused, M=4) through the plugin."""
    monkeypatch.setenv("SGLANG_ENABLE_FLYDSL_FP32_GEMM", "1")
    from sglang_fp32gemm import routing, settings
    from sglang_fp32gemm.layers import LayerInfo

    settings.reload()
    router = routing.reset_router()
    try:
        shapes = [(1024, "hca"), (2048, "csa"), (512, "indexer"), (2560, "fused")]
        ws = {n: torch.randn(n, K, device="cuda").bfloat16() for n, _ in shapes}
        x = torch.randn(4, K, device="cuda").bfloat16()
        seq = [shapes[i % 4] for i in range(61)]

        def step():
            return [routing.linear_bf16_fp32(x, ws[n], layer=LayerInfo(i, kind)) for i, (n, kind) in enumerate(seq)]

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            eager = step()  # resolves, binds and probes every route before capture
        torch.cuda.synchronize()
        for o, (n, _) in zip(eager, seq):
            check_exact(o, x, ws[n])
        routes = {n: router.describe_call(x, ws[n])[0] for n in ws}
        assert all(r != "torch" for r in routes.values()), routes
        router.reset_counters()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            outs = step()
        # Every captured call went where the table sends captured calls: a kernel, or torch where the row
        # is torch (torch wins in SGLang's decode region there); none to a fallback.
        counted = router.counters()
        expected = collections.Counter(router.decide(x, ws[n], captured=True).key for n, _ in seq)
        assert counted == dict(expected), (counted, expected)
        assert all(r != "torch" or "libtype torch is served by torch" in d for r, d in counted), counted
        assert sum(r != "torch" for r, _ in counted) >= 1, counted
        for _ in range(3):
            x.copy_(torch.randn_like(x))
            g.replay()
            torch.cuda.synchronize()
            for o, (n, _) in zip(outs, seq):
                check_exact(o, x, ws[n])
        assert len(eager) == 61
    finally:
        monkeypatch.delenv("SGLANG_ENABLE_FLYDSL_FP32_GEMM")
        settings.reload()
        routing.reset_router()


@cuda
@pytest.mark.parametrize("resolve_on", ["default stream", "capture stream"])
def test_a_graph_runs_the_rows_kernel_on_a_stream_whose_eager_calls_the_eager_table_sent_elsewhere(resolve_on):
    """The eager table names another kernel for the shape, and the route was resolved (and its kernel
    warmed) on another stream than the one the graph is captured on, as SGLang's side streams are. The
    warm-up's eager calls run the eager row's kernel and prepare the row's for that stream, so that every
    captured call runs the row's kernel (H200 run 13a's joint check fell back to torch without that)."""
    from fakes.fake_backends import fake_table, make_config
    from sglang_fp32gemm.backends import default_backends
    from sglang_fp32gemm.routing import Router
    from sglang_fp32gemm.table import device_key

    m, n, k = 4, 1024, 4096
    row_kernel = "triton_epoch_fp32_bm16_bn64_bk64_sk32_w4_s3"
    eager_kernel = "triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s4"
    key = device_key(torch.device("cuda"))
    table = fake_table([(m, n, k, row_kernel)], gfx=key.gfx, cu_num=key.cu_num)
    eager_table = fake_table([(m, n, k, eager_kernel)], name="fake_eager.csv", gfx=key.gfx, cu_num=key.cu_num)
    r = Router(make_config(table, eager_table=eager_table), default_backends())
    x, w = rnd(m, k), rnd(n, k)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    if resolve_on == "default stream":
        check_exact(r.call(x, w), x, w)
        torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for _ in range(2):  # the warm-up before capture, as SGLang's graph runner does
            check_exact(r.call(x, w), x, w)
    torch.cuda.synchronize()
    assert r.counters().get(("triton", eager_kernel), 0) >= 2, r.counters()
    r.reset_counters()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = r.call(x, w)
    assert r.counters() == {("triton", row_kernel): 1}, r.counters()
    for _ in range(3):
        x.copy_(rnd(m, k))
        g.replay()
        torch.cuda.synchronize()
        check_exact(out, x, w)


@pytest.mark.parametrize("cfg", [te.EpochConfig(16, 64, 64, 8, 4, 4), te.EpochConfig(16, 64, 64, 16, 4, 6, pdl=True),
                                 te.EpochConfig(32, 64, 128, 4, 4, 4)])
def test_the_pair_form_under_graph_replay_gives_both_products(cfg):
    """DeepSeek-V4's ratio-4 pair (N=512 and N=2048 on one x) in one launch of the epoch pair kernel, captured
    and replayed with fresh x each time: both outputs exact (each filled with NaN before each replay)."""
    n, n2 = 512, 2048
    fn = te.TritonEpochBackend().bind_pair(cfg, torch.device("cuda"), n, n2, K)
    assert fn.launcher.fast, fn.launcher.reason  # eager pair calls take Triton's C launcher, as single ones do
    w, w2 = torch.randn(n, K, device="cuda").bfloat16(), torch.randn(n2, K, device="cuda").bfloat16()
    m = 5 if cfg.bm == 16 else 31
    x = torch.randn(m, K, device="cuda").bfloat16()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(x, w, w2)  # this stream's flag buffers, outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out, out2 = fn(x, w, w2)
    for _ in range(5):
        x.copy_(torch.randn(m, K, device="cuda").bfloat16())
        out.fill_(float("nan"))
        out2.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        for o, ww in ((out, w), (out2, w2)):
            r = measure(o, reference(x, ww))
            assert r.finite and r.ok and r.rel_err <= 1e-5, r
