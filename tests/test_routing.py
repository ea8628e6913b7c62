"""Routing: resolution, binding, probing, fallbacks, counters and logs, with fake fast backends on CPU.

Every result is compared with the float64 product of the same bf16 inputs
(``assert_fp32_close``: rel. error <= 1e-5 and allclose(atol=1e-2, rtol=1e-4)),
on fresh random inputs for each check.
"""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from conftest import assert_fp32_close
from fakes.fake_aiter import install_fake_aiter
from fakes.fake_backends import (FAKE_KERNEL, FAKE_KEY, OTHER_KERNEL, OTHER_KEY, Bf16RoundingFake, BindRaisingFake,
                                 DecliningFake, ExactFake, FakeCfg, RaisingFake, SlowBindFake, UnavailableFake,
                                 fake_table, make_config, make_router, parse_csv, rows_csv)
from sglang_fp32gemm import routing
from sglang_fp32gemm import settings as S
from sglang_fp32gemm.backends import probe as probe_mod
from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.layers import LayerInfo, LayerSelection
from sglang_fp32gemm.table import DeviceKey, TunedTable

N, K = 32, 64
MS = (1, 2, 4, 8, 16, 32)
SHAPES = [(m, N, K) for m in MS]
# FAKE_KERNEL for M <= 4, OTHER_KERNEL for M >= 8 (M=3 and M=5..16 take the M=16 row).
TWO_KERNELS = [(m, N, K) for m in (1, 2, 4)] + [(m, N, K, OTHER_KERNEL) for m in (8, 16, 32)]
ROUTING_LOG = "sglang_fp32gemm"  # the router logs through its parts: routing, routes, kernels, telemetry
PROBE_RUNS = probe_mod.TRIALS  # a precision probe runs the kernel this many times
CPU = -1  # the device index of CPU tensors in entries() keys
NOT_ROW_MAJOR = "x not row-major or w not contiguous"
NOT_2D_BF16 = "not a 2-D bf16 x bf16 call"
M_RANGE = "M outside 1..256"


def _line(m: int, shapes=SHAPES) -> str:
    """The fake.csv source of the row for M (rows start on line 2)."""
    return f"fake.csv:{[s[0] for s in shapes].index(m) + 2}"


def _msgs(caplog, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(ROUTING_LOG + ".") and r.levelno >= level]


def _warnings(caplog) -> list[str]:
    return _msgs(caplog, logging.WARNING)


def _kernel_of(r: routing.Router, m: int, n: int = N, k: int = K) -> str:
    return r.config.table.lookup(FAKE_KEY, m, n, k).kernelName


def _delta(after: dict, before: dict) -> dict:
    return {key: v - before.get(key, 0) for key, v in after.items() if v != before.get(key, 0)}


@pytest.fixture
def events() -> list:
    """Shared ordered log: the fakes append ("bind"|"run", ...), the probe spy ("probe", ...)."""
    return []


@pytest.fixture
def probes(monkeypatch, events) -> list:
    """Every precision probe the router runs: ((backend, kernel), device, M, N, K)."""
    seen: list = []
    real = probe_mod.run_probe

    def spy(fn, device, m, n, k):
        who = getattr(fn, "fake_kernel", ("?", "?"))
        seen.append((who, str(device), m, n, k))
        events.append(("probe", *who, n, k))
        return real(fn, device, m, n, k)

    monkeypatch.setattr(probe_mod, "run_probe", spy)
    return seen


# -- disabled ------------------------------------------------------------------
def test_disabled_plugin_returns_the_original_result_exactly(make_bf16):
    x, w = make_bf16(8, K), make_bf16(N, K)
    original = torch.mm(x.float(), w.float().t()) + 0.25  # any result: it must come back untouched
    r = routing.get_router()
    assert not r.enabled and r.error is None
    out = routing.linear_bf16_fp32(x, w, fallback=lambda: original)
    assert out is original and torch.equal(out, original)
    # Without a fallback, the default is torch's exact fp32 product.
    assert torch.equal(routing.linear_bf16_fp32(x, w), torch.mm(x.float(), w.float().t()))
    assert r.describe_call(x, w) == ("torch", "disabled")
    # Disabled calls are not counted by the new router (the old one counted
    # ("torch", "disabled")); they must never be counted as routed.
    assert all(route == "torch" for route, _ in r.counters())


def test_disabled_router_never_asks_a_fast_backend(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES, enabled=False)
    x, w = make_bf16(8, K), make_bf16(N, K)
    sentinel = torch.full((8, N), 3.0)
    assert r.call(x, w, fallback=lambda: sentinel) is sentinel
    assert_fp32_close(r.call(x, w), x, w)
    assert r.describe_call(x, w) == ("torch", "disabled")
    assert fake.setup_calls == {} and fake.runs == 0
    assert r.entries() == {} and r.bound_kernels() == []


def test_enable_variable_turns_the_process_router_on(monkeypatch, make_bf16):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    S.reload()
    r = routing.reset_router()
    x, w = make_bf16(4, K), make_bf16(N, K)
    out = routing.linear_bf16_fp32(x, w)
    assert r.enabled and r.error is None
    assert_fp32_close(out, x, w)
    assert r.counters() == {("torch", "cpu tensors"): 1}  # the real router keeps CPU on torch


# -- fallbacks decided on the hot path ----------------------------------------------
def _hot_path_cases(make_bf16):
    x, w = make_bf16(8, K), make_bf16(N, K)
    return {
        "M=0": (make_bf16(0, K), w, M_RANGE),
        "M>256": (make_bf16(257, K), w, M_RANGE),
        "M=300": (make_bf16(300, K), w, M_RANGE),
        "3-D x": (make_bf16(2, 4, K), w, NOT_2D_BF16),
        "1-D x": (make_bf16(K), w, NOT_2D_BF16),
        "fp16": (make_bf16(8, K, dtype=torch.float16), make_bf16(N, K, dtype=torch.float16), NOT_2D_BF16),
        "fp32 weight": (x, make_bf16(N, K, dtype=torch.float32), NOT_2D_BF16),
        "fp32 x": (make_bf16(8, K, dtype=torch.float32), w, NOT_2D_BF16),
        "x column slice": (make_bf16(8, 2 * K)[:, ::2], w, NOT_ROW_MAJOR),
        "x transposed view": (make_bf16(K, 8).t(), w, NOT_ROW_MAJOR),
        "w transposed view": (x, make_bf16(K, N).t(), NOT_ROW_MAJOR),
        "w column slice": (x, make_bf16(N, 2 * K)[:, ::2], NOT_ROW_MAJOR),
        "w every other row": (x, make_bf16(2 * N, K)[::2], NOT_ROW_MAJOR),
    }


HOT_PATH_CASES = ["M=0", "M>256", "M=300", "3-D x", "1-D x", "fp16", "fp32 weight", "fp32 x", "x column slice",
                  "x transposed view", "w transposed view", "w column slice", "w every other row"]


@pytest.mark.parametrize("case", HOT_PATH_CASES)
def test_ineligible_calls_fall_back_without_asking_a_backend(case, make_bf16):
    x, w, reason = _hot_path_cases(make_bf16)[case]
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    assert r.describe_call(x, w) == ("torch", reason)
    out = r.call(x, w)
    assert out.dtype == torch.float32 and tuple(out.shape) == (*x.shape[:-1], N)
    assert_fp32_close(out.reshape(-1, N), x.reshape(-1, K), w)
    assert fake.setup_calls == {} and fake.runs == 0
    assert r.entries() == {} and r.bound_kernels() == []
    assert r.counters() == {("torch", reason): 1}


def test_k_of_x_and_w_differing_falls_back_without_asking_a_backend(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES + [(8, N, 2 * K)])
    for x, w in [(make_bf16(8, K), make_bf16(N, 2 * K)), (make_bf16(8, 2 * K), make_bf16(N, K))]:
        sentinel = torch.zeros(8, N)
        assert r.call(x, w, fallback=lambda: sentinel) is sentinel
        assert r.describe_call(x, w) == ("torch", "K of x and w differ")
        # The default fallback is torch's product, which rejects the shapes as SGLang's own call would.
        with pytest.raises(RuntimeError):
            r.call(x, w)
    assert fake.setup_calls == {} and fake.runs == 0 and r.entries() == {}
    assert r.counters() == {("torch", "K of x and w differ"): 4}


def test_untuned_m_falls_back_without_parsing_or_binding(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(40, K), make_bf16(N, K)
    reason = f"no tuned row for {FAKE_KEY} N={N} K={K} at this M"
    assert_fp32_close(r.call(x, w), x, w)
    assert r.describe_call(x, w) == ("torch", reason)
    assert fake.setup_calls == {} and fake.runs == 0
    assert r.counters() == {("torch", reason): 1}


@pytest.mark.parametrize("offset", [0, K])
def test_x_with_row_stride_but_unit_k_stride_is_routed(offset, make_bf16):
    # The contract asks unit stride along K only: a column block of a wider x qualifies.
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(8, 2 * K)[:, offset:offset + K], make_bf16(N, K)
    assert not x.is_contiguous() and x.stride(1) == 1
    assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("fake", FAKE_KERNEL): 1} and fake.violations == []


def test_cpu_inputs_fall_back_on_the_real_router(make_bf16):
    fake = ExactFake(devices=("cpu", "cuda"))
    r = routing.Router(make_config(TunedTable.load()), {"triton": [fake]})
    x, w = make_bf16(8, 7168), make_bf16(512, 7168)  # an sm90 row's shape
    out = r.call(x, w)
    assert_fp32_close(out, x, w)
    assert fake.setup_calls == {} and r.counters() == {("torch", "cpu tensors"): 1}
    assert r.describe_call(x, w) == ("torch", "cpu tensors")


def test_fallback_is_called_only_when_no_backend_takes_the_call(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    calls = []
    x, w = make_bf16(8, K), make_bf16(N, K)
    out = r.call(x, w, fallback=lambda: calls.append(1) or torch.zeros(8, N))
    assert calls == [] and fake.runs == PROBE_RUNS + 1  # probe + call
    assert_fp32_close(out, x, w)


# -- the fast path -----------------------------------------------------------------
@pytest.mark.parametrize("m, bucket", [(1, 1), (3, 16), (8, 8), (17, 32), (32, 32)])
def test_fast_backend_takes_tuned_shapes(m, bucket, make_bf16, probes):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(m, K), make_bf16(N, K)
    assert r.describe_call(x, w) == ("fake", f"{FAKE_KERNEL} (row {_line(bucket)})")
    e = r.entries()[(CPU, N, K, m)]
    assert e.row.M == bucket and e.route == "fake" and e.detail == FAKE_KERNEL
    out = r.call(x, w)
    assert_fp32_close(out, x, w)
    assert fake.shapes[-1] == (m, N, K) and fake.violations == []
    assert r.counters() == {("fake", FAKE_KERNEL): 1}
    (b,) = r.bound_kernels()
    assert (b.backend, b.kernel_name, b.deterministic) == ("fake", FAKE_KERNEL, True)
    assert b.fn is not None and b.error is None and b.probe.ok and b.probe.shape == (bucket, N, K)
    assert fake.binds == [(FAKE_KERNEL, "cpu", N, K)]
    assert probes == [(("fake", FAKE_KERNEL), "cpu", bucket, N, K)]


def test_second_backend_is_used_when_the_first_declines(make_bf16):
    first, second = DecliningFake(name="first"), ExactFake(name="second")
    r = make_router([first, second], shapes=SHAPES)
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("second", FAKE_KERNEL): 1}
    assert first.calls["bind"] == 0 and first.runs == 0


def test_the_first_backend_that_parses_the_kernel_name_serves_it(make_bf16):
    a = ExactFake(name="a", kernels=("a_kernel",))
    b = ExactFake(name="b")
    shapes = [(4, N, K, "a_kernel"), (8, N, K)]
    r = make_router([a, b], shapes=shapes)
    w = make_bf16(N, K)
    for m in (4, 8):
        x = make_bf16(m, K)
        assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("a", "a_kernel"): 1, ("b", FAKE_KERNEL): 1}
    assert a.binds == [("a_kernel", "cpu", N, K)] and b.binds == [(FAKE_KERNEL, "cpu", N, K)]


def test_kernel_name_no_backend_parses_falls_back(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=[(4, N, K, "mystery_kernel")])
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    reason = "row fake.csv:2: no triton backend parses mystery_kernel"
    assert r.counters() == {("torch", reason): 1}
    assert fake.calls["bind"] == 0 and fake.calls["supports"] == 0


def test_row_for_a_library_without_backend_is_served_by_torch(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES, libtype="hipblaslt")
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("torch", f"row {_line(4)}: libtype hipblaslt is served by torch"): 1}
    assert fake.setup_calls == {}


def test_unknown_device_key_falls_back(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES, key=None)
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert fake.setup_calls == {} and r.counters() == {("torch", "no device key"): 1}


def test_layer_selection_excludes_layers(make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES, selection=LayerSelection(kinds=frozenset({"hca"}),
                                                                    exclude=frozenset({5})))
    x, w = make_bf16(4, K), make_bf16(N, K)
    for info in (LayerInfo(5, "hca"), LayerInfo(1, "csa"), LayerInfo(1, "hca"), None):
        assert_fp32_close(r.call(x, w, info), x, w)
    assert r.counters() == {("torch", "layer not selected"): 2, ("fake", FAKE_KERNEL): 2}
    assert r.describe_call(x, w, LayerInfo(5, "hca")) == ("torch", "layer not selected")


# -- binding and the precision probe, per kernel -------------------------------------
def test_each_kernel_is_bound_and_probed_once_before_its_first_use(make_bf16, events, probes):
    n2 = 48
    fake = ExactFake(kernels=(FAKE_KERNEL, OTHER_KERNEL), events=events)
    shapes = [(*s[:1], n, K, *s[3:]) for n in (N, n2) for s in TWO_KERNELS]
    r = make_router([fake], shapes=shapes)
    ws = {n: make_bf16(n, K) for n in (N, n2)}
    calls = {}
    for _ in range(2):
        for n, w in ws.items():
            for m in (1, 2, 3, 4, 5, 8, 16, 17, 32):
                x = make_bf16(m, K)
                assert_fp32_close(r.call(x, w), x, w)
                kern = _kernel_of(r, m, n)
                calls[(kern, n)] = calls.get((kern, n), 0) + 1
    kernels = [(kern, n) for kern in (FAKE_KERNEL, OTHER_KERNEL) for n in (N, n2)]
    assert sorted(fake.binds) == sorted((kern, "cpu", n, K) for kern, n in kernels)
    assert sorted((who[1], n) for who, _, _, n, _ in probes) == sorted(kernels)  # one probe each
    for kern, n in kernels:
        seq = [e[0] for e in events if e[2:] == (kern, n, K)]
        # bound, probed, then used: the probe's own run comes before any call's.
        assert seq == ["bind", "probe"] + ["run"] * (PROBE_RUNS + calls[(kern, n)]), (kern, n, seq)
    assert all(b.probe.ok and b.fn is not None for b in r.bound_kernels())
    assert fake.violations == []


def test_probe_disables_a_bf16_rounding_kernel_with_one_warning(caplog, make_bf16, probes):
    fake = Bf16RoundingFake(name="rounding")
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    xs = [make_bf16(8, K) for _ in range(3)] + [make_bf16(2, K)]
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        outs = [r.call(x, w) for x in xs]
    for x, out in zip(xs, outs):
        assert torch.equal(out, torch_ref.mm_fp32(x, w))
        assert_fp32_close(out, x, w)
    warns = _warnings(caplog)
    assert len(warns) == 1, warns
    assert "kernel rounding fake_splitk_kernel disabled on cpu: failed its precision probe" in warns[0]
    assert "rel. error" in warns[0]
    assert fake.runs == 1 and fake.binds == [(FAKE_KERNEL, "cpu", N, K)]  # bound and probed once (failed call 1)
    assert len(probes) == 1
    (b,) = r.bound_kernels()
    assert b.fn is None and not b.probe.ok and 1e-4 < b.probe.rel_err < 1e-2
    ((route, reason), count), = r.counters().items()
    assert route == "torch" and count == 4
    assert reason.startswith("rounding fake_splitk_kernel: failed its precision probe (probe M=8"), reason


def test_a_kernel_failing_its_probe_disables_only_that_kernel(caplog, make_bf16, probes):
    fake = Bf16RoundingFake(name="mixed", rounding={OTHER_KERNEL}, kernels=(FAKE_KERNEL, OTHER_KERNEL))
    r = make_router([fake], shapes=TWO_KERNELS)
    w = make_bf16(N, K)
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        for m in (2, 8, 4, 16, 2, 8):
            x = make_bf16(m, K)
            assert_fp32_close(r.call(x, w), x, w)
    c = r.counters()
    assert c.pop(("mixed", FAKE_KERNEL)) == 3
    ((route, reason), count), = c.items()
    assert route == "torch" and count == 3
    assert reason.startswith("mixed fake_other_kernel: failed its precision probe"), reason
    warns = _warnings(caplog)
    assert len(warns) == 1 and "kernel mixed fake_other_kernel disabled on cpu" in warns[0], warns
    bounds = {b.kernel_name: b for b in r.bound_kernels()}
    assert bounds[FAKE_KERNEL].fn is not None and bounds[FAKE_KERNEL].probe.ok
    assert bounds[OTHER_KERNEL].fn is None and 1e-4 < bounds[OTHER_KERNEL].probe.rel_err < 1e-2
    assert fake.kernel_runs[OTHER_KERNEL] == 1  # its probe only (failed call 1)
    assert sorted(who[1] for who, *_ in probes) == sorted([FAKE_KERNEL, OTHER_KERNEL])


def test_a_kernel_raising_in_its_probe_is_disabled(caplog, make_bf16):
    fake = RaisingFake(name="dead", ok_runs=0)
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        for m in (8, 8, 4):
            x = make_bf16(m, K)
            assert_fp32_close(r.call(x, w), x, w)
    warns = _warnings(caplog)
    assert len(warns) == 1 and "raised RuntimeError: fake kernel launch failed" in warns[0], warns
    assert fake.runs == 1 and fake.calls["bind"] == 1
    assert all(route == "torch" for route, _ in r.counters()) and sum(r.counters().values()) == 3


@pytest.mark.parametrize("mode", ["bf16", "exact"])
def test_probe_judges_the_fake_aiter_stand_in(tmp_path, monkeypatch, caplog, make_bf16, mode):
    install_fake_aiter(tmp_path, monkeypatch, mode=mode)
    from sglang_fp32gemm.backends.aiter_tgemm import AiterBackend

    aiter = AiterBackend()
    aiter.device_types = ("cuda", "cpu")
    # The in-process probe is what is judged here; the child-process probe
    # (isolated_probe=True) is tested on its own below.
    aiter.isolated_probe = False
    key = DeviceKey("gfx950", 256)
    r = make_router([aiter], table=TunedTable.load(), key=key)
    kernel = r.config.table.lookup(key, 8, 1024, 7168).kernelName
    w = make_bf16(1024, 7168)
    xs = [make_bf16(8, 7168) for _ in range(2)]
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        outs = [r.call(x, w) for x in xs]
    for x, out in zip(xs, outs):
        assert_fp32_close(out, x, w)
    warns = _warnings(caplog)
    if mode == "bf16":
        assert len(warns) == 1 and f"kernel aiter {kernel} disabled on cpu" in warns[0], warns
        assert torch.equal(outs[0], torch_ref.mm_fp32(xs[0], w))
        ((route, reason), count), = r.counters().items()
        assert (route, count) == ("torch", 2)
        assert reason.startswith(f"aiter {kernel}: failed its precision probe"), reason
    else:
        assert warns == []
        assert r.counters() == {("aiter", kernel): 2}


def test_bind_that_raises_disables_the_kernel_with_one_warning(caplog, make_bf16):
    fake = BindRaisingFake(name="badbind")
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        for m in (8, 8, 4):
            x = make_bf16(m, K)
            assert_fp32_close(r.call(x, w), x, w)
    warns = _warnings(caplog)
    assert warns == ["sglang-fp32gemm: kernel badbind fake_splitk_kernel disabled on cpu: "
                     "bind raised RuntimeError: no workspace"], warns
    assert fake.runs == 0 and fake.calls["bind"] == 1  # the failure is remembered, not retried per M
    assert r.counters() == {("torch", "badbind fake_splitk_kernel: bind raised RuntimeError: no workspace"): 3}


def test_a_backend_asking_for_an_isolated_probe_is_not_disabled_by_a_missing_module(make_bf16):
    class Isolated(ExactFake):
        isolated_probe = True

    fake = Isolated(name="iso")
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(8, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    (b,) = r.bound_kernels()
    assert "isolated_probe" not in (b.error or ""), b.error


# -- run-time failures -----------------------------------------------------------------
def test_kernel_raising_at_run_time_disables_only_that_kernel(caplog, make_bf16):
    fake = RaisingFake(name="flaky", ok_runs=PROBE_RUNS, raising={OTHER_KERNEL}, kernels=(FAKE_KERNEL, OTHER_KERNEL))
    r = make_router([fake], shapes=TWO_KERNELS)
    w = make_bf16(N, K)
    x = make_bf16(2, K)
    assert_fp32_close(r.call(x, w), x, w)  # the other kernel's entry exists before the failure
    x = make_bf16(8, K)
    assert r.describe_call(x, w)[0] == "flaky"
    fallback_calls = []
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        out = r.call(x, w, fallback=lambda: fallback_calls.append(1) or torch_ref.mm_fp32(x, w))
        assert fallback_calls == [1]  # the kernel raised: the caller's fallback gave the result
        assert_fp32_close(out, x, w)
        other_runs = fake.kernel_runs[OTHER_KERNEL]
        assert other_runs == PROBE_RUNS + 1  # its probe, then the failing call
        for m in (8, 16, 2, 4, 9, 1):
            x = make_bf16(m, K)
            assert_fp32_close(r.call(x, w), x, w)
    assert fake.kernel_runs[OTHER_KERNEL] == other_runs  # never run again
    assert fake.kernel_runs[FAKE_KERNEL] == PROBE_RUNS + 4  # its probe, then every M <= 4 call
    warns = _warnings(caplog)
    assert len(warns) == 1, warns
    assert ("kernel flaky fake_other_kernel on cpu raised at run time (RuntimeError: fake kernel launch failed)"
            in warns[0]), warns
    assert r.counters()[("flaky", FAKE_KERNEL)] == 4
    for m in (8, 16):
        route, why = r.describe_call(make_bf16(m, K), w)
        assert route == "torch" and "fake_other_kernel" in why and "raised at run time" in why, why
    assert r.describe_call(make_bf16(2, K), w)[0] == "flaky"
    bounds = {b.kernel_name: b for b in r.bound_kernels()}
    assert bounds[FAKE_KERNEL].fn is not None
    assert bounds[OTHER_KERNEL].fn is None and "raised at run time" in bounds[OTHER_KERNEL].error


def test_a_kernel_failing_in_several_calls_at_once_warns_once(caplog, make_bf16):
    # Calls that fetched the kernel before it was disabled (other threads) may still run it.
    fake = RaisingFake(name="flaky", ok_runs=PROBE_RUNS)
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    xs = [make_bf16(8, K) for _ in range(3)]
    runs = [r.kernel_for(x, w) for x in xs]
    assert all(run is not None for run in runs)
    with caplog.at_level(logging.WARNING, logger=ROUTING_LOG):
        assert [run(x, w) for run, x in zip(runs, xs)] == [None, None, None]  # None: take the fallback
    assert len(_warnings(caplog)) == 1, _warnings(caplog)
    assert r.kernel_for(xs[0], w) is None


def test_kernel_failure_without_a_fallback_gives_the_exact_product(make_bf16):
    r = make_router([RaisingFake(ok_runs=PROBE_RUNS)], shapes=SHAPES)
    w = make_bf16(N, K)
    for m in (8, 8, 4):
        x = make_bf16(m, K)
        out = r.call(x, w)
        assert_fp32_close(out, x, w)
        assert torch.equal(out, torch_ref.mm_fp32(x, w))


def test_kernel_failure_uses_the_callers_fallback_object(make_bf16):
    r = make_router([RaisingFake(ok_runs=PROBE_RUNS)], shapes=SHAPES)
    x, w = make_bf16(8, K), make_bf16(N, K)
    sentinel = torch_ref.mm_fp32(x, w) * 1.0
    assert r.call(x, w, fallback=lambda: sentinel) is sentinel


def test_counters_keep_the_calls_made_before_a_kernel_failed(make_bf16):
    fake = RaisingFake(name="flaky", ok_runs=PROBE_RUNS + 2)  # the probe and two calls succeed, then it raises
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    for _ in range(4):
        x = make_bf16(8, K)
        assert_fp32_close(r.call(x, w), x, w)
    c = r.counters()
    assert sum(c.values()) == 4, c
    assert c.get(("flaky", FAKE_KERNEL), 0) in (2, 3), c  # the failing call may count on either side


def test_a_kernel_disabled_at_run_time_has_one_reason(make_bf16):
    r = make_router([RaisingFake(name="flaky", ok_runs=PROBE_RUNS)], shapes=SHAPES)
    w = make_bf16(N, K)
    for m in (8, 8, 4):  # M=8 disables the kernel; M=4 is resolved afterwards
        x = make_bf16(m, K)
        assert_fp32_close(r.call(x, w), x, w)
    reasons = {why for route, why in r.counters() if route == "torch"}
    reasons |= {r.describe_call(make_bf16(m, K), w)[1] for m in (8, 4)}
    assert len(reasons) == 1, reasons


def test_available_that_raises_is_a_logged_reason(caplog, make_bf16):
    class Exploding(ExactFake):
        def available(self):
            self._count("available")
            raise OSError("driver gone")

    fake = Exploding(name="boom")
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        for m in (4, 4, 8):
            x = make_bf16(m, K)
            assert_fp32_close(r.call(x, w), x, w)
    why = "boom: availability check raised OSError: driver gone"
    assert r.counters() == {("torch", f"row {_line(4)}: {why}"): 2, ("torch", f"row {_line(8)}: {why}"): 1}
    assert fake.calls["available"] == 1 and fake.calls["bind"] == 0
    assert _msgs(caplog).count("sglang-fp32gemm: backend boom unavailable: availability check raised "
                               "OSError: driver gone") == 1


def test_supports_that_raises_is_a_reason(make_bf16):
    class Raising(ExactFake):
        def supports(self, cfg, m, n, k):
            raise ValueError("bad shape")

    fake = Raising(name="sup")
    r = make_router([fake], shapes=SHAPES)
    x, w = make_bf16(4, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("torch", f"row {_line(4)}: sup: supports() raised ValueError: bad shape"): 1}
    assert fake.calls["bind"] == 0


# -- the hot path ------------------------------------------------------------------------
def test_hot_path_never_asks_the_backend_again(monkeypatch, make_bf16):
    fake = ExactFake()
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    r.call(make_bf16(8, K), w)
    first = dict(fake.calls)
    assert first["available"] == first["bind"] == 1
    for _ in range(20):
        x = make_bf16(8, K)
        assert_fp32_close(r.call(x, w), x, w)
    assert dict(fake.calls) == first
    # A new M of the same (device, N, K): resolved once; availability and the bound kernel are reused.
    r.call(make_bf16(4, K), w)
    second = dict(fake.calls)
    assert second["available"] == 1 and second["bind"] == 1
    # Once every M seen is resolved, the router itself does not resolve again.

    def no_resolution(*a, **kw):
        raise AssertionError("resolved again on the hot path")

    monkeypatch.setattr(r, "resolve", no_resolution)
    monkeypatch.setattr(r, "plan", no_resolution)
    for _ in range(5):
        for m in (4, 8):
            x = make_bf16(m, K)
            assert_fp32_close(r.call(x, w), x, w)
    assert dict(fake.calls) == second
    assert fake.runs == PROBE_RUNS + 1 + 20 + 1 + 10
    assert r.counters() == {("fake", FAKE_KERNEL): 32}


def test_cached_fallback_entries_do_not_ask_the_backend_again(make_bf16):
    picky = DecliningFake(name="picky")
    r = make_router([picky], shapes=SHAPES)
    w = make_bf16(N, K)
    for _ in range(5):
        for m in (2, 8):
            x = make_bf16(m, K)
            assert_fp32_close(r.call(x, w), x, w)
    assert picky.calls["supports"] == 2 and picky.calls["available"] == 1 and picky.calls["bind"] == 0


# -- graph capture -------------------------------------------------------------------------
def test_resolution_during_graph_capture_is_not_cached(monkeypatch, caplog):
    # No GPU here: a "cuda"-typed device is resolved directly, with
    # torch.cuda.is_current_stream_capturing patched. The probe of the eager
    # resolution runs the bound fake on CPU tensors. kernel_for() itself
    # cannot be driven on CPU (it needs tensors on a cuda device).
    class CpuRunsForCuda(ExactFake):
        def _check_contract(self, cfg, device, n, k, x, w):
            super()._check_contract(cfg, x.device, n, k, x, w)

    fake = CpuRunsForCuda(devices=("cpu", "cuda"))
    r = make_router([fake], shapes=SHAPES)
    cuda = torch.device("cuda", 0)
    capturing = [True]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    real_probe = probe_mod.run_probe
    monkeypatch.setattr(probe_mod, "run_probe",
                        lambda fn, device, m, n, k: real_probe(fn, torch.device("cpu"), m, n, k))
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        during = [r.resolve(cuda, 8, N, K) for _ in range(3)]
    for e in during:
        assert e.run is None and e.reason == "not resolved before graph capture"
    assert r.entries() == {} and r.bound_kernels() == [] and fake.setup_calls == {}
    warns = _warnings(caplog)
    assert len(warns) == 1 and "first seen during CUDA-graph capture" in warns[0], warns

    capturing[0] = False
    eager = r.resolve(cuda, 8, N, K)
    assert eager.run is not None and eager.route == "fake"
    assert set(r.entries()) == {(0, N, K, 8)} and fake.calls["bind"] == 1

    capturing[0] = True
    assert r.resolve(cuda, 8, N, K) is eager  # resolved before: the capture uses the kernel
    other = r.resolve(cuda, 4, N, K)          # a new M during capture: torch, not cached
    assert other.run is None and set(r.entries()) == {(0, N, K, 8)} and fake.calls["bind"] == 1


# -- logging and counters ------------------------------------------------------------
def test_each_fallback_reason_is_logged_once(caplog, make_bf16):
    gone, picky = UnavailableFake(name="gone"), DecliningFake(name="picky")
    r = make_router([gone, picky], shapes=SHAPES)
    w = make_bf16(N, K)
    with caplog.at_level(logging.DEBUG, logger=ROUTING_LOG):
        for _ in range(3):
            for m in (1, 2, 4, 40):
                x = make_bf16(m, K)
                assert_fp32_close(r.call(x, w), x, w)
    records = [rec for rec in caplog.records if rec.name.startswith(ROUTING_LOG + ".")]
    assert all(rec.levelno == logging.INFO for rec in records), [(rec.levelname, rec.getMessage()) for rec in records]
    msgs = [rec.getMessage() for rec in records]
    assert msgs.count("sglang-fp32gemm: backend gone unavailable: fake library missing") == 1
    why = "gone: fake library missing; picky: fake declines every call"
    for m in (1, 2, 4):
        assert msgs.count(f"sglang-fp32gemm: M={m} N={N} K={K} on cpu uses torch: row {_line(m)}: {why}") == 1
    assert msgs.count(f"sglang-fp32gemm: M=40 N={N} K={K} on cpu uses torch: "
                      f"no tuned row for {FAKE_KEY} N={N} K={K} at this M") == 1
    assert len(msgs) == 5, msgs
    assert gone.calls["available"] == 1 and picky.calls["supports"] == 3  # once per resolved M
    assert r.counters() == {**{("torch", f"row {_line(m)}: {why}"): 3 for m in (1, 2, 4)},
                            ("torch", f"no tuned row for {FAKE_KEY} N={N} K={K} at this M"): 3}


def test_hot_path_fallback_reasons_are_logged_once(caplog, make_bf16):
    r = make_router([ExactFake()], shapes=SHAPES)
    w = make_bf16(N, K)
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        for _ in range(3):
            r.call(make_bf16(8, 2 * K)[:, ::2], w)
            r.call(make_bf16(0, K), w)
    msgs = _msgs(caplog)
    for reason in (NOT_ROW_MAJOR, M_RANGE):
        assert sum(reason in msg for msg in msgs) == 1, msgs


def test_a_passing_kernel_logs_its_probe_once_at_info(caplog, make_bf16):
    r = make_router([ExactFake(name="good")], shapes=SHAPES)
    w = make_bf16(N, K)
    with caplog.at_level(logging.DEBUG, logger=ROUTING_LOG):
        for m in (8, 8, 4, 2):
            r.call(make_bf16(m, K), w)
    records = [rec for rec in caplog.records if rec.name.startswith(ROUTING_LOG + ".")]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    assert "good fake_splitk_kernel on cpu N=32 K=64 passed its probe M=8" in records[0].getMessage()


def test_counters_per_kernel_and_fallback_reason(make_bf16):
    fake = ExactFake(name="fast", kernels=(FAKE_KERNEL, OTHER_KERNEL))
    r = make_router([fake], shapes=TWO_KERNELS, selection=LayerSelection(kinds=frozenset({"csa"})))
    w = make_bf16(N, K)
    for m in (1, 3, 4, 8, 8, 40, 50, 0):
        r.call(make_bf16(m, K), w)
    r.call(make_bf16(2, 2, K), w)
    r.call(make_bf16(4, K, dtype=torch.float16), make_bf16(N, K, dtype=torch.float16))
    r.call(make_bf16(4, K), w, LayerInfo(0, "hca"))
    r.call(make_bf16(4, K), w, LayerInfo(0, "csa"))
    r.call(make_bf16(4, K), make_bf16(N, 2 * K), fallback=lambda: torch.zeros(4, N))
    r.describe_call(make_bf16(16, K), w)  # resolves, counts nothing
    expect = {
        ("fast", FAKE_KERNEL): 3,   # M=1, 4 and the selected csa layer
        ("fast", OTHER_KERNEL): 3,  # M=3 (the M=16 row), 8, 8
        ("torch", f"no tuned row for {FAKE_KEY} N={N} K={K} at this M"): 2,  # M=40 and 50: one reason
        ("torch", M_RANGE): 1,
        ("torch", NOT_2D_BF16): 2,
        ("torch", "layer not selected"): 1,
        ("torch", "K of x and w differ"): 1,
    }
    assert r.counters() == expect
    snap = r.counters()
    snap[("fast", FAKE_KERNEL)] = 99  # a copy, not the live counter
    assert r.counters() == expect
    r.reset_counters()
    assert r.counters() == {}
    r.call(make_bf16(8, K), w)
    assert r.counters() == {("fast", OTHER_KERNEL): 1}


def test_process_router_counters_are_readable_from_python(monkeypatch, make_bf16):
    monkeypatch.setenv(S.ENABLE_VAR, "true")
    S.reload()
    fake = ExactFake()
    routing.reset_router(make_router([fake], shapes=SHAPES))
    x, w = make_bf16(2, K), make_bf16(N, K)
    assert_fp32_close(routing.linear_bf16_fp32(x, w), x, w)
    assert routing.get_router().counters() == {("fake", FAKE_KERNEL): 1}


# -- describe_call and plan ----------------------------------------------------------------
def test_describe_call_gives_the_route_the_call_takes(make_bf16):
    fake = Bf16RoundingFake(name="mixed", rounding={OTHER_KERNEL}, kernels=(FAKE_KERNEL, OTHER_KERNEL))
    r = make_router([fake], shapes=TWO_KERNELS, selection=LayerSelection(exclude=frozenset({5})))
    w = make_bf16(N, K)
    cases = [
        (make_bf16(2, K), w, None), (make_bf16(3, K), w, None), (make_bf16(8, K), w, None),
        (make_bf16(40, K), w, None), (make_bf16(0, K), w, None), (make_bf16(300, K), w, None),
        (make_bf16(2, K), w, LayerInfo(5, "hca")), (make_bf16(2, K), w, LayerInfo(6, "hca")),
        (make_bf16(2, 3, K), w, None), (make_bf16(8, 2 * K)[:, ::2], w, None),
        (make_bf16(4, K), make_bf16(K, N).t(), None), (make_bf16(4, K, dtype=torch.float16), w, None),
    ]
    for x, w_, layer in cases * 2:
        before = r.counters()
        route, detail = r.describe_call(x, w_, layer)
        assert r.counters() == before  # describing counts nothing
        out = r.call(x, w_, layer)
        assert_fp32_close(out.reshape(-1, N), x.reshape(-1, K), w_)
        ((got_route, got_detail), n), = _delta(r.counters(), before).items()
        assert n == 1 and got_route == route, (route, detail, got_route, got_detail)
        assert detail == got_detail or detail.startswith(f"{got_detail} (row "), (detail, got_detail)


def test_plan_for_another_device_key_checks_no_availability():
    fake = UnavailableFake(name="gone", kernels=(FAKE_KERNEL, OTHER_KERNEL))
    other_rows = rows_csv([(8, N, K, OTHER_KERNEL)], gfx=OTHER_KEY.gfx, cu_num=OTHER_KEY.cu_num)
    table = TunedTable([("fake.csv", parse_csv(rows_csv(SHAPES), "fake.csv")),
                        ("other.csv", parse_csv(other_rows, "other.csv"))])
    r = make_router([fake], table=table)
    p = r.plan(OTHER_KEY, 8, N, K, check_available=False)
    assert p.backend is fake and p.cfg == FakeCfg(OTHER_KERNEL) and p.reason == "row other.csv:2"
    assert (p.row.gfx, p.row.cu_num, p.row.kernelName) == (OTHER_KEY.gfx, OTHER_KEY.cu_num, OTHER_KERNEL)
    assert r.plan(OTHER_KEY, 5, N, K, check_available=False).row.M == 8  # aiter's M bucketing
    assert r.plan(FAKE_KEY, 5, N, K, check_available=False).cfg == FakeCfg(FAKE_KERNEL)
    assert fake.calls["available"] == 0 and fake.calls["bind"] == 0
    assert r.entries() == {} and r.bound_kernels() == []
    missing = r.plan(OTHER_KEY, 16, N, K, check_available=False)
    assert missing.backend is None and missing.reason == f"no tuned row for {OTHER_KEY} N={N} K={K} at this M"
    assert r.plan(None, 8, N, K).reason == "no device key"
    checked = r.plan(OTHER_KEY, 8, N, K)
    assert checked.backend is None and checked.reason == "row other.csv:2: gone: fake library missing"
    assert fake.calls["available"] == 1


# -- deterministic mode ------------------------------------------------------------------------
def test_deterministic_mode_skips_a_non_deterministic_kernel(make_bf16):
    w = make_bf16(N, K)
    atomics, ordered = ExactFake(name="atomics", deterministic=False), ExactFake(name="ordered")
    r = make_router([atomics, ordered], shapes=SHAPES, deterministic=True)
    assert r.deterministic
    x = make_bf16(4, K)
    assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("ordered", FAKE_KERNEL): 1} and atomics.calls["bind"] == 0
    (b,) = r.bound_kernels()
    assert b.deterministic

    alone = ExactFake(name="atomics", deterministic=False)
    r2 = make_router([alone], shapes=SHAPES, deterministic=True)
    assert_fp32_close(r2.call(x, w), x, w)
    why = f"row {_line(4)}: atomics: {FAKE_KERNEL} is not deterministic (deterministic mode is on)"
    assert r2.counters() == {("torch", why): 1} and alone.calls["bind"] == 0
    assert r2.describe_call(x, w) == ("torch", why)

    r3 = make_router([ExactFake(name="atomics", deterministic=False)], shapes=SHAPES)
    assert not r3.deterministic
    assert_fp32_close(r3.call(x, w), x, w)
    assert r3.counters() == {("atomics", FAKE_KERNEL): 1}


def test_deterministic_table_row_wins_when_present(make_bf16):
    w = make_bf16(N, K)
    det_table = fake_table([(8, N, K, OTHER_KERNEL)], name="det.csv")

    def router(det: bool):
        fake = ExactFake(kernels=(FAKE_KERNEL, OTHER_KERNEL), deterministic={FAKE_KERNEL, OTHER_KERNEL})
        return make_router([fake], shapes=SHAPES, det_table=det_table, deterministic=det)

    r = router(True)
    x8, x4 = make_bf16(8, K), make_bf16(4, K)
    assert r.describe_call(x8, w) == ("fake", f"{OTHER_KERNEL} (row det.csv:2)")
    assert r.describe_call(x4, w) == ("fake", f"{FAKE_KERNEL} (row {_line(4)})")  # no det row: the table's
    for x in (x8, x4):
        assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("fake", OTHER_KERNEL): 1, ("fake", FAKE_KERNEL): 1}

    off = router(False)  # the deterministic table is not read outside deterministic mode
    assert off.describe_call(x8, w) == ("fake", f"{FAKE_KERNEL} (row {_line(8)})")


def test_deterministic_mode_judges_each_kernel(make_bf16):
    fake = ExactFake(kernels=(FAKE_KERNEL, OTHER_KERNEL), deterministic={FAKE_KERNEL})
    r = make_router([fake], shapes=TWO_KERNELS, deterministic=True)
    w = make_bf16(N, K)
    for m in (2, 8):
        x = make_bf16(m, K)
        assert_fp32_close(r.call(x, w), x, w)
    why = f"row {_line(8, TWO_KERNELS)}: fake: {OTHER_KERNEL} is not deterministic (deterministic mode is on)"
    assert r.counters() == {("fake", FAKE_KERNEL): 1, ("torch", why): 1}
    assert fake.binds == [(FAKE_KERNEL, "cpu", N, K)]


# -- threads ---------------------------------------------------------------------------
def test_concurrent_first_calls_bind_and_probe_each_kernel_once(make_bf16, probes):
    fake = SlowBindFake(kernels=(FAKE_KERNEL, OTHER_KERNEL))
    r = make_router([fake], shapes=TWO_KERNELS)
    w = make_bf16(N, K)
    n_threads, rounds = 8, 3
    ms = (1, 2, 3, 4, 8, 13, 16, 32)
    xs = [[make_bf16(ms[i], K) for _ in range(rounds)] for i in range(n_threads)]
    outs: list = [[None] * rounds for _ in range(n_threads)]
    errors: list = []
    barrier = threading.Barrier(n_threads)

    def work(i):
        try:
            barrier.wait()
            for j in range(rounds):
                outs[i][j] = r.call(xs[i][j], w)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    for i in range(n_threads):
        for j in range(rounds):
            assert_fp32_close(outs[i][j], xs[i][j], w)
    assert sorted(fake.binds) == [(OTHER_KERNEL, "cpu", N, K), (FAKE_KERNEL, "cpu", N, K)]
    assert sorted(who[1] for who, *_ in probes) == sorted([FAKE_KERNEL, OTHER_KERNEL])
    assert fake.runs == 2 * PROBE_RUNS + n_threads * rounds and fake.violations == []
    expect: dict = {}
    for m in ms:
        key = ("fake", _kernel_of(r, m))
        expect[key] = expect.get(key, 0) + rounds
    assert r.counters() == expect


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
    assert c == {("fake", FAKE_KERNEL): 2, ("torch", "layer not selected"): 1}, c


def test_a_kernel_not_ready_inside_capture_falls_back_once_and_stays_enabled(caplog, make_bf16):
    import fakes.fake_backends as fb
    from sglang_fp32gemm.backends.base import NotReadyInCapture

    class NotReadyOnce(ExactFake):
        def compute(self, cfg, x, w):
            with self.lock:
                n = self.kernel_runs[cfg.name]
            if n == PROBE_RUNS + 1:  # the probe passed; the next call meets a stream without its workspace
                raise NotReadyInCapture("no workspace for this stream (fake)")
            return fb.splitk_fp32(x, w)

    fake = NotReadyOnce(name="late")
    r = make_router([fake], shapes=SHAPES)
    w = make_bf16(N, K)
    xs = [make_bf16(8, K) for _ in range(3)]
    with caplog.at_level(logging.INFO, logger=ROUTING_LOG):
        outs = [r.call(x, w) for x in xs]
    for x, out in zip(xs, outs):
        assert_fp32_close(out, x, w)
    warns = _warnings(caplog)
    assert len(warns) == 1 and "this captured call uses torch" in warns[0], warns
    # Not disabled: the third call ran the kernel again.
    assert fake.kernel_runs[FAKE_KERNEL] == PROBE_RUNS + 3
    assert all(b.fn is not None for b in r.bound_kernels())
    # Each call is counted where it went, so a bench's route check sees the fallback.
    assert r.counters() == {("late", FAKE_KERNEL): 2,
                            ("torch", f"late {FAKE_KERNEL}: no workspace for this stream (fake)"): 1}


def test_telemetry_sums_every_threads_counts_and_recounts_in_the_counting_thread():
    """Each thread counts into its own dict (no lock on the hot path); counters() is the exact sum."""
    from sglang_fp32gemm.telemetry import Telemetry

    t = Telemetry()
    a, b = ("fake", "k"), ("torch", "why")
    firsts: list = []
    barrier = threading.Barrier(4)

    def work():
        barrier.wait()
        firsts.append(t.count(a))
        for _ in range(999):
            t.count(a)
        t.recount(a, b)  # one of this thread's calls fell back

    ts = [threading.Thread(target=work) for _ in range(4)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(timeout=60)
    assert firsts == [True] * 4  # each thread's first call under the key
    assert t.counters() == {a: 4 * 999, b: 4}
    t.count(b)
    assert t.counters() == {a: 4 * 999, b: 5}
    t.reset()
    assert t.counters() == {}
    assert t.count(a) is True  # after reset, the first call again
    assert t.counters() == {a: 1}
