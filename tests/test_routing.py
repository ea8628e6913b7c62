"""The routing decision and the routed call, with fake fast backends on CPU tensors."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from conftest import assert_fp32_close
from fakes.fake_aiter import install_fake_aiter
from fakes.fake_backends import (Bf16RoundingFake, DecliningFake, ExactFake, RaisingFake, SlowPrepareFake,
                                 UnavailableFake, enabled_settings, make_router)
from sglang_fp32gemm import routing
from sglang_fp32gemm import settings as S
from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.layers import LayerInfo, LayerSelection
from sglang_fp32gemm.table import DeviceKey, TunedTable

N, K = 32, 64
SHAPES = [(m, N, K) for m in (1, 2, 4, 8, 16, 32)]
ROUTING_LOG = "sglang_fp32gemm.routing"


def _warnings(caplog):
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == ROUTING_LOG]


# -- disabled ------------------------------------------------------------------
def test_disabled_plugin_returns_the_original_result_exactly(make_bf16):
    x, w = make_bf16(8, K), make_bf16(N, K)
    original = torch.mm(x.float(), w.float().t()) + 0.25  # any result: it must come back untouched
    r = routing.get_router()
    assert not r.enabled
    out = routing.linear_bf16_fp32(x, w, fallback=lambda: original)
    assert out is original and torch.equal(out, original)
    # Without a fallback, the default is torch's exact fp32 product.
    assert torch.equal(routing.linear_bf16_fp32(x, w), torch.mm(x.float(), w.float().t()))
    assert r.counters() == {("torch", "disabled"): 2}


def test_disabled_router_never_asks_a_fast_backend(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES, enabled=False)
    x, w = make_bf16(8, K), make_bf16(N, K)
    sentinel = torch.full((8, N), 3.0)
    assert r.call(x, w, fallback=lambda: sentinel) is sentinel
    assert (fake.runs, fake.supports_calls, fake.prepares) == (0, 0, 0)


def test_enable_variable_turns_the_process_router_on(monkeypatch, make_bf16):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    S.reload()
    r = routing.reset_router()
    x, w = make_bf16(4, K), make_bf16(N, K)
    out = routing.linear_bf16_fp32(x, w)
    assert r.enabled
    assert_fp32_close(out, x, w)
    assert r.counters() == {("torch", "cpu tensors"): 1}  # the real router keeps CPU on torch


# -- fallbacks -------------------------------------------------------------------
def _cases(make_bf16):
    x_wide = make_bf16(8, 2 * K)
    wt = make_bf16(K, N)
    return {
        "M=0": (make_bf16(0, K), make_bf16(N, K), (0, N), "M outside the tables"),
        "3-D": (make_bf16(2, 4, K), make_bf16(N, K), (2, 4, N), "not a 2-D call"),
        "non-contiguous x": (x_wide[:, ::2], make_bf16(N, K), (8, N), None),
        "transposed w view": (make_bf16(8, K), wt.t(), (8, N), None),
        "fp16": (make_bf16(8, K, dtype=torch.float16), make_bf16(N, K, dtype=torch.float16), (8, N),
                 "dtypes torch.float16/torch.float16, tables hold bf16 x bf16"),
        "fp32 weight": (make_bf16(8, K), make_bf16(N, K, dtype=torch.float32), (8, N),
                        "dtypes torch.bfloat16/torch.float32, tables hold bf16 x bf16"),
        "M>256": (make_bf16(300, K), make_bf16(N, K), (300, N), "M outside the tables"),
        "untuned M": (make_bf16(40, K), make_bf16(N, K), (40, N), "no tuned row"),
    }


@pytest.mark.parametrize("case", ["M=0", "3-D", "non-contiguous x", "transposed w view", "fp16", "fp32 weight",
                                  "M>256", "untuned M"])
def test_ineligible_calls_fall_back_with_the_right_shape_and_dtype(case, make_bf16):
    x, w, shape, reason = _cases(make_bf16)[case]
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    out = r.call(x, w)
    assert out.dtype == torch.float32 and tuple(out.shape) == shape
    x2 = x.reshape(-1, K)
    assert_fp32_close(out.reshape(-1, N), x2, w)
    assert fake.runs == 0
    (route, why), = r.counters()
    assert route == "torch"
    if reason is not None:
        assert why == reason
    else:  # the backend's own refusal, after the table matched
        assert "needs contiguous" in why


def test_cpu_inputs_fall_back_on_the_real_router(make_bf16):
    fake = ExactFake(devices=("cpu", "cuda"))
    r = routing.Router(enabled_settings(), TunedTable.load(), {"triton": [fake]})
    x, w = make_bf16(8, 7168), make_bf16(512, 7168)  # an sm90 row's shape
    out = r.call(x, w)
    assert_fp32_close(out, x, w)
    assert fake.supports_calls == 0 and r.counters() == {("torch", "cpu tensors"): 1}
    assert r.decide(x, w).reason == "cpu tensors"


def test_fallback_is_called_only_when_no_backend_takes_the_call(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    calls = []
    x, w = make_bf16(8, K), make_bf16(N, K)
    out = r.call(x, w, fallback=lambda: calls.append(1) or torch.zeros(8, N))
    assert calls == [] and fake.runs == 2  # probe + call
    assert_fp32_close(out, x, w)


# -- the fast path -----------------------------------------------------------------
@pytest.mark.parametrize("m, bucket", [(1, 1), (3, 16), (8, 8), (17, 32), (32, 32)])
def test_fast_backend_takes_tuned_shapes(m, bucket, make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(m, K), make_bf16(N, K)
    d = r.decide(x, w)
    assert d.route == "fake" and d.row.M == bucket and d.reason == f"row {d.row.source}"
    out = r.call(x, w)
    assert_fp32_close(out, x, w)
    assert fake.shapes[-1] == (m, N, K)
    assert r.counters() == {("fake", "ok"): 1}
    (name, dev), = r.probes()
    assert (name, dev) == ("fake", "cpu") and r.probes()[(name, dev)].ok


def test_second_backend_is_used_when_the_first_declines(make_bf16):
    first, second = DecliningFake(name="first"), ExactFake(name="second")
    r = make_router([first, second], shapes=SHAPES)
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("second", "ok"): 1} and first.runs == 0


def test_row_for_a_library_without_backend_is_served_by_torch(make_bf16):
    r = make_router([ExactFake()], shapes=SHAPES, libtype="hipblaslt")
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("torch", "row libtype hipblaslt is served by torch"): 1}


def test_unknown_device_key_falls_back(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES, key=None)
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert fake.supports_calls == 0 and r.counters() == {("torch", "no device key"): 1}


def test_layer_selection_excludes_layers(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES, selection=LayerSelection(kinds=frozenset({"hca"}),
                                                                    exclude=frozenset({5})))
    x, w = make_bf16(4, K), make_bf16(N, K)
    for info in (LayerInfo(5, "hca"), LayerInfo(1, "csa"), LayerInfo(1, "hca"), None):
        assert_fp32_close(r.call(x, w, info), x, w)
    assert r.counters() == {("torch", "layer not selected"): 2, ("fake", "ok"): 2}


# -- the precision probe -------------------------------------------------------------
def test_probe_disables_a_bf16_rounding_backend_with_one_warning(caplog, make_bf16):
    fake = Bf16RoundingFake(name="rounding")
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(8, K), make_bf16(N, K)
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        outs = [r.call(x, w) for _ in range(3)] + [r.call(make_bf16(2, K), w)]
    for out in outs[:3]:
        assert torch.equal(out, torch_ref.mm_fp32(x, w))
        assert_fp32_close(out, x, w)
    warns = _warnings(caplog)
    assert len(warns) == 1, [w.getMessage() for w in warns]
    assert "rounding disabled on cpu" in warns[0].getMessage() and "rel. error" in warns[0].getMessage()
    assert fake.runs == 1  # the probe only
    (res,) = r.probes().values()
    assert not res.ok and 1e-4 < res.rel_err < 1e-2
    assert r.counters() == {("torch", "rounding: failed its precision probe"): 4}


@pytest.mark.parametrize("mode, route", [("bf16", "torch"), ("exact", "aiter")])
def test_probe_judges_the_fake_aiter_stand_in(tmp_path, monkeypatch, caplog, make_bf16, mode, route):
    install_fake_aiter(tmp_path, monkeypatch, mode=mode)
    from sglang_fp32gemm.backends.aiter_tgemm import AiterBackend

    aiter = AiterBackend()
    aiter.device_types = ("cuda", "cpu")
    r = make_router([aiter], table=TunedTable.load(), key=DeviceKey("gfx950", 256))
    x, w = make_bf16(8, 7168), make_bf16(1024, 7168)
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        out1 = r.call(x, w)
        out2 = r.call(x, w)
    assert_fp32_close(out1, x, w)
    assert_fp32_close(out2, x, w)
    warns = _warnings(caplog)
    if mode == "bf16":
        assert len(warns) == 1 and "aiter disabled" in warns[0].getMessage()
        assert torch.equal(out1, torch_ref.mm_fp32(x, w))
        assert r.counters() == {("torch", "aiter: failed its precision probe"): 2}
    else:
        assert warns == []
        assert r.counters() == {("aiter", "ok"): 2}


def test_prepare_that_raises_disables_the_backend(caplog, make_bf16):
    class BadPrepare(ExactFake):
        def prepare(self, device, rows):
            raise RuntimeError("no workspace")

    fake = BadPrepare()
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(8, K), make_bf16(N, K)
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        assert_fp32_close(r.call(x, w), x, w)
        assert_fp32_close(r.call(x, w), x, w)
    assert fake.runs == 0 and len(_warnings(caplog)) == 1
    assert "prepare() raised RuntimeError: no workspace" in _warnings(caplog)[0].getMessage()


def test_probe_gets_the_rows_of_its_device_and_library(make_bf16):
    seen = []

    class Recording(ExactFake):
        def prepare(self, device, rows):
            seen.append(sorted(r.M for r in rows))

    r = make_router([Recording()], shapes=SHAPES)
    r.call(make_bf16(4, K), make_bf16(N, K))
    assert seen == [[1, 2, 4, 8, 16, 32]]


# -- run-time failures ---------------------------------------------------------------
def test_backend_raising_at_run_time_falls_back_now_and_later_with_one_warning(caplog, make_bf16):
    fake = RaisingFake(ok_runs=1, name="flaky")
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    xs = [make_bf16(m, K) for m in (8, 8, 4, 16)]
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        outs = [r.call(x, w) for x in xs]
    for x, out in zip(xs, outs):
        assert_fp32_close(out, x, w)
        assert torch.equal(out, torch_ref.mm_fp32(x, w))
    warns = _warnings(caplog)
    assert len(warns) == 1, [w.getMessage() for w in warns]
    assert "flaky raised on cpu (RuntimeError: fake kernel launch failed)" in warns[0].getMessage()
    assert fake.runs == 2  # the probe, then the failing call; never again
    assert r.broken() == {("flaky", "cpu"): "RuntimeError: fake kernel launch failed"}
    assert r.counters() == {("torch", "backend failed at run time"): 4}
    assert r.decide(xs[0], w).reason == "backend failed at run time"


def test_backend_failure_uses_the_callers_fallback(make_bf16):
    r = make_router([RaisingFake(ok_runs=1)], shapes=SHAPES)
    x, w = make_bf16(8, K), make_bf16(N, K)
    sentinel = torch_ref.mm_fp32(x, w) * 1.0
    assert r.call(x, w, fallback=lambda: sentinel) is sentinel


def test_available_that_raises_is_a_logged_reason(caplog, make_bf16):
    class Exploding(ExactFake):
        def available(self):
            raise OSError("driver gone")

    r = make_router([Exploding(name="boom")], shapes=SHAPES)
    x, w = make_bf16(4, K), make_bf16(N, K)
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("torch", "boom: availability check raised OSError: driver gone"): 1}


# -- logging and counters ------------------------------------------------------------
def test_rejection_reasons_are_logged_once(caplog, make_bf16):
    gone, declines = UnavailableFake(name="gone"), DecliningFake(name="picky")
    r = make_router([gone, declines], shapes=SHAPES)
    w = make_bf16(N, K)
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        for _ in range(3):
            for m in (1, 2, 4):
                r.call(make_bf16(m, K), w)
    msgs = [rec.getMessage() for rec in caplog.records if rec.name == ROUTING_LOG]
    assert msgs.count("backend gone unavailable: fake library missing") == 1
    for m in (1, 2, 4):
        assert sum(f"backend picky declines" in s and f"(M={m} N={N} K={K})" in s for s in msgs) == 1
    assert len(msgs) == 4, msgs
    assert declines.supports_calls == 3  # once per call signature: decisions are cached
    assert r.counters() == {("torch", "gone: fake library missing; picky: fake declines every call"): 9}


def test_same_rejection_for_different_layouts_is_logged_once(caplog, make_bf16):
    fake = ExactFake(name="strict")
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    views = [make_bf16(8, 2 * K)[:, ::2], make_bf16(8, 3 * K)[:, ::3], make_bf16(K, 8).t()]
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        for x in views * 2:
            assert_fp32_close(r.call(x, w), x, w)
    msgs = [rec.getMessage() for rec in caplog.records if rec.name == ROUTING_LOG]
    assert len({x.stride() for x in views}) == 3
    assert fake.supports_calls == 3  # three call signatures, each decided once
    assert msgs == [f"backend strict declines fake.csv:5 (M=8 N={N} K={K}): needs contiguous x and w"], msgs


def test_counters_per_backend_and_fallback_reason(make_bf16):
    fake = ExactFake(name="fast")
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    r.call(make_bf16(1, K), w)
    r.call(make_bf16(3, K), w)
    r.call(make_bf16(40, K), w)
    r.call(make_bf16(50, K), w)
    r.call(make_bf16(0, K), w)
    r.call(make_bf16(2, 2, K), w)
    r.call(make_bf16(4, K, dtype=torch.float16), make_bf16(N, K, dtype=torch.float16))
    r.call(make_bf16(4, K), w, LayerInfo(0, "hca"))
    expect = {
        ("fast", "ok"): 3,
        ("torch", "no tuned row"): 2,
        ("torch", "M outside the tables"): 1,
        ("torch", "not a 2-D call"): 1,
        ("torch", "dtypes torch.float16/torch.float16, tables hold bf16 x bf16"): 1,
    }
    assert r.counters() == expect
    snap = r.counters()
    snap[("fast", "ok")] = 99  # a copy, not the live counter
    assert r.counters() == expect
    r.reset_counters()
    assert r.counters() == {}


def test_process_router_counters_are_readable_from_python(monkeypatch, make_bf16):
    monkeypatch.setenv(S.ENABLE_VAR, "true")
    S.reload()
    fake = ExactFake()
    routing.reset_router(make_router([fake], shapes=SHAPES))
    x, w = make_bf16(2, K), make_bf16(N, K)
    routing.linear_bf16_fp32(x, w)
    assert routing.get_router().counters() == {("fake", "ok"): 1}


# -- threads ---------------------------------------------------------------------------
def test_concurrent_first_calls_are_correct_and_probe_once(make_bf16):
    fake = SlowPrepareFake()
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    n_threads = 16
    xs = [make_bf16((1, 2, 3, 4, 8, 16, 17, 32)[i % 8], K) for i in range(n_threads)]
    outs: list = [None] * n_threads
    errors: list = []
    barrier = threading.Barrier(n_threads)

    def work(i):
        try:
            barrier.wait()
            outs[i] = r.call(xs[i], w)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    for x, out in zip(xs, outs):
        assert_fp32_close(out, x, w)
    assert fake.prepares == 1
    assert fake.runs == 1 + n_threads
    assert r.counters() == {("fake", "ok"): n_threads}
    assert len(r.probes()) == 1


def test_concurrent_first_calls_on_the_process_router_set_it_up_once(monkeypatch, make_bf16):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    S.reload()
    routing.reset_router()
    routers, errors = [], []
    barrier = threading.Barrier(8)
    x, w = make_bf16(4, K), make_bf16(N, K)

    def work():
        try:
            barrier.wait()
            routers.append(routing.get_router())
            assert_fp32_close(routing.linear_bf16_fp32(x, w), x, w)
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not errors, errors
    assert len({id(r) for r in routers}) == 1
    assert routers[0].counters() == {("torch", "cpu tensors"): 8}


# -- torch.compile -------------------------------------------------------------------------
def test_fake_impl_gives_the_output_shape_and_dtype(make_bf16):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        x = mode.from_tensor(make_bf16(2, 3, K))
        w = mode.from_tensor(make_bf16(N, K))
        out = torch.ops.sglang_fp32gemm.linear_fp32(x, w, 4, "hca")
    assert tuple(out.shape) == (2, 3, N) and out.dtype == torch.float32


def test_custom_op_passes_opcheck(make_bf16):
    torch.library.opcheck(torch.ops.sglang_fp32gemm.linear_fp32.default,
                          (make_bf16(5, K), make_bf16(N, K), -1, ""))


def test_torch_compile_of_a_routed_call_matches_eager(make_bf16):
    torch._dynamo.reset()

    def f(x, w):
        return routing.linear_bf16_fp32(x, w) * 2.0 + 1.0

    cf = torch.compile(f, backend="aot_eager")
    for shape in [(5, K), (1, K), (2, 3, K)]:
        x, w = make_bf16(*shape), make_bf16(N, K)
        out = cf(x, w)
        assert torch.equal(out, f(x, w))
        assert out.dtype == torch.float32 and tuple(out.shape) == (*shape[:-1], N)


def test_torch_compile_fullgraph_on_the_custom_op_routes_at_run_time(monkeypatch, make_bf16):
    torch._dynamo.reset()
    fake = ExactFake()
    routing.reset_router(make_router([fake], shapes=SHAPES, selection=LayerSelection(exclude=frozenset({9}))))

    def g(x, w):
        return torch.ops.sglang_fp32gemm.linear_fp32(x, w, 3, "hca") - 0.5

    def h(x, w):
        return torch.ops.sglang_fp32gemm.linear_fp32(x, w, 9, "hca")

    cg = torch.compile(g, backend="aot_eager", fullgraph=True)
    ch = torch.compile(h, backend="aot_eager", fullgraph=True)
    x, w = make_bf16(8, K), make_bf16(N, K)
    out = cg(x, w)
    assert_fp32_close(out + 0.5, x, w)
    assert torch.equal(out, g(x, w))
    assert_fp32_close(ch(x, w), x, w)
    c = routing.get_router().counters()
    assert c == {("fake", "ok"): 2, ("torch", "layer not selected"): 1}, c
