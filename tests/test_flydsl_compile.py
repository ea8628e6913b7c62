"""Compile every shipped gfx950 config for gfx950 on this CPU and check the ISA.

Never runs the kernel (no AMD GPU here): it checks what the compiler emitted.
"""

import importlib.util

import pytest

from sglang_fp32gemm.backends import flydsl_gfx950 as F


def _toolchain_missing():
    if importlib.util.find_spec("flydsl") is None:
        return "flydsl is not installed (scripts/setup_flydsl_compile.sh)"
    if F.find_rocm_link_dir() is None:
        return "no ld.lld link folder .flydsl-rocm/llvm/bin/ld.lld (scripts/setup_flydsl_compile.sh)"
    return None


needs_toolchain = pytest.mark.skipif(_toolchain_missing() is not None, reason=str(_toolchain_missing()))

_SOURCE, _ROWS = F.shipped_gfx950_rows()
_CASES = sorted({(name, n, k) for _m, n, k, name in _ROWS})


def test_rows_cover_dsv4_shapes():
    shapes = {(m, n, k) for m, n, k, _ in _ROWS}
    for n in (1024, 2560):
        for m in (1, 2, 4, 8, 16, 32):
            assert (m, n, 7168) in shapes, (_SOURCE, m, n)


@needs_toolchain
@pytest.mark.parametrize("name,n,k", _CASES, ids=[f"{F.FlyDSLConfig.parse(c[0]).short}-N{c[1]}" for c in _CASES])
def test_compile_and_isa(name, n, k, gfx950_isa):
    cfg = F.FlyDSLConfig.parse(name)
    text = gfx950_isa(name, n, k)
    facts = F.inspect_isa(text)
    assert F.isa_problems(facts, cfg, n, k) == []
    # The same checks spelled out, so a failure reads plainly.
    assert facts["mfma"] > 0 and facts["mfma_kinds"] == ["v_mfma_f32_16x16x32_bf16"]
    assert "v_cvt_pk_bf16_f32" not in text and "ds_write_b16" not in text
    assert facts["narrowing"] == [] and facts["store_16bit"] == 0
    if cfg.uses_atomics:
        assert facts["atomic_f32"] > 0 and "buffer_atomic_add_f32" in text
    else:
        assert facts["store_f32"] > 0
    assert facts["vgpr"] + facts["agpr"] <= 512 and facts["lds_bytes"] <= 160 * 1024
    assert not facts["scratch_bytes"]
    assert facts["kernel"] == F.tagged_kernel_name(cfg, n, k)


@needs_toolchain
def test_ks1_uses_plain_fp32_stores(gfx950_isa):
    cfg = F.FlyDSLConfig.parse(
        "flydsl_hgemm_abf16_wbf16_fp32_t32x64x128x2_ks1_w2x4x1_bias0_ktail0_gm1_pft_gfx950")
    facts = F.inspect_isa(gfx950_isa(cfg.name, 1024, 7168))
    assert F.isa_problems(facts, cfg) == []
    assert facts["atomic_f32"] == 0 and facts["store_f32"] > 0


def test_checker_catches_a_bf16_epilogue():
    """The ISA check must fail on the pre-fix pattern (round to bf16, 16-bit LDS write)."""
    cfg = F.FlyDSLConfig.parse(_ROWS[0][3])
    fake = f"""
    v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
    v_cvt_pk_bf16_f32 v12, v0, v1
    ds_write_b16 v13, v12
    buffer_atomic_add_f32 v0, v14, s[8:11], 0 offen
    .name:           {F.tagged_kernel_name(cfg)}
    .vgpr_count:     40
    .sgpr_count:     20
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    """
    problems = F.isa_problems(F.inspect_isa(fake), cfg)
    assert any("16 bits" in p for p in problems)
    assert any("16-bit stores" in p for p in problems)
    assert any("MFMA" in p for p in problems)      # 1 MFMA where the config needs many


def test_checker_catches_limits_and_missing_atomics():
    cfg = F.FlyDSLConfig.parse(_ROWS[0][3])
    fake = f"""
    v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
    .name:           other_kernel
    .vgpr_count:     500
    .agpr_count:     100
    .sgpr_count:     20
    .group_segment_fixed_size: 200000
    .private_segment_fixed_size: 64
    """
    problems = " | ".join(F.isa_problems(F.inspect_isa(fake), cfg))
    for needle in ("atomic", "VGPR", "LDS", "spills", "source tag"):
        assert needle in problems
