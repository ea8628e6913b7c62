"""Property tests: whatever the route, the result is the fp32 product x @ w^T.

550 hypothesis examples per run (300 + 250), on small N and K. Results are
compared with the float64 product of the same inputs (and with torch's fp32
upcast product); with a fake fast backend, the route a call takes is checked
against the router's rules and against describe_call().
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_fp32_close
from fakes.fake_backends import FAKE_KERNEL, ExactFake, make_config, make_router
from sglang_fp32gemm import routing
from sglang_fp32gemm.backends.probe import TRIALS as PROBE_RUNS
from sglang_fp32gemm.table import TunedTable

DTYPES = {
    "bf16": (torch.bfloat16, torch.bfloat16),
    "fp16": (torch.float16, torch.float16),
    "fp32 weight": (torch.bfloat16, torch.float32),
}
LAYOUTS = ("contiguous", "x column slice", "x transposed view", "w transposed view", "3-D x")


def _build(seed: int, m: int, n: int, k: int, dtypes: str, layout: str, lead: int):
    """x with M rows in total (3-D: lead x ceil(M/lead)) and w [N, K], in the given layout."""
    g = torch.Generator().manual_seed(seed)
    xd, wd = DTYPES[dtypes]

    def rnd(*shape, dtype):
        t = torch.randn(*shape, generator=g)
        return torch.where(t == 0, torch.full_like(t, 0.5), t).to(dtype)

    w = rnd(n, k, dtype=wd)
    if layout == "x column slice":
        x = rnd(m, 2 * k, dtype=xd)[:, 1::2]
    elif layout == "x transposed view":
        x = rnd(k, m, dtype=xd).t()
    elif layout == "w transposed view":
        x = rnd(m, k, dtype=xd)
        w = rnd(k, n, dtype=wd).t()
    elif layout == "3-D x":
        x = rnd(lead, -(-m // lead), k, dtype=xd)
    else:
        x = rnd(m, k, dtype=xd)
    return x, w


def _check(out, x, w):
    x2 = x.reshape(-1, x.shape[-1])
    assert out.dtype == torch.float32
    assert tuple(out.shape) == (*x.shape[:-1], w.shape[0])
    assert_fp32_close(out.reshape(x2.shape[0], w.shape[0]), x2, w)
    # Equal, up to fp32 summation order, to the caller's usual upcast product.
    ref32 = torch.mm(x2.float(), w.float().t())
    torch.testing.assert_close(out.reshape(ref32.shape), ref32, atol=1e-2, rtol=1e-4)


@pytest.fixture(scope="module")
def routers():
    """The real router (default backends, packaged tables), enabled and disabled."""
    from sglang_fp32gemm.backends import default_backends

    table = TunedTable.load()
    return {e: routing.Router(make_config(table, enabled=e), default_backends()) for e in (True, False)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**62), m=st.integers(0, 300), n=st.integers(1, 48), k=st.integers(1, 64),
       dtypes=st.sampled_from(sorted(DTYPES)), layout=st.sampled_from(LAYOUTS), lead=st.integers(1, 3),
       enabled=st.booleans(), with_fallback=st.booleans())
def test_routed_linear_equals_the_fp32_product(routers, seed, m, n, k, dtypes, layout, lead, enabled,
                                               with_fallback):
    x, w = _build(seed, m, n, k, dtypes, layout, lead)
    routing.reset_router(routers[enabled])
    router = routers[enabled]
    before = router.counters()
    if with_fallback:
        expected = torch.mm(x.reshape(-1, k).float(), w.float().t()).reshape(*x.shape[:-1], n)
        out = routing.linear_bf16_fp32(x, w, fallback=lambda: expected)
        assert out is expected  # no fast backend on CPU: the caller's own result, untouched
    else:
        out = routing.linear_bf16_fp32(x, w)
    _check(out, x, w)
    # CPU calls never take a fast route, whatever the shape.
    assert all(route == "torch" for route, _ in router.counters()), router.counters()
    assert router.describe_call(x, w)[0] == "torch"
    if not enabled:
        assert router.counters() == before


# -- with a fake fast backend, so the fast path is exercised ---------------------------------
FAST_N = (16, 32, 48)
FAST_K = (32, 64)
FAST_M = (1, 2, 4, 8, 16, 32, 64)


def _expect_row(m: int) -> bool:
    if m < 1 or m > 256:
        return False
    pow2 = 1 << (m - 1).bit_length()
    return m in FAST_M or ((m + 15) // 16 * 16) in FAST_M or pow2 in FAST_M


@pytest.fixture(scope="module")
def fast():
    fake = ExactFake(name="fastfake")
    r = make_router([fake], shapes=[(m, n, k) for m in FAST_M for n in FAST_N for k in FAST_K])
    yield fake, r
    # The property must have reached both routes, and the router kept the kernel contract.
    c = r.counters()
    assert c.get(("fastfake", FAKE_KERNEL), 0) > 0, c
    assert sum(v for (route, _), v in c.items() if route == "torch") > 0, c
    assert fake.violations == []


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**62),
       m=st.one_of(st.sampled_from(list(range(1, 34)) + [48, 64, 65, 100, 128, 256, 257]), st.integers(0, 300)),
       n=st.one_of(st.sampled_from(FAST_N), st.integers(1, 48)),
       k=st.one_of(st.sampled_from(FAST_K), st.integers(1, 64)),
       dtypes=st.sampled_from(["bf16"] * 3 + sorted(DTYPES)),
       layout=st.sampled_from(["contiguous"] * 4 + list(LAYOUTS)), lead=st.integers(1, 3))
def test_fast_path_result_and_route_are_right(fast, seed, m, n, k, dtypes, layout, lead):
    fake, router = fast
    x, w = _build(seed, m, n, k, dtypes, layout, lead)
    routing.reset_router(router)
    runs, bound, before = fake.runs, len(router.bound_kernels()), router.counters()
    route, detail = router.describe_call(x, w)
    assert router.counters() == before  # describing resolves, but counts nothing
    out = routing.linear_bf16_fp32(x, w)
    _check(out, x, w)
    # The router's rules: 2-D bf16 x bf16, unit stride along K for x, contiguous w,
    # 1 <= M <= 256 with a row (aiter's M buckets).
    eligible = (dtypes == "bf16" and x.dim() == 2 and n in FAST_N and k in FAST_K and _expect_row(m)
                and x.stride(1) == 1 and w.is_contiguous())
    delta = {key: v - before.get(key, 0) for key, v in router.counters().items() if v != before.get(key, 0)}
    ((got_route, got_detail), count), = delta.items()
    assert count == 1 and got_route == route, (route, detail, delta)
    assert detail == got_detail or detail.startswith(f"{got_detail} (row "), (detail, got_detail)
    assert (got_route, got_detail) == (("fastfake", FAKE_KERNEL) if eligible else ("torch", got_detail))
    # One bind and one probe per (N, K), the first time an eligible call needs it.
    new_bound = len(router.bound_kernels()) - bound
    assert new_bound in ((0, 1) if eligible else (0,))
    assert fake.runs - runs == (1 + PROBE_RUNS * new_bound if eligible else 0), (m, n, k, dtypes, layout)
    assert len(router.bound_kernels()) == len(fake.binds) and fake.violations == []
