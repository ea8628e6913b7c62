"""AiterBackend's decisions against a stand-in aiter (no ROCm here).

The stand-ins live in tests/fakes/fake_aiter.py; the probe's own test (that a
bf16-rounding aiter gets disabled) uses the same install_fake_aiter(mode="bf16").
"""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes.fake_aiter import (  # noqa: E402
    FIXED_NAME, LOSSY_NAME, default_rows, install_fake_aiter, uninstall_fake_aiter)

from sglang_fp32gemm.backends.aiter_tgemm import AiterBackend  # noqa: E402
from sglang_fp32gemm.table import TunedRow  # noqa: E402

M, N, K = 8, 1024, 7168


def _row(outdtype="torch.float32", name=FIXED_NAME):
    return TunedRow("gfx950", 256, M, N, K, False, "torch.bfloat16", outdtype, False, False,
                    "flydsl", 0, 7, 6.27, name, 0.0, 0.0, 0.0)


def _backend():
    b = AiterBackend()
    b.device_types = ("cuda", "cpu")  # the fake runs on CPU tensors
    return b


def _xw(m=M, n=N, k=K, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    return x, w


def _ref(x, w):
    return x.double() @ w.double().t()


def test_names():
    b = AiterBackend()
    assert (b.name, b.libtype) == ("aiter", "flydsl")


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


def test_supports_fixed_build(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, fixed_kernel=True)
    x, w = _xw()
    assert _backend().supports(x, w, _row()) == (True, "ok")
    # aiter's M rounding: M=3 has no row of its own and resolves to the M=16 row.
    x3, _ = _xw(m=3)
    assert _backend().supports(x3, w, _row())[0]


def test_rejects_build_without_fp32c_kernel(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, fixed_kernel=False)
    x, w = _xw()
    ok, why = _backend().supports(x, w, _row())
    assert not ok and "hgemm_bf16_fp32c_" in why and "bf16" in why


def test_rejects_fp32_row_pointing_at_bf16_kernel(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, rows=default_rows(kernel_name=LOSSY_NAME))
    x, w = _xw()
    ok, why = _backend().supports(x, w, _row())
    assert not ok and "bf16" in why and LOSSY_NAME in why


def test_rejects_non_flydsl_resolution(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, rows=default_rows(kernel_name="", libtype="hipblaslt"))
    x, w = _xw()
    ok, why = _backend().supports(x, w, _row())
    assert not ok and "hipblaslt" in why


def test_rejects_untuned_shape(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    x, w = _xw(n=512)
    ok, why = _backend().supports(x, w, _row())
    assert not ok and "no tuned row" in why


def test_rejects_bad_inputs(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    b = _backend()
    x, w = _xw()
    assert not b.supports(x.float(), w, _row())[0]
    assert not b.supports(x, w, _row(outdtype="torch.bfloat16"))[0]
    assert not b.supports(x[:, ::2], w[:, ::2], _row())[0]
    ok, why = AiterBackend().supports(x, w, _row())   # CPU tensors, real device types
    assert not ok and "device" in why


def test_lookup_missing_is_a_reason(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    monkeypatch.delattr(sys.modules["aiter.tuned_gemm"], "get_GEMM_A16W16_config")
    x, w = _xw()
    ok, why = _backend().supports(x, w, _row())
    assert not ok and "lookup" in why


def test_run_exact_fake_is_fp32_accurate(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch, mode="exact")
    x, w = _xw()
    out = _backend().run(x, w, _row())
    assert out.dtype == torch.float32 and out.shape == (M, N)
    rel = ((out.double() - _ref(x, w)).norm() / _ref(x, w).norm()).item()
    assert rel < 1e-5
    calls = sys.modules["aiter.tuned_gemm"].CALLS
    assert calls[-1] == ((M, K), (N, K), torch.float32)


def test_run_bf16_fake_is_visibly_rounded(tmp_path, monkeypatch):
    """The stand-in for a deployed aiter: fp32 dtype, bf16 values (what the probe must catch)."""
    install_fake_aiter(tmp_path, monkeypatch, mode="bf16")
    x, w = _xw()
    out = _backend().run(x, w, _row())
    assert out.dtype == torch.float32
    assert torch.equal(out, out.to(torch.bfloat16).float())
    rel = ((out.double() - _ref(x, w)).norm() / _ref(x, w).norm()).item()
    assert rel > 1e-4


def test_run_rejects_wrong_dtype(tmp_path, monkeypatch):
    install_fake_aiter(tmp_path, monkeypatch)
    tg = sys.modules["aiter.tuned_gemm"]
    monkeypatch.setattr(tg.tgemm.__class__, "mm", lambda self, inp, weights, bias=None, otype=None,
                        scale_a=None, scale_b=None, scale_c=None: torch.zeros(1, 1, dtype=torch.bfloat16))
    x, w = _xw()
    with pytest.raises(RuntimeError, match="expected float32"):
        _backend().run(x, w, _row())


def test_fake_mm_has_the_real_signature(tmp_path, monkeypatch):
    import inspect

    install_fake_aiter(tmp_path, monkeypatch)
    from aiter.tuned_gemm import tgemm

    params = list(inspect.signature(tgemm.mm).parameters)
    assert params == ["inp", "weights", "bias", "otype", "scale_a", "scale_b", "scale_c"]
