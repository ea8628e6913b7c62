"""The kernel's compiled name carries a hash of its own source.

FlyDSL's disk cache may serve a binary built from an older @flyc.kernel body
under an unchanged key; a name derived from the body's text cannot be.
"""

import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from sglang_fp32gemm.backends import flydsl_gfx950 as F

CFG = F.FlyDSLConfig.parse("flydsl_hgemm_abf16_wbf16_fp32_t16x64x128x4_ks7_w1x4x1_bias0_ktail0_gm1_pft_gfx950")


def _load_copy(tmp_path: Path, tag: str, edit=None):
    """Import a copy of flydsl_gfx950.py, optionally with its text edited."""
    text = Path(inspect.getsourcefile(F)).read_text()
    if edit is not None:
        old, new = edit
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / f"flydsl_copy_{tag}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"_flydsl_copy_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(spec.name, None)
    return mod


# A real change to the kernel body: the pipeline barrier mask.
BODY_EDIT = ("rocdl.sched_barrier(0)", "rocdl.sched_barrier(1)")
# A change outside the kernel sources: the backend's docstring.
OUTSIDE_EDIT = ('"""Runs our FlyDSL kernel on gfx950', '"""Runs (edited) our FlyDSL kernel on gfx950')


def test_tag_is_stable_and_in_the_name():
    assert F.kernel_source_tag() == F.kernel_source_tag()
    assert len(F.kernel_source_tag()) == 12
    assert F.tagged_kernel_name(CFG).endswith("_" + F.kernel_source_tag())
    assert CFG.short in F.tagged_kernel_name(CFG)
    assert F.tagged_kernel_name(CFG, 1024, 7168) != F.tagged_kernel_name(CFG, 2560, 7168)


def test_unchanged_copy_has_the_same_tag(tmp_path):
    assert _load_copy(tmp_path, "same").kernel_source_tag() == F.kernel_source_tag()


def test_body_edit_changes_the_tag(tmp_path):
    edited = _load_copy(tmp_path, "body", BODY_EDIT)
    assert edited.kernel_source_tag() != F.kernel_source_tag()
    assert edited.tagged_kernel_name(CFG) != F.tagged_kernel_name(CFG)


def test_helper_edit_changes_the_tag(tmp_path):
    # _plan is a helper the kernel's geometry comes from.
    edited = _load_copy(tmp_path, "helper", ('threads=cfg.waves * WAVE,', 'threads=cfg.waves * WAVE + 0,'))
    assert edited.kernel_source_tag() != F.kernel_source_tag()


def test_edit_outside_the_kernel_keeps_the_tag(tmp_path):
    assert _load_copy(tmp_path, "outside", OUTSIDE_EDIT).kernel_source_tag() == F.kernel_source_tag()


def _toolchain_missing():
    if importlib.util.find_spec("flydsl") is None:
        return "flydsl is not installed"
    if F.find_rocm_link_dir() is None:
        return "no ld.lld link folder (scripts/setup_flydsl_compile.sh)"
    return None


@pytest.mark.skipif(_toolchain_missing() is not None, reason=str(_toolchain_missing()))
def test_compiled_symbol_follows_the_body(tmp_path, monkeypatch, gfx950_isa):
    # The copy lives outside the repo: point it at the repo's ld.lld folder.
    monkeypatch.setenv("SGLANG_FP32GEMM_FLYDSL_ROCM_PATH", str(F.find_rocm_link_dir()))
    edited = _load_copy(tmp_path, "compile", BODY_EDIT)
    a = F.inspect_isa(gfx950_isa(CFG.name, 1024, 7168))  # the shipped source's compile, shared
    b = F.inspect_isa(edited.compile_for_gfx950(edited.FlyDSLConfig.parse(CFG.name), tmp_path / "b")[-1].read_text())
    assert a["kernel"] == F.tagged_kernel_name(CFG, 1024, 7168)
    assert b["kernel"] == edited.tagged_kernel_name(edited.FlyDSLConfig.parse(CFG.name), 1024, 7168)
    assert a["kernel"] != b["kernel"]
