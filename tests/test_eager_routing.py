"""Eager calls of rows whose backend launches slowly (``Backend.eager_ok`` False), with fake backends on CPU.

A call under CUDA-graph capture takes its row's kernel; an eager call takes
the nearest row of the same (device, N, K) whose backend is eager_ok and
takes its M, or the fallback. The capture state is faked by patching
``routing.capturing``, the one place the router reads it.
"""

from __future__ import annotations

import logging
import re

import pytest
import torch

from conftest import assert_fp32_close, rand_bf16
from fakes.fake_backends import (FAKE_KERNEL, FAKE_KEY, OTHER_KERNEL, BindRaisingFake, Bf16RoundingFake, DecliningFake,
                                 ExactFake, RaisingFake, UnavailableFake, fake_table, make_router)
from sglang_fp32gemm import explain as explain_mod
from sglang_fp32gemm import routing
from sglang_fp32gemm.backends import probe as probe_mod

N, K = 32, 64
SLOW_KERNEL = "fake_slow_launch_kernel"
# Rows: the slow kernel at M 1, 2, 4 and 64; eager-capable ones at M 8 (FAKE) and 32 (OTHER).
ROWS = [(1, N, K, SLOW_KERNEL), (2, N, K, SLOW_KERNEL), (4, N, K, SLOW_KERNEL), (8, N, K, FAKE_KERNEL),
        (32, N, K, OTHER_KERNEL), (64, N, K, SLOW_KERNEL)]
LINE = {m: f"fake.csv:{i + 2}" for i, (m, *_) in enumerate(ROWS)}  # rows start on line 2
NO_ALT = "eager call: slow host cost exceeds torch's; no eager-capable row for this shape"
SLOW = ("slow", SLOW_KERNEL)


class SlowLaunchFake(ExactFake):
    """Exact, but its eager launch is declared heavy (as cutedsl's)."""

    eager_ok = False


def slow(**kw) -> SlowLaunchFake:
    return SlowLaunchFake(name="slow", kernels=(SLOW_KERNEL,), **kw)


def fast(cls=ExactFake, **kw) -> ExactFake:
    return cls(name="fast", kernels=(FAKE_KERNEL, OTHER_KERNEL), **kw)


@pytest.fixture
def capture(monkeypatch) -> list:
    """``capture[0]``: whether calls are under CUDA-graph capture (starts False)."""
    state = [False]
    monkeypatch.setattr(routing, "capturing", lambda x: state[0])
    return state


def _call(r, m: int, w, captured: bool, capture: list):
    capture[0] = captured
    x = rand_bf16(m, K)
    before = r.counters()
    out = r.call(x, w)
    assert_fp32_close(out, x, w)
    (key, n), = ((k_, v - before.get(k_, 0)) for k_, v in r.counters().items() if v != before.get(k_, 0))
    assert n == 1
    return key


@pytest.mark.parametrize("m, eager", [(1, FAKE_KERNEL), (3, FAKE_KERNEL), (4, FAKE_KERNEL),
                                      (40, OTHER_KERNEL), (64, OTHER_KERNEL)])
def test_captured_calls_run_the_rows_kernel_and_eager_calls_the_nearest_eager_capable_row(m, eager, capture):
    # M <= 4: the smallest row at or above is M=8's; M 40-64 (the M=64 row): none above, M=32's is the largest below.
    s, f = slow(), fast()
    r = make_router([s, f], shapes=ROWS)
    w = rand_bf16(N, K)
    for _ in range(2):
        assert _call(r, m, w, False, capture) == ("fast", eager)
        assert _call(r, m, w, True, capture) == SLOW
    assert r.counters() == {("fast", eager): 2, SLOW: 2}
    assert s.violations == [] and f.violations == []


def test_describe_call_says_what_an_eager_and_a_captured_call_get(capture):
    r = make_router([slow(), fast()], shapes=ROWS)
    x, w = rand_bf16(2, K), rand_bf16(N, K)
    eager = ("fast", f"{FAKE_KERNEL} (row {LINE[8]}; eager call: slow host cost exceeds torch's)")
    captured = ("slow", f"{SLOW_KERNEL} (row {LINE[2]})")
    assert r.describe_call(x, w) == eager  # not capturing
    assert r.describe_call(x, w, captured=True) == captured
    assert r.describe_call(x, w, captured=False) == eager
    capture[0] = True
    assert r.describe_call(x, w) == captured
    assert r.counters() == {}


def test_the_alternative_must_take_the_calls_m(capture):
    class NotBelow8(ExactFake):
        def supports(self, cfg, m, n, k):
            self._count("supports")
            return (False, "M < 8") if cfg.name == FAKE_KERNEL and m < 8 else (True, "ok")

    r = make_router([slow(), fast(NotBelow8)], shapes=ROWS)
    w = rand_bf16(N, K)
    assert _call(r, 4, w, False, capture) == ("fast", OTHER_KERNEL)  # M=8's kernel declines M=4: M=32's


def test_no_eager_capable_row_sends_eager_calls_to_the_fallback_with_one_log(capture, caplog):
    s = slow()
    r = make_router([s], shapes=[(1, N, K, SLOW_KERNEL), (8, N, K, SLOW_KERNEL)])
    w = rand_bf16(N, K)
    with caplog.at_level(logging.INFO, logger="sglang_fp32gemm"):
        for _ in range(3):
            assert _call(r, 8, w, False, capture) == ("torch", NO_ALT)
        assert _call(r, 8, w, True, capture) == SLOW
    assert r.counters() == {("torch", NO_ALT): 3, SLOW: 1}
    said = [rec.getMessage() for rec in caplog.records if "eager calls use" in rec.getMessage()]
    assert said == [f"sglang-fp32gemm: M=8 N={N} K={K} on cpu: eager calls use torch ({NO_ALT})"]


def test_eager_capable_rows_never_read_the_capture_state(monkeypatch):
    def read(x):
        raise AssertionError("the capture state was read for an eager_ok row")

    monkeypatch.setattr(routing, "capturing", read)
    r = make_router([slow(), fast()], shapes=ROWS)
    w = rand_bf16(N, K)
    for m in (8, 17, 32):  # 17: the M=32 row
        x = rand_bf16(m, K)
        assert_fp32_close(r.call(x, w), x, w)
    assert r.counters() == {("fast", FAKE_KERNEL): 1, ("fast", OTHER_KERNEL): 2}
    assert all(e.eager is None for e in r.entries().values())


def test_the_rows_kernel_is_bound_probed_and_run_at_each_m_when_resolved(capture):
    # Its eager calls go elsewhere, so whatever it sets up per M (the CuTe-DSL
    # kernel compiles per M) must happen before a capture: at resolution.
    s, f = slow(), fast()
    r = make_router([s, f], shapes=ROWS)
    w = rand_bf16(N, K)
    for m in (3, 3, 1):
        _call(r, m, w, False, capture)
    assert s.binds == [(SLOW_KERNEL, "cpu", N, K)] and f.binds == [(FAKE_KERNEL, "cpu", N, K)]
    # The probe's runs (at its row's M, 4), then one run at each resolved M; no eager call ran it.
    assert s.shapes == [(4, N, K)] * probe_mod.TRIALS + [(3, N, K), (1, N, K)]
    assert f.shapes[probe_mod.TRIALS:] == [(3, N, K), (3, N, K), (1, N, K)]


def test_a_failing_alternative_sends_eager_calls_to_the_fallback_and_leaves_captured_ones(capture):
    f = fast(RaisingFake, ok_runs=probe_mod.TRIALS)  # passes its probe, then raises
    r = make_router([slow(), f], shapes=ROWS)
    w = rand_bf16(N, K)
    why = f"fast {FAKE_KERNEL}: raised at run time (RuntimeError: fake kernel launch failed)"
    for _ in range(2):  # the call that raised took the fallback and is counted there, as are the later ones
        assert _call(r, 2, w, False, capture) == ("torch", why)
    assert _call(r, 2, w, True, capture) == SLOW


def test_a_failing_row_kernel_leaves_eager_calls_on_the_alternative(capture):
    class SlowRaising(RaisingFake):
        eager_ok = False

    # Probe and warm-up pass; the first captured call raises.
    r = make_router([SlowRaising(name="slow", kernels=(SLOW_KERNEL,), ok_runs=probe_mod.TRIALS + 1), fast()],
                    shapes=ROWS)
    w = rand_bf16(N, K)
    why = f"slow {SLOW_KERNEL}: raised at run time (RuntimeError: fake kernel launch failed)"
    for _ in range(2):  # counted where it went: the fallback
        assert _call(r, 2, w, True, capture) == ("torch", why)
    assert _call(r, 2, w, False, capture) == ("fast", FAKE_KERNEL)


def test_deterministic_mode_takes_only_a_deterministic_alternative(capture):
    r = make_router([slow(), fast(deterministic=False)], shapes=ROWS, deterministic=True)
    w = rand_bf16(N, K)
    assert _call(r, 2, w, True, capture) == SLOW
    assert _call(r, 2, w, False, capture) == ("torch", NO_ALT)


def test_cpu_tensors_are_never_captured(monkeypatch):
    def read():
        raise AssertionError("read the CUDA stream for a CPU tensor")

    monkeypatch.setattr(routing, "_stream_capturing", read)
    assert routing.capturing(torch.zeros(2, 2)) is False


def test_explain_shows_what_eager_calls_of_a_slow_rows_shape_get():
    r = make_router([slow(), fast()], shapes=ROWS)
    want = {1: f"slow {SLOW_KERNEL} (row {LINE[1]}); eager calls: fast {FAKE_KERNEL} (row {LINE[8]})",
            8: f"fast {FAKE_KERNEL} (row {LINE[8]})",
            64: f"slow {SLOW_KERNEL} (row {LINE[64]}); eager calls: fast {OTHER_KERNEL} (row {LINE[32]})"}
    for m, text in want.items():
        assert explain_mod._shape_route(r, FAKE_KEY, None, m, N, K) == text  # from the table (a device key)
        assert explain_mod._shape_route(r, None, torch.device("cpu"), m, N, K) == text  # resolved here
    alone = make_router([slow()], shapes=ROWS[:3])
    assert explain_mod._shape_route(alone, FAKE_KEY, None, 2, N, K) == \
        f"slow {SLOW_KERNEL} (row {LINE[2]}); eager calls: torch ({NO_ALT})"


def test_explain_for_an_h200_names_the_eager_kernel_of_every_cutedsl_row():
    code, full = explain_mod.explain("sm90:132", max_m=32)
    assert code == 0, full
    # What calls outside SGLang's multi-stream region take (the serial table) is tested in test_serial_routing.
    outside = "; outside SGLang's multi-stream region: "
    text = "\n".join(line.split(outside)[0] for line in full.splitlines())
    # SGLang's warp split-K (not eager_ok); the cutedsl-dot kernel launches cheaply and keeps its eager calls.
    cutedsl = [line for line in text.splitlines() if line.strip().startswith("M=") and " cutedsl " in line]
    assert cutedsl, text  # the packaged sm90 table routes some shapes to cutedsl
    for line in cutedsl:
        assert re.search(r"; eager calls: (triton triton_epoch|triton-det triton_splitk)_fp32_", line), line
    # A Triton row's eager calls go elsewhere only where the eager table names a kernel faster alone (run 14:
    # the dot kernel at M <= 2; run 18: the tensor-core kernel at M 3-16; run 28: a region-ranked Triton row at
    # M=16 N=2048 over the eager row that had served its torch row), never to a kernel with an expensive eager
    # launch.
    triton_rows = [line for line in text.splitlines() if " triton triton" in line.split(";")[0]]
    redirected = [line for line in triton_rows if "eager calls" in line]
    assert triton_rows and len(redirected) < len(triton_rows)
    for line in redirected:
        assert re.search(r"; eager calls: (cutedsl-dot cutedsl_dot|cutedsl-mma cutedsl_mma|triton triton_epoch"
                         r"|triton-det triton_splitk)_\S+ "
                         r"\(row configs/sm90_eager.csv:\d+\)$", line), line
    # The region-ranked torch rows of V4-Flash's indexer GEMM: eager calls take the eager table's kernel (V4-Pro's
    # has no torch row at M <= 32 since run 28).
    block = text.split("N=512 K=4096 (V4-Flash indexer kv_score):")[1].split("  N=")[0]
    rows = [line for line in block.splitlines() if line.strip().startswith("M=")]
    torch_rows = [line for line in rows if re.match(r"^\s+M=\S+\s+torch ", line)]
    assert torch_rows and all(
        re.search(r"^\s+M=\S+\s+torch \(row configs/sm90.csv:\d+: libtype torch is served by torch\); "
                  r"eager calls: (triton triton_epoch|cutedsl-dot cutedsl_dot|cutedsl-mma cutedsl_mma)_\S+ "
                  r"\(row configs/sm90_eager.csv:\d+\)$",
                  line) for line in torch_rows), block


# -- the eager table (*_eager.csv): rows for calls outside capture where they differ -------------
TORCH_ROWS = fake_table([(1, N, K), (8, N, K), (32, N, K)], libtype="torch", kernel="")
TORCH = "row fake.csv:{}: libtype torch is served by torch"


def eager_rows(*shapes) -> "object":
    return fake_table(shapes, name="fake_eager.csv")


def test_the_eager_table_sends_eager_calls_of_a_torch_row_to_its_kernel(capture):
    """The table's torch row (torch wins beside SGLang's other streams) serves captured calls; eager calls,
    which SGLang runs on one stream, take the eager table's row; where it has none, the table's."""
    f = fast()
    r = make_router([f], table=TORCH_ROWS, eager_table=eager_rows((1, N, K, FAKE_KERNEL), (32, N, K, OTHER_KERNEL)))
    w = rand_bf16(N, K)
    for _ in range(2):
        assert _call(r, 1, w, False, capture) == ("fast", FAKE_KERNEL)
        assert _call(r, 1, w, True, capture) == ("torch", TORCH.format(2))
        assert _call(r, 20, w, False, capture) == ("fast", OTHER_KERNEL)  # 20 -> 32 in both tables
        assert _call(r, 8, w, False, capture) == ("torch", TORCH.format(3))  # no eager row serves 8
    assert f.violations == []
    assert explain_mod._shape_route(r, FAKE_KEY, None, 1, N, K) == \
        f"torch ({TORCH.format(2)}); eager calls: fast {FAKE_KERNEL} (row fake_eager.csv:2)"


def test_an_eager_row_serves_only_the_fast_rows_own_m(capture):
    """Rounded up, M=2 reaches the eager table's M=16 row, which was made for the fast table's torch row
    at 16 (M 3-16): eager calls of the kernel row at M=2 keep that kernel; those of M=3 take the eager row."""
    from fakes.fake_backends import rows_csv
    from sglang_fp32gemm.table import TunedTable, parse_csv

    table = TunedTable([("fake.csv", parse_csv(rows_csv([(2, N, K)]), "fake.csv")),
                        ("pins.csv", parse_csv(rows_csv([(16, N, K)], libtype="torch", kernel=""), "pins.csv"))])
    r = make_router([fast()], table=table, eager_table=eager_rows((16, N, K, OTHER_KERNEL)))
    w = rand_bf16(N, K)
    assert _call(r, 2, w, False, capture) == ("fast", FAKE_KERNEL)
    assert _call(r, 3, w, False, capture) == ("fast", OTHER_KERNEL)
    assert _call(r, 3, w, True, capture) == ("torch", "row pins.csv:2: libtype torch is served by torch")


def test_the_eager_table_is_left_out_where_it_cannot_help(capture):
    """Deterministic mode; an eager row naming the table's own kernel; an eager row whose backend
    launches slowly outside a graph (the rule for such rows applies instead)."""
    w = rand_bf16(N, K)
    det = make_router([fast()], table=TORCH_ROWS, det_table=TORCH_ROWS, deterministic=True,
                      eager_table=eager_rows((1, N, K, FAKE_KERNEL)))
    assert _call(det, 1, w, False, capture) == ("torch", TORCH.format(2))
    same = make_router([fast()], shapes=[(1, N, K)], eager_table=eager_rows((1, N, K, FAKE_KERNEL)))
    assert same.plan(FAKE_KEY, 1, N, K).eager is None
    slow_eager = make_router([slow(), fast()], shapes=ROWS, eager_table=eager_rows((1, N, K, SLOW_KERNEL)))
    assert _call(slow_eager, 1, w, False, capture) == ("fast", FAKE_KERNEL)  # the nearest eager-capable row


@pytest.mark.parametrize("eager_backend", [UnavailableFake, BindRaisingFake, Bf16RoundingFake, DecliningFake])
def test_an_eager_row_that_cannot_serve_leaves_eager_calls_on_the_rows_kernel(capture, eager_backend):
    """The eager table is an optimisation over a kernel row: where its kernel's backend is missing (e.g. no
    TVM-FFI on an older SGLang), does not bind, fails its probe or declines the shape, eager calls run the
    row's own kernel, as they would without the eager row (not torch)."""
    other = eager_backend(name="other", kernels=("fake_eager_kernel",), libtype="cutedsl")
    r = make_router([fast(), other], shapes=[(1, N, K)],
                    eager_table=fake_table([(1, N, K, "fake_eager_kernel")], name="fake_eager.csv", libtype="cutedsl"))
    w = rand_bf16(N, K)
    for captured in (False, True, False):
        assert _call(r, 1, w, captured, capture) == ("fast", FAKE_KERNEL)
    assert r.resolve(torch.device("cpu"), 1, N, K).eager is None


def test_an_eager_row_beside_a_torch_row_that_cannot_serve_leaves_eager_calls_on_torch(capture):
    other = UnavailableFake(name="other", kernels=("fake_eager_kernel",), libtype="cutedsl")
    r = make_router([other], table=TORCH_ROWS,
                    eager_table=fake_table([(1, N, K, "fake_eager_kernel")], name="fake_eager.csv", libtype="cutedsl"))
    w = rand_bf16(N, K)
    assert _call(r, 1, w, False, capture)[0] == "torch"
    assert _call(r, 1, w, True, capture) == ("torch", TORCH.format(2))


def test_a_failing_eager_table_kernel_sends_eager_calls_to_the_fallback(capture):
    r = make_router([RaisingFake(name="fast", kernels=(FAKE_KERNEL,))], table=TORCH_ROWS,
                    eager_table=eager_rows((1, N, K, FAKE_KERNEL)))
    w = rand_bf16(N, K)
    route, _ = _call(r, 1, w, False, capture)
    assert route == "torch"
    assert _call(r, 1, w, True, capture) == ("torch", TORCH.format(2))


class PreparingSlow(SlowLaunchFake):
    """A slow-launch fake whose kernel has per-stream state (``fn.prepare``, as the Triton kernels' buffers)."""

    def __init__(self, fail: bool = False, **kw):
        super().__init__(name="slow", kernels=(SLOW_KERNEL,), **kw)
        self.prepared: list[int] = []
        self.fail = fail

    def bind(self, cfg, device, n, k):
        fn = super().bind(cfg, device, n, k)

        def prepare(m: int) -> None:
            if self.fail:
                raise RuntimeError("out of memory")
            self.prepared.append(m)

        fn.prepare = prepare
        return fn


def test_each_eager_call_sent_elsewhere_prepares_the_captured_kernel_for_its_stream(capture):
    # The graph captured after the eager calls (SGLang's warm-up runs) runs the row's
    # kernel, whose per-stream state only an eager call outside capture can make.
    s = PreparingSlow()
    r = make_router([s, fast()], shapes=ROWS)
    w = rand_bf16(N, K)
    assert _call(r, 3, w, False, capture) == ("fast", FAKE_KERNEL)
    assert _call(r, 2, w, False, capture) == ("fast", FAKE_KERNEL)
    assert s.prepared == [3, 2]
    assert _call(r, 3, w, True, capture) == SLOW  # a captured call prepares nothing
    assert s.prepared == [3, 2]
    # A row with no eager alternative never prepares: its eager calls run the kernel itself.
    assert all(e.prepare is None for e in r.entries().values() if e.eager is None)


def test_a_failing_prepare_is_logged_once_and_the_eager_call_still_runs(capture, caplog):
    s = PreparingSlow(fail=True)
    r = make_router([s, fast()], shapes=ROWS)
    w = rand_bf16(N, K)
    with caplog.at_level(logging.WARNING, logger="sglang_fp32gemm"):
        for _ in range(3):
            assert _call(r, 1, w, False, capture) == ("fast", FAKE_KERNEL)
    msgs = [rec.getMessage() for rec in caplog.records if "preparing a stream" in rec.getMessage()]
    assert len(msgs) == 1 and "RuntimeError: out of memory" in msgs[0], msgs
    assert _call(r, 1, w, True, capture) == SLOW  # the kernel stays enabled for captured calls
