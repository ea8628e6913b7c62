"""AiterBackend against a stand-in aiter (no ROCm here): parse, supports(cfg, m, n, k), bind.

The stand-ins live in tests/fakes/fake_aiter.py; the router's probe of the
bf16-rounding stand-in (install_fake_aiter(mode="bf16")) is in test_routing.py.
Results are compared with the float64 product of fresh random inputs.
"""

import inspect
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import assert_fp32_close, rand_bf16, rel_err  # noqa: E402
from fakes.fake_aiter import (  # noqa: E402
    FIXED_NAME, LOSSY_NAME, default_rows, install_fake_aiter, uninstall_fake_aiter)
from fakes.fake_backends import fake_table, make_router  # noqa: E402

from sglang_fp32gemm.backends import probe as probe_mod  # noqa: E402
from sglang_fp32gemm.backends.aiter_tgemm import AiterBackend  # noqa: E402
from sglang_fp32gemm.backends.base import OK  # noqa: E402
from sglang_fp32gemm.table import DeviceKey  # noqa: E402

M, N, K = 8, 1024, 7168
GFX950 = DeviceKey("gfx950", 256)
CPU = torch.device("cpu")
# Same tile as FIXED_NAME, one wave along K and no split: no atomics.
NO_ATOMICS_NAME = "flydsl_hgemm_abf16_wbf16_fp32_t16x64x128x4_ks1_w1x4x1_bias0_ktail0_gm1_pft_gfx950"


def _backend():
    b = AiterBackend()
    b.device_types = ("cuda", "cpu")  # the fake runs on CPU tensors
    return b


def _cfg(name=FIXED_NAME):
    return AiterBackend().parse(name)


def _xw(m=M, n=N, k=K):
    return rand_bf16(m, k), rand_bf16(n, k)


def test_names():
    b = AiterBackend()
    assert (b.name, b.libtype) == ("aiter", "flydsl")
    assert b.isolated_probe  # never run on an MI355X by this project: first probe in a child


def test_unavailable_without_rocm_torch(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, rocm=False)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    ok, why = AiterBackend().available()
    assert not ok and "ROCm" in why


def test_unavailable_without_aiter(monkeypatch):
    uninstall_fake_aiter()
    monkeypatch.setattr(torch.version, "hip", "6.4.0-fake", raising=False)
    # Make sure no aiter is importable, even if one is installed somewhere.
    monkeypatch.setitem(sys.modules, "aiter", None)
    ok, why = AiterBackend().available()
    assert not ok and "aiter not importable" in why


def test_available_with_fake(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    assert AiterBackend().available() == (True, "ok")


# -- parse and deterministic: pure, import-free -------------------------------------------
def test_parse_round_trips_and_needs_no_aiter(monkeypatch):
    uninstall_fake_aiter()
    monkeypatch.setitem(sys.modules, "aiter", None)  # parse must not import aiter
    b = AiterBackend()
    for name in (FIXED_NAME, LOSSY_NAME, NO_ATOMICS_NAME):
        cfg = b.parse(name)
        assert b.kernel_name(cfg) == name and b.parse(b.kernel_name(cfg)) == cfg
    assert b.parse(FIXED_NAME).out_dtype == "fp32" and b.parse(LOSSY_NAME).out_dtype == "bf16"


@pytest.mark.parametrize("name", ["", "fake_splitk_kernel", "triton_splitk_fp32_bm16_bn32_bk128_sk8_w4_s5",
                                  FIXED_NAME + "_x", FIXED_NAME.replace("abf16", "afp32"),
                                  FIXED_NAME.replace("_ks7_", "_ks07_")])
def test_parse_rejects_other_names_with_value_error(name):
    with pytest.raises(ValueError):
        AiterBackend().parse(name)


def test_aiter_never_claims_determinism_whatever_the_row_names():
    # tgemm.mm runs the kernel aiter's own table picks, not our row's.
    b = AiterBackend()
    assert b.deterministic(b.parse(FIXED_NAME)) is False    # split-K 7: fp32 atomics
    assert b.deterministic(b.parse(NO_ATOMICS_NAME)) is False


# -- supports: what the installed aiter would run --------------------------------------------
def test_supports_fixed_build(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, fixed_kernel=True)
    b = _backend()
    assert b.supports(_cfg(), M, N, K) == OK
    # aiter's M rounding: M=3 has no row of its own and resolves to the M=16 row.
    assert b.supports(_cfg(), 3, N, K) == OK
    assert b.supports(_cfg(), 32, 2560, K) == OK


def test_rejects_build_without_fp32c_kernel(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, fixed_kernel=False)
    ok, why = _backend().supports(_cfg(), M, N, K)
    assert not ok and "hgemm_bf16_fp32c_" in why and "bf16" in why


def test_rejects_fp32_row_pointing_at_bf16_kernel(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, rows=default_rows(kernel_name=LOSSY_NAME))
    ok, why = _backend().supports(_cfg(), M, N, K)
    assert not ok and "bf16" in why and LOSSY_NAME in why


def test_rejects_non_flydsl_resolution(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, rows=default_rows(kernel_name="", libtype="hipblaslt"))
    ok, why = _backend().supports(_cfg(), M, N, K)
    assert not ok and "hipblaslt" in why


def test_rejects_untuned_shape(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    ok, why = _backend().supports(_cfg(), M, 512, K)
    assert not ok and "no tuned row" in why
    ok, why = _backend().supports(_cfg(), 300, N, K)
    assert not ok and "no tuned row" in why


def test_lookup_missing_is_a_reason(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    monkeypatch.delattr(sys.modules["aiter.tuned_gemm"], "get_GEMM_A16W16_config")
    ok, why = _backend().supports(_cfg(), M, N, K)
    assert not ok and "lookup" in why


def test_lookup_that_raises_is_a_reason(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)

    def broken(*a, **kw):
        raise KeyError("corrupt table")

    monkeypatch.setattr(sys.modules["aiter.tuned_gemm"], "get_GEMM_A16W16_config", broken)
    ok, why = _backend().supports(_cfg(), M, N, K)
    assert not ok and "lookup failed" in why and "KeyError" in why


# -- bind: the callable the router runs ----------------------------------------------------
@pytest.mark.parametrize("m", [1, 3, 8, 32])
def test_bound_exact_fake_is_fp32_accurate(tmp_path, monkeypatch, m):
    install_fake_aiter(tmp_path, monkeypatch, mode="exact")
    fn = _backend().bind(_cfg(), CPU, N, K)
    for _ in range(2):  # fresh inputs each call, one bound callable
        x, w = _xw(m=m)
        out = fn(x, w)
        assert out.dtype == torch.float32 and tuple(out.shape) == (m, N)
        assert_fp32_close(out, x, w)
    calls = sys.modules["aiter.tuned_gemm"].CALLS
    assert calls[-1] == ((m, K), (N, K), torch.float32)


def test_bound_bf16_fake_is_visibly_rounded_and_fails_the_probe(tmp_path, monkeypatch):
    """The stand-in for a deployed aiter: fp32 dtype, bf16 values (what the probe must catch)."""
    install_fake_aiter(tmp_path, monkeypatch, mode="bf16")
    fn = _backend().bind(_cfg(), CPU, N, K)
    x, w = _xw()
    out = fn(x, w)
    assert out.dtype == torch.float32
    assert torch.equal(out, out.to(torch.bfloat16).float())
    assert rel_err(out, x.double() @ w.double().t()) > 1e-4
    r = probe_mod.run_probe(fn, CPU, M, N, K)
    assert not r.ok and 1e-4 < r.rel_err < 1e-2, r.describe()


def test_bound_exact_fake_passes_the_probe(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, mode="exact")
    r = probe_mod.run_probe(_backend().bind(_cfg(), CPU, N, K), CPU, M, N, K)
    assert r.ok and r.rel_err <= probe_mod.REL_TOL, r.describe()


def test_bind_refuses_a_device_type_it_does_not_run_on(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError, match="does not run on cpu"):
        AiterBackend().bind(_cfg(), CPU, N, K)  # the real device types: cuda only


def test_bound_kernel_rejects_wrong_dtype(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    tg = sys.modules["aiter.tuned_gemm"]
    monkeypatch.setattr(tg.tgemm.__class__, "mm", lambda self, inp, weights, bias=None, otype=None,
                        scale_a=None, scale_b=None, scale_c=None: torch.zeros(M, N, dtype=torch.bfloat16))
    fn = _backend().bind(_cfg(), CPU, N, K)
    with pytest.raises(RuntimeError, match="expected float32"):
        fn(*_xw())


def test_bound_kernel_rejects_wrong_shape(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    tg = sys.modules["aiter.tuned_gemm"]
    monkeypatch.setattr(tg.tgemm.__class__, "mm", lambda self, inp, weights, bias=None, otype=None,
                        scale_a=None, scale_b=None, scale_c=None: torch.zeros(M, N - 1))
    fn = _backend().bind(_cfg(), CPU, N, K)
    with pytest.raises(RuntimeError, match="expected float32"):
        fn(*_xw())


def test_fake_mm_has_the_real_signature(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    from aiter.tuned_gemm import tgemm

    params = list(inspect.signature(tgemm.mm).parameters)
    assert params == ["inp", "weights", "bias", "otype", "scale_a", "scale_b", "scale_c"]


# -- through the router ----------------------------------------------------------------------
def test_router_leaves_a_build_without_the_fix_to_torch_without_binding(tmp_path, monkeypatch, make_bf16):
    install_fake_aiter(tmp_path, monkeypatch, fixed_kernel=False)
    b = _backend()
    bound = []
    monkeypatch.setattr(b, "bind", lambda *a: bound.append(a))
    r = make_router([b], table=fake_table([(M, N, K)], gfx=GFX950.gfx, cu_num=GFX950.cu_num, libtype="flydsl",
                                          kernel=FIXED_NAME), key=GFX950)
    x, w = make_bf16(M, K), make_bf16(N, K)
    assert_fp32_close(r.call(x, w), x, w)
    ((route, why), count), = r.counters().items()
    assert (route, count) == ("torch", 1) and "hgemm_bf16_fp32c_" in why and bound == []


def test_deterministic_mode_does_not_route_to_an_aiter_kernel_with_atomics(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)  # aiter's own rows: FIXED_NAME
    b = _backend()
    assert not b.deterministic(b.parse(FIXED_NAME))
    table = fake_table([(M, N, K)], gfx=GFX950.gfx, cu_num=GFX950.cu_num, libtype="flydsl",
                       kernel=NO_ATOMICS_NAME)
    r = make_router([b], table=table, key=GFX950, deterministic=True)
    p = r.plan(GFX950, M, N, K)
    assert p.backend is None, p
