"""FlyDSLConfig: aiter kernelName <-> fields, exact round trip, clear errors."""

import pytest

from sglang_fp32gemm.backends import flydsl_gfx950 as F
from sglang_fp32gemm.backends.flydsl_gfx950 import FlyDSLConfig

GOOD = [
    "flydsl_hgemm_abf16_wbf16_fp32_t16x64x128x4_ks7_w1x4x1_bias0_ktail0_gm1_pft_gfx950",
    "flydsl_hgemm_abf16_wbf16_fp32_t16x64x128x4_ks4_w1x2x1_bias0_ktail0_gm1_pft_gfx950",
    "flydsl_hgemm_abf16_wbf16_fp32_t32x32x128x4_ks4_w2x1x1_bias0_ktail0_gm1_pft_gfx950",
    "flydsl_hgemm_abf16_wbf16_bf16_t64x256x64x2_ks1_w2x2x2_bias1_ktail1_gm8_phti_gfx942",
    "flydsl_hgemm_afp16_wfp16_fp16_t128x128x32x3_ks16_w4x1x1_bias0_ktail1_gm4_pht_gfx950",
]


@pytest.mark.parametrize("name", GOOD)
def test_round_trip(name):
    cfg = FlyDSLConfig.parse(name)
    assert cfg.name == name
    assert FlyDSLConfig.parse(cfg.name) == cfg


def test_fields():
    cfg = FlyDSLConfig.parse(GOOD[0])
    assert (cfg.a_dtype, cfg.w_dtype, cfg.out_dtype) == ("bf16", "bf16", "fp32")
    assert (cfg.BM, cfg.BN, cfg.BK, cfg.stages, cfg.splitK) == (16, 64, 128, 4, 7)
    assert (cfg.Mw, cfg.Nw, cfg.Kw) == (1, 4, 1)
    assert (cfg.bias, cfg.ktail, cfg.gm, cfg.policy, cfg.gfx) == (False, False, 1, "ft", "gfx950")
    assert cfg.waves == 4 and cfg.uses_atomics
    with pytest.raises(Exception):
        cfg.BM = 32  # frozen


@pytest.mark.parametrize("bad", [
    "",
    "hgemm_bf16_fp32c_t16x64x128",
    GOOD[0] + "_extra",
    GOOD[0].replace("_pft_", "_pxx_"),
    GOOD[0].replace("t16x64x128x4", "t16x64x128"),        # stages missing
    GOOD[0].replace("t16x64", "t016x64"),                  # leading zero: not a round trip
    GOOD[0].replace("ks7", "ks0"),
    GOOD[0].replace("bias0", "bias2"),
    GOOD[0].replace("abf16", "afp32"),                     # fp32 input is not an HGEMM
    GOOD[0].replace("_fp32_", "_int8_"),
    GOOD[0].replace("gfx950", "sm90"),
])
def test_bad_names(bad):
    with pytest.raises(ValueError, match="FlyDSL kernelName"):
        FlyDSLConfig.parse(bad)


def test_non_string():
    with pytest.raises(ValueError, match="string"):
        FlyDSLConfig.parse(None)  # type: ignore[arg-type]


def test_kernel_constraints():
    assert F.kernel_constraints(FlyDSLConfig.parse(GOOD[0])) is None
    why = F.kernel_constraints(FlyDSLConfig.parse(GOOD[0].replace("_fp32_", "_bf16_")))
    assert why and "fp32 output" in why
    assert "bias" in F.kernel_constraints(FlyDSLConfig.parse(GOOD[0].replace("bias0", "bias1")))
    assert "ktail" in F.kernel_constraints(FlyDSLConfig.parse(GOOD[0].replace("ktail0", "ktail1")))
    assert "pht" in F.kernel_constraints(FlyDSLConfig.parse(GOOD[0].replace("_pft_", "_pht_")))
    assert "gfx950" in F.kernel_constraints(FlyDSLConfig.parse(GOOD[0].replace("gfx950", "gfx942")))
    assert "BN" in F.kernel_constraints(FlyDSLConfig.parse(GOOD[0].replace("t16x64", "t16x40")))
    assert "BK" in F.kernel_constraints(FlyDSLConfig.parse(GOOD[0].replace("x128x4", "x48x4")))


def test_shape_constraints():
    cfg = FlyDSLConfig.parse(GOOD[0])  # BN 64, BK*ks = 896
    for m in (1, 3, 17, 32):
        assert F.shape_constraints(cfg, m, 1024, 7168) is None
    assert "M=33" in F.shape_constraints(cfg, 33, 1024, 7168)
    assert "M=0" in F.shape_constraints(cfg, 0, 1024, 7168)
    assert "N=1000" in F.shape_constraints(cfg, 8, 1000, 7168)
    assert "K=7000" in F.shape_constraints(cfg, 8, 1024, 7000)


def test_launch_count():
    assert F.launches_per_call(FlyDSLConfig.parse(GOOD[0])) == 2          # memset + GEMM
    ks1 = FlyDSLConfig.parse(GOOD[0].replace("ks7", "ks1"))
    assert not ks1.uses_atomics and F.launches_per_call(ks1) == 1


def test_shipped_rows_parse_and_are_supported():
    source, rows = F.shipped_gfx950_rows()
    assert rows, source
    for m, n, k, name in rows:
        cfg = FlyDSLConfig.parse(name)
        assert cfg.name == name
        assert F.kernel_constraints(cfg) is None, (source, name)
        assert F.shape_constraints(cfg, m, n, k) is None, (source, m, n, k, name)


def test_backend_unavailable_without_rocm():
    import torch

    ok, why = F.FlyDSLBackend().available()
    if not getattr(torch.version, "hip", None):
        assert not ok and "ROCm" in why


def test_backend_takes_shipped_configs_and_rejects_with_reasons():
    b = F.FlyDSLBackend()
    cfg = b.parse(GOOD[0])
    assert b.supports(cfg, 8, 1024, 7168) == (True, "ok")
    ok, why = b.supports(cfg, 8, 1000, 7168)  # N not a multiple of the tile
    assert not ok and cfg.name in why
    bf16_out = b.parse(GOOD[0].replace("_fp32_", "_bf16_"))
    ok, why = b.supports(bf16_out, 8, 1024, 7168)
    assert not ok and "not fp32" in why
    with pytest.raises(ValueError):
        b.parse("flydsl_hgemm_nonsense")
    # Split-K configs add partials with atomics: not deterministic.
    assert b.deterministic(cfg) is (not cfg.uses_atomics)
    assert b.isolated_probe, "never run on an MI355X: first probes must run in a child"
