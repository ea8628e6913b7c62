"""The ``cutedsl`` backend (SGLang's CuTe-DSL warp split-K) on CPU: names, shape rules, SGLang's tactics.

The kernel itself needs an sm90+ GPU (tests/test_triton_gpu.py runs it there).
Here: kernelName parsing, our restated shape rules against SGLang's own
``validate_tactic`` (the REAL module, which imports on CPU when
nvidia-cutlass-dsl is installed; those tests skip, saying so, when it is not),
and ``candidates`` from SGLang's ``autotune_tactics``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import types

import pytest
import torch

from sglang_fp32gemm.backends.cutedsl_warp import (
    B_LOADER_WARPS,
    K_TILES,
    OUTPUT_TILES,
    TOKEN_TILES,
    CuteDSLWarpBackend,
    WarpSplitKConfig,
)

DSV4_K = (7168, 4096)
DSV4_N = (512, 1024, 2048, 2560)
DSV4_M = (1, 2, 5, 8, 16, 31, 32)


# -- names ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [
    WarpSplitKConfig(16, 8, 256, 8, 1),
    WarpSplitKConfig(32, 32, 128, 12, 2),
    WarpSplitKConfig(16, 16, 128, 2, 2, pdl=True),
    WarpSplitKConfig(32, 8, 256, 1, 1),
])
def test_config_name_round_trips(cfg):
    assert WarpSplitKConfig.parse(cfg.name) == cfg
    assert cfg.name.startswith("cutedsl_warpsplitk_o")
    assert cfg.name.endswith("_pdl") == cfg.pdl
    be = CuteDSLWarpBackend()
    assert be.parse(be.kernel_name(cfg)) == cfg


@pytest.mark.parametrize("name", [
    "", "cutedsl_warpsplitk_o16_t8_k256_s8", "cutedsl_warpsplitk_o16_t8_k256_s8_b1_extra",
    "cutedsl_warpsplitk_o16_t8_k256_s8_b1_PDL", "cutedsl_warpsplitk_o16_t8_k256_s8_b1_pdl_pdl",
    "CUTEDSL_WARPSPLITK_O16_T8_K256_S8_B1", "cutedsl_warpsplitk_oX_t8_k256_s8_b1",
    "triton_splitk_fp32_bm16_bn32_bk128_sk8_w4_s5", "cutedsl_warpsplitk_o16_t8_k256_s8_b-1",
    " cutedsl_warpsplitk_o16_t8_k256_s8_b1",
])
def test_malformed_names_are_rejected_with_the_expected_form(name):
    with pytest.raises(ValueError, match="is not of the form"):
        WarpSplitKConfig.parse(name)


@pytest.mark.parametrize("name", [
    "cutedsl_warpsplitk_o8_t8_k256_s8_b1",     # output tile 8
    "cutedsl_warpsplitk_o64_t8_k256_s8_b1",    # output tile 64
    "cutedsl_warpsplitk_o16_t4_k256_s8_b1",    # token tile 4
    "cutedsl_warpsplitk_o16_t8_k64_s8_b1",     # k tile 64
    "cutedsl_warpsplitk_o16_t8_k256_s8_b3",    # 3 B-loader warps
    "cutedsl_warpsplitk_o16_t8_k256_s0_b1",    # 0 stages
    "cutedsl_warpsplitk_o16_t8_k256_s17_b1",   # more than 16 stages
    "cutedsl_warpsplitk_o32_t32_k256_s16_b1",  # over the shared memory
])
def test_names_with_impossible_values_are_rejected(name):
    with pytest.raises(ValueError) as e:
        WarpSplitKConfig.parse(name)
    assert "is not of the form" not in str(e.value)


def test_parse_is_import_free():
    import subprocess
    import sys

    from conftest import REPO_ROOT, subprocess_env

    # (torch itself imports cuda.bindings; the DSL is ``cutlass``)
    code = ("import sys; from sglang_fp32gemm.backends.cutedsl_warp import CuteDSLWarpBackend as B; "
            "b = B(); c = b.parse('cutedsl_warpsplitk_o16_t8_k256_s8_b1'); b.supports(c, 4, 1024, 7168); "
            "b.deterministic(c); bad = [m for m in ('cutlass', 'sglang', 'triton') "
            "if m in sys.modules]; print('LOADED', bad)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=subprocess_env(), cwd=str(REPO_ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout, proc.stdout


# -- shape rules ------------------------------------------------------------------------------------
def test_supports_reasons():
    be = CuteDSLWarpBackend()
    cfg = WarpSplitKConfig(32, 8, 256, 8, 1)
    assert be.supports(cfg, 1, 1024, 7168) == (True, "ok")
    assert be.supports(cfg, 32, 2560, 4096) == (True, "ok")
    for (m, n, k), words in {
        (33, 1024, 7168): ("M=33", "32"), (0, 1024, 7168): ("M=0",),
        (4, 1040, 7168): ("N=1040", "32"), (4, 1024, 7000): ("K=7000", "256"),
        (4, 1024, 256 * 65): ("65 tiles",), (4, 1024, 512): ("two K tiles",),
        (4, 1024, 256 * 4): ("stages=8", "2..4"),
    }.items():
        ok, why = be.supports(cfg, m, n, k)
        assert not ok and all(w in why for w in words), (m, n, k, why)
    assert be.deterministic(cfg) is True


def test_available_is_false_without_cuda_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    ok, why = CuteDSLWarpBackend().available()
    assert not ok and why == "no CUDA device"


def test_bind_rejects_a_shape_the_config_cannot_take():
    with pytest.raises(ValueError, match="K=7000"):
        CuteDSLWarpBackend().bind(WarpSplitKConfig(16, 8, 256, 8, 1), torch.device("cpu"), 1024, 7000)


# -- against SGLang's real module -----------------------------------------------------------------------
# cutlass's and flydsl's MLIR bindings abort the process when both are loaded
# (duplicate nanobind enums), and the FlyDSL compile tests load flydsl: the
# tests that import SGLang's CuTe-DSL module run in a pytest child of their own.
_CHILD_VAR = "SGLANG_FP32GEMM_TEST_CUTLASS_CHILD"


@pytest.fixture(scope="module")
def sgl():
    from sglang_fp32gemm.backends import cutedsl_warp

    if os.environ.get(_CHILD_VAR) != "1":
        pytest.skip("runs in its own process: test_sglang_module_tests_pass_in_their_own_process")
    try:
        return cutedsl_warp.sglang_module()
    except ImportError as e:
        pytest.skip(f"SGLang's CuTe-DSL module does not import here ({e}); "
                    "scripts/setup_env.sh installs nvidia-cutlass-dsl for it")


@pytest.fixture
def h200(monkeypatch):
    """SGLang's default_tactic asks the current CUDA device for its SM count: answer as an H200."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *a, **k: types.SimpleNamespace(multi_processor_count=132))


@pytest.mark.parametrize("k", DSV4_K)
@pytest.mark.parametrize("n", DSV4_N)
def test_default_tactics_for_dsv4_round_trip_and_sglang_accepts_them(sgl, h200, n, k):
    for m in DSV4_M:
        t = sgl.default_tactic(m, n, k)
        cfg = WarpSplitKConfig.from_tactic(t)
        back = WarpSplitKConfig.parse(cfg.name)
        assert back == cfg
        t2 = back.tactic(sgl)
        assert isinstance(t2, sgl.WarpSplitKTactic) and t2 == t
        sgl.validate_tactic(t2, m, n, k)  # raises if SGLang disagrees
        assert CuteDSLWarpBackend().supports(back, m, n, k) == (True, "ok")


@pytest.mark.parametrize("m", [1, 8, 16, 32])
@pytest.mark.parametrize("n", DSV4_N)
def test_candidates_are_sglangs_autotune_tactics_default_first(sgl, h200, m, n):
    be = CuteDSLWarpBackend()
    for k in DSV4_K:
        cands = be.candidates(m, n, k)
        tactics = sgl.autotune_tactics(m, n, k)
        assert cands, (m, n, k)
        assert cands[0] == WarpSplitKConfig.from_tactic(sgl.default_tactic(m, n, k))
        assert [c.tactic(sgl) for c in cands] == list(dict.fromkeys(tactics))
        for c in cands:
            assert be.parse(c.name) == c and not c.pdl
            sgl.validate_tactic(c.tactic(sgl), m, n, k)


def test_candidates_empty_outside_the_kernels_range(sgl, h200):
    be = CuteDSLWarpBackend()
    assert be.candidates(33, 1024, 7168) == []
    assert be.candidates(4, 1000, 7168) == []


def test_our_shape_rules_agree_with_sglangs_validate_tactic(sgl):
    """Every tactic of the grid, at DSv4 and some awkward shapes: accepted by both or by neither."""
    be = CuteDSLWarpBackend()
    shapes = [(m, n, k) for m in (1, 17, 32, 33) for n in (16, 48, 512, 2560, 1000) for k in
              (128, 256, 384, 512, 1024, 4096, 7168, 7000, 256 * 64, 256 * 65, 128 * 65)]
    disagree = []
    for o, t, kt, b, s in itertools.product(OUTPUT_TILES, TOKEN_TILES, K_TILES, B_LOADER_WARPS, range(0, 18)):
        try:
            cfg = WarpSplitKConfig(o, t, kt, s, b)
        except ValueError:
            cfg = None
        tactic = sgl.WarpSplitKTactic(o, t, kt, s, b)
        for m, n, k in shapes:
            try:
                sgl.validate_tactic(tactic, m, n, k)
                theirs = True
            except ValueError:
                theirs = False
            ours = cfg is not None and be.supports(cfg, m, n, k)[0]
            if ours != theirs:
                disagree.append((o, t, kt, s, b, m, n, k, ours, theirs))
    assert not disagree, disagree[:10]


def test_smem_estimate_matches_the_limit_sglang_enforces(sgl):
    """The largest stage count we accept is the largest SGLang accepts (K long enough)."""
    for o, t, kt in itertools.product(OUTPUT_TILES, TOKEN_TILES, K_TILES):
        ours = max(s for s in range(1, 17) if _ok(o, t, kt, s))
        theirs = 0
        for s in range(1, 17):
            try:
                sgl.validate_tactic(sgl.WarpSplitKTactic(o, t, kt, s, 1), 1, 512, kt * 32)
                theirs = s
            except ValueError:
                pass
        assert ours == theirs, (o, t, kt, ours, theirs)


def _ok(o, t, kt, s):
    try:
        WarpSplitKConfig(o, t, kt, s, 1)
        return True
    except ValueError:
        return False


def test_source_tag_names_the_versions():
    from sglang_fp32gemm.backends.base import dist_version

    tag = CuteDSLWarpBackend().source_tag(WarpSplitKConfig(16, 8, 256, 8, 1))
    # "sglang-none" where SGLang is not installed (the device machine loads the kernel's file from a carry)
    assert tag.startswith(f"sglang{dist_version('sglang') or '-none'}-") and "nvidia-cutlass-dsl" in tag
    assert dist_version("sglang") is None or tag.startswith("sglang0.5.")


def test_sglang_module_tests_pass_in_their_own_process():
    if os.environ.get(_CHILD_VAR) == "1":
        pytest.skip("this is the child")
    probe = subprocess.run([sys.executable, "-c", "import cutlass, cuda.bindings.driver"], capture_output=True,
                           text=True)
    if probe.returncode:
        pytest.skip("nvidia-cutlass-dsl is not installed (scripts/setup_env.sh installs it): "
                    + probe.stderr.strip().splitlines()[-1])
    # -n 0: one process (pyproject's addopts would start two xdist workers, each importing cutlass).
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", __file__,
                        "-k", "(sglang or tactic or candidates or smem) and not own_process"],
                       env=dict(os.environ, **{_CHILD_VAR: "1"}), capture_output=True, text=True, timeout=900)
    tail = r.stdout[-3000:]
    assert r.returncode == 0, tail
    # Every test of the child ran: none skipped for a missing module.
    assert "skipped" not in tail.splitlines()[-1], tail
