"""The ``cutedsl-dot`` backend (our CuTe-DSL dot-product kernel, M <= 4) on CPU.

The kernel runs only on an sm90+ GPU (tests/test_cutedsl_dot_gpu.py). Here:
names and shape rules, the candidates, the summation-order reference against
float64, and the kernel compiled for sm_90a on this CPU (nvidia-cutlass-dsl
compiles without a GPU; the tests skip, saying so, where it is not installed),
its PTX read for what the design promises.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import cutedsl_child, cutedsl_ptx
from sglang_fp32gemm import exactness
from sglang_fp32gemm.backends import all_backends, default_backends, parsers
from sglang_fp32gemm.backends.cutedsl_dot import MAX_W_VECTORS, CuteDSLDotBackend, DotConfig
from sglang_fp32gemm.backends.cutedsl_warp import CuteDSLWarpBackend


@pytest.mark.parametrize("cfg", [DotConfig(1, 128, 2, True), DotConfig(4, 64, 1), DotConfig(2, 256, 4, False),
                                 DotConfig(2, 448, 1, True, True), DotConfig(4, 128, 2, False, True),
                                 DotConfig(1, 224, 1, True, False, True), DotConfig(2, 64, 2, True, True, True),
                                 DotConfig(1, 448, 1, True, False, False, 264),
                                 DotConfig(2, 128, 2, False, True, True, 7), DotConfig(8, 224, 2, False, True),
                                 DotConfig(5, 64, 1)])
def test_names_round_trip(cfg):
    assert DotConfig.parse(cfg.name) == cfg
    assert CuteDSLDotBackend().kernel_name(cfg) == cfg.name


@pytest.mark.parametrize("name, why", [
    ("cutedsl_dot_m9_t128_r1", "max_m=9"),
    ("cutedsl_dot_m1_t100_r1", "threads=100"),
    ("cutedsl_dot_m1_t128_r3", "rows=3"),
    ("cutedsl_dot_m1_t128", "is not of the form"),
    ("cutedsl_dot_m1_t448_r1_pdl_bx", "max_m=1 has one row of x"),
    ("cutedsl_dot_m2_t448_r1_bx_pdl", "is not of the form"),
    ("cutedsl_dot_m1_t448_r1_mb1_pdl", "is not of the form"),
    ("cutedsl_dot_m1_t448_r1_g132_pdl", "is not of the form"),  # _g comes last
    ("cutedsl_dot_m1_t448_r1_lw", "is not of the form"),        # a placement only with _pdl
    ("cutedsl_dot_m2_t448_r1_pdl_bx_lw", "is not of the form"),  # right after it
    ("cutedsl_dot_m1_t448_r1_pdl_g0", "is not of the form"),    # no cap is no suffix
    ("cutedsl_dot_m1_t448_r1_pdl_g0132", "is not of the form"),  # one spelling per cap
    ("cutedsl_warpsplitk_o16_t8_k256_s8_b1", "is not of the form"),
])
def test_bad_names_say_what_is_wrong(name, why):
    with pytest.raises(ValueError, match=why):
        DotConfig.parse(name)


def test_the_two_cutedsl_backends_take_only_their_own_names():
    dot, warp = CuteDSLDotBackend(), CuteDSLWarpBackend()
    with pytest.raises(ValueError):
        warp.parse("cutedsl_dot_m1_t128_r2_pdl")
    with pytest.raises(ValueError):
        dot.parse("cutedsl_warpsplitk_o16_t8_k256_s8_b1")
    assert [b.name for b in all_backends() if b.libtype == "cutedsl"] == ["cutedsl", "cutedsl-dot", "cutedsl-mma"]
    accepted = []
    for parse in parsers(default_backends())["cutedsl"]:
        try:
            accepted.append(parse("cutedsl_dot_m4_t64_r2"))
        except ValueError:
            pass
    assert accepted == [DotConfig(4, 64, 2)]


@pytest.mark.parametrize("cfg, m, n, k, ok", [
    (DotConfig(4, 128, 2), 4, 512, 7168, True),
    (DotConfig(4, 128, 2), 1, 512, 7168, True),     # any M up to max_m
    (DotConfig(2, 128, 2), 3, 512, 7168, False),    # above max_m
    (DotConfig(1, 128, 4), 1, 1026, 7168, False),   # N not a multiple of rows
    (DotConfig(1, 256, 1), 1, 512, 7168, False),    # 7168 = 3.5 x 8 x 256
    (DotConfig(1, 64, 4), 1, 512, 7168, False),     # 56 W vectors a thread
    (DotConfig(1, 256, 2), 1, 512, 4096, True),
    (DotConfig(1, 128, 1), 1, 2560, 5120, True),
    (DotConfig(1, 448, 1, True, False, False, 264), 1, 2048, 7168, True),
    (DotConfig(1, 448, 2, True, False, False, 264), 1, 512, 7168, False),  # 256 CTAs: the cap caps nothing
])
def test_shape_rules(cfg, m, n, k, ok):
    assert CuteDSLDotBackend().supports(cfg, m, n, k)[0] is ok


def test_a_capped_form_launches_its_cap_and_only_single_calls_take_it():
    """``_g<C>``: C CTAs (what the tuner reads); the pair table refuses it at start-up, naming the form,
    ``bind_pair`` before compiling, and the pair tuner does not offer it (``pairs.not_taken``)."""
    cfg = DotConfig.parse("cutedsl_dot_m1_t448_r1_pdl_g264")
    assert cfg.ctas(2048) == 264 and DotConfig.parse("cutedsl_dot_m1_t448_r1_pdl").ctas(2048) == 2048
    for parse in parsers(default_backends())["cutedsl"]:
        if parse.__qualname__.startswith("CuteDSLDotBackend"):
            assert parse(cfg.name) == cfg
    pair_parse = [p for p in parsers(default_backends(), pair=True)["cutedsl"]]
    with pytest.raises(ValueError, match="a pair form takes no _g cap"):
        for parse in pair_parse:
            parse(cfg.name)
    with pytest.raises(ValueError, match="a pair form takes no _g cap"):
        CuteDSLDotBackend().bind_pair(cfg, torch.device("cpu"), 512, 2048, 7168)
    from sglang_fp32gemm.tools.tuner import PairForm

    pair = PairForm(CuteDSLDotBackend(), 512, 2048)
    assert pair.supports(cfg, 1, 2560, 7168) == (False, "N=512: kernelName 'cutedsl_dot_m1_t448_r1_pdl_g264': "
                                                        "a pair form takes no _g cap")
    offered = pair.candidates(1, 2560, 7168)
    assert offered and not any(c.ctas_cap for c in offered)


def test_the_capped_candidates_are_few_light_and_take_the_shape():
    """A few ``_g`` forms a shape (the region rank's lightest launches): caps 132 and 264 of the smallest (>= 128)
    and largest (<= 512) thread count that tiles K, at rows 1 and 4, ``_bx`` from M=2; only where the cap caps."""
    b = CuteDSLDotBackend()
    for k, threads in ((7168, {128, 448}), (4096, {128, 512}), (5120, {128, 320})):
        for m in (1, 2, 4):
            capped = [c for c in b.candidates(m, 2048, k) if c.ctas_cap]
            assert {c.threads for c in capped} == threads, (k, m)
            assert {(c.rows, c.ctas_cap) for c in capped} <= {(1, 132), (1, 264), (4, 132), (4, 264)}
            for c in capped:
                assert c.branchless_x == (m > 1) and not c.min_blocks and c.ctas(2048) == c.ctas_cap
                assert b.supports(c, m, 2048, k)[0]
    # N=512 at rows 4 is 128 blocks: neither cap caps anything there.
    assert not [c for c in b.candidates(1, 512, 7168) if c.ctas_cap and c.rows == 4]


def test_candidates_only_at_m_1_2_4_and_every_one_takes_the_shape():
    # Not at M=8 (runs 36a-b: its best forms about 40% slower than Triton's alone), though the kernel takes it.
    b = CuteDSLDotBackend()
    assert b.supports(DotConfig(8, 224, 2, False, True), 8, 1024, 7168)[0]
    for k in (7168, 4096, 5120):
        for n in (512, 1024, 2048, 2560):
            for m in (1, 2, 3, 4, 5, 8, 16):
                cands = b.candidates(m, n, k)
                assert bool(cands) == (m in (1, 2, 4)), (m, n, k)
                for c in cands:
                    assert c.max_m == m and b.supports(c, m, n, k)[0], (c, m, n, k)
                    assert c.rows * k // (8 * c.threads) <= MAX_W_VECTORS
    assert {(c.threads, c.rows) for c in b.candidates(1, 512, 7168)} == {
        (64, 1), (64, 2), (128, 1), (128, 2), (128, 4), (224, 1), (224, 2), (224, 4), (448, 1), (448, 2), (448, 4),
        (896, 1), (896, 2), (896, 4)}
    # M 2 and 4: every form also with branchless x loads, those also asking for one CTA an SM (_bx_mb1);
    # M=1 has no branch to remove, and every form there also as _mb1.
    ones = b.candidates(1, 512, 7168)
    assert not any(c.branchless_x for c in ones)
    forms = {(c.threads, c.rows) for c in ones if not c.min_blocks}
    assert forms == {(c.threads, c.rows) for c in ones if c.min_blocks}
    for m in (2, 4):
        cands = b.candidates(m, 2048, 7168)
        plain = {(c.threads, c.rows) for c in cands if not c.branchless_x}
        assert plain and plain == {(c.threads, c.rows) for c in cands if c.branchless_x and not c.min_blocks}
        assert plain == {(c.threads, c.rows) for c in cands if c.branchless_x and c.min_blocks}
        assert not any(c.min_blocks and not c.branchless_x for c in cands)


def test_with_pdl_every_uncapped_form_is_also_offered_without_it_and_with_each_placement(monkeypatch):
    """With PDL (sm90+): the PDL forms, then every uncapped one also without PDL (run 35a: such a form won a serial
    A/B on an H100), then the ``_ls`` and ``_lw`` placements of every uncapped PDL form at M=1 and of every ``_bx``
    PDL form from M=2 (stop 46; the plain-x and capped forms keep the plain placement). Without PDL (this CPU)
    the forms are offered once, with no placement."""
    from sglang_fp32gemm.backends import cutedsl_dot

    b = CuteDSLDotBackend()
    monkeypatch.setattr(cutedsl_dot, "sm90_or_later", lambda: False)  # as on this CPU, on a GPU too
    cpu = b.candidates(2, 2048, 7168)
    assert cpu and not any(c.placement or c.pdl for c in cpu)
    monkeypatch.setattr(cutedsl_dot, "sm90_or_later", lambda: True)
    for m in (1, 2, 4):
        cands = b.candidates(m, 2048, 7168)
        pdl = [c for c in cands if c.pdl and not c.placement]
        twins = [c for c in cands if not c.pdl]
        placed = [c for c in cands if c.placement]
        assert cands == pdl + twins + placed, "PDL forms, their twins without PDL, then the placements"
        assert twins == [dataclasses.replace(c, pdl=False) for c in pdl if not c.ctas_cap]
        assert set(twins) == {c for c in b.candidates(m, 2048, 7168) if not c.pdl}
        want = [dataclasses.replace(c, placement=p) for p in ("ls", "lw") for c in pdl
                if not c.ctas_cap and (c.branchless_x or m == 1)]
        assert placed == want and len(set(cands)) == len(cands)
        assert all(b.supports(c, m, 2048, 7168)[0] for c in placed + twins)
    monkeypatch.setattr(cutedsl_dot, "sm90_or_later", lambda: False)
    assert b.candidates(2, 2048, 7168) == cpu
    monkeypatch.setattr(cutedsl_dot, "sm90_or_later", lambda: True)
    names = {c.name for c in b.candidates(2, 2560, 7168)}
    assert {"cutedsl_dot_m2_t224_r1_pdl_lw_bx_mb1", "cutedsl_dot_m2_t224_r1_bx_mb1"} <= names
    # The H100's serial row (35a) and one of 35b's forms without PDL are candidates.
    assert "cutedsl_dot_m4_t224_r2_bx" in {c.name for c in b.candidates(4, 1024, 7168)}
    assert "cutedsl_dot_m1_t256_r1" in {c.name for c in b.candidates(1, 2048, 4096)}


_SIZES_AGREE = """
import math
from sglang_fp32gemm.backends import cutedsl_dot
from sglang_fp32gemm.backends.cutedsl_dot_kernel import DotKernel
cutedsl_dot.sm90_or_later = lambda: True  # the PDL forms too
b, seen, bad = cutedsl_dot.CuteDSLDotBackend(), set(), []
for n, k in ((512, 7168), (1024, 7168), (2048, 7168), (2560, 7168), (1024, 4096), (512, 5120)):
    for m in (1, 2, 4):
        for c in b.candidates(m, n, k):
            if (c, n, k) not in seen:
                seen.add((c, n, k))
                kern = DotKernel(n, k, c.threads, c.rows, c.max_m, c.pdl, cutedsl_dot.VEC, ctas_cap=c.ctas_cap)
                if math.prod(kern.grid) != c.ctas(n):
                    bad.append((c.name, n, k))
print(len(seen), len(bad), bad[:5])
"""


_CAPPED_SIZES = """
import math
from sglang_fp32gemm.backends import cutedsl_dot
from sglang_fp32gemm.backends.cutedsl_dot_kernel import DotKernel
bad = []
for n, rows, cap in ((2048, 1, 264), (2048, 2, 132), (512, 1, 132), (2560, 4, 7)):
    c = cutedsl_dot.DotConfig(1, 448, rows, True, False, False, cap)
    grid = DotKernel(n, 7168, c.threads, c.rows, c.max_m, c.pdl, cutedsl_dot.VEC, ctas_cap=cap).grid
    if math.prod(grid) != c.ctas(n) or c.ctas(n) != cap:
        bad.append((c.name, n, grid))
print(len(bad), bad)
"""


def test_every_candidates_launch_is_the_configs_own():
    """The CTAs the tuner reads from a config are what its kernel launches, for every form offered at six
    DSv4 shapes (kernel objects built in a child, not compiled)."""
    count, bad, first = cutedsl_child(_SIZES_AGREE).split(" ", 2)
    assert int(count) > 50 and bad == "0", first
    bad, first = cutedsl_child(_CAPPED_SIZES).split(" ", 1)  # and the _g forms'
    assert bad == "0", first


def test_the_order_reference_is_an_exact_fp32_product():
    from sglang_fp32gemm.backends.cutedsl_dot import order_reference as reference

    torch.manual_seed(3)
    for m, n, k, threads in ((1, 16, 2048, 64), (4, 8, 1024, 128), (3, 4, 4096, 256), (8, 8, 7168, 224)):
        x, w = exactness.random_bf16(m, k), exactness.random_bf16(n, k)
        r = exactness.measure(reference(x, w, threads), exactness.reference(x, w))
        assert r.ok and r.rel_err <= 1e-5, r


def _compile_and_read_ptx(tmp_path: Path, cfg: DotConfig, n: int, k: int) -> str:
    return cutedsl_ptx(tmp_path, "sglang_fp32gemm.backends.cutedsl_dot", "DotConfig", cfg.name, n, k)


@pytest.mark.parametrize("cfg, n, k", [(DotConfig(4, 128, 2, True), 512, 7168),
                                       (DotConfig(1, 64, 1, False), 1024, 4096),
                                       (DotConfig(2, 896, 4, True), 2048, 7168),
                                       (DotConfig(8, 448, 1, True, True), 1024, 7168)])
def test_compiled_for_sm90_on_this_cpu_the_w_loads_come_first_and_nothing_is_atomic(tmp_path, cfg, n, k):
    ptx = _compile_and_read_ptx(tmp_path, cfg, n, k)
    body = ptx[ptx.index(".entry"):]
    iters = k // (8 * cfg.threads)
    loads = [mt.start() for mt in re.finditer(r"ld\.global[.a-z0-9]*\.v4", body)]
    # Every W vector and every x vector is one 16-byte load.
    assert len(loads) == cfg.rows * iters + cfg.max_m * iters, len(loads)
    assert len(re.findall(r"\bfma\.rn\.f32\b", body)) == cfg.max_m * iters * cfg.rows * 8
    assert not re.search(r"\b(atom|red)\.", body)  # no split-K, nothing to reduce through memory
    if cfg.pdl:
        wait = body.index("griddepcontrol.wait")
        # The W loads (the first rows x iters) are issued before the wait, x after it.
        assert sum(1 for p in loads if p < wait) == cfg.rows * iters
        assert "griddepcontrol.launch_dependents" in body
    else:
        assert "griddepcontrol" not in body


def test_the_capped_form_loops_over_its_blocks_with_the_plain_forms_body(tmp_path):
    """``_g264`` at N=2048 (stop 39): one loop whose trip steps the block by the cap (264 blocks, 264 rows of W
    at rows=1), each trip the plain form's body (its W loads before the wait, then x, the same multiply-adds,
    the butterfly and the warps in order: the same bits) and a barrier before the next trip reuses the shared
    buffer."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "g").mkdir()
    plain = _compile_and_read_ptx(tmp_path / "plain", DotConfig(1, 448, 1, True), 2048, 7168)
    capped = _compile_and_read_ptx(tmp_path / "g", DotConfig(1, 448, 1, True, False, False, 264), 2048, 7168)
    body = capped[capped.index(".entry"):]
    assert re.search(r"add\.s32\s+%r\d+, %r\d+, 264;", body), "the block index steps by the cap"
    assert "nounroll" in body and len(re.findall(r"\bbra\b", body)) > len(re.findall(r"\bbra\b", plain))
    for pattern in (r"ld\.global[.a-z0-9]*\.v4", r"\bfma\.rn\.f32\b", r"st\.global", r"shfl\.sync",
                    r"griddepcontrol\.wait"):
        assert len(re.findall(pattern, plain)) == len(re.findall(pattern, capped)), pattern
    assert len(re.findall(r"bar\.sync", capped)) == len(re.findall(r"bar\.sync", plain)) + 1
    loop = body[body.index("nounroll"):]
    wait = loop.index("griddepcontrol.wait")
    assert len(re.findall(r"ld\.global[.a-z0-9]*\.v4", loop[:wait])) == 2  # this trip's W (K = 2 x 448 x 8)


@pytest.mark.parametrize("placement", ["ls", "lw"])
def test_the_placement_forms_move_only_the_pdl_instructions(tmp_path, placement):
    """``_ls`` / ``_lw`` (stop 46): the release after the store; ``_lw`` also the wait before the first load
    (vLLM's dot kernel's placement). The same loads, multiply-adds and stores, in the same order, so the same
    bits: the form without them is the order reference for both."""
    (tmp_path / "plain").mkdir()
    (tmp_path / placement).mkdir()
    cfg = DotConfig(2, 448, 1, True, True, True, 0, placement)
    assert DotConfig.parse(cfg.name) == cfg and cfg.name == f"cutedsl_dot_m2_t448_r1_pdl_{placement}_bx_mb1"
    with pytest.raises(ValueError, match="only with pdl"):
        DotConfig(2, 448, 1, False, placement=placement)
    plain = _compile_and_read_ptx(tmp_path / "plain", DotConfig(2, 448, 1, True, True, True), 2048, 7168)
    moved = _compile_and_read_ptx(tmp_path / placement, cfg, 2048, 7168)
    body = moved[moved.index(".entry"):]
    loads = [mt.start() for mt in re.finditer(r"ld\.global[.a-z0-9]*\.v4", body)]
    assert body.count("griddepcontrol.wait") == 1 and body.count("griddepcontrol.launch_dependents") == 1
    wait, release = body.index("griddepcontrol.wait"), body.index("griddepcontrol.launch_dependents")
    before = sum(1 for p in loads if p < wait)
    assert before == (0 if placement == "lw" else 2), before  # K = 2 x 448 x 8: a thread's W vectors
    assert release > max(mt.start() for mt in re.finditer(r"st\.global", body))
    for pattern in (r"ld\.global[.a-z0-9]*\.v4", r"\bfma\.rn\.f32\b.*", r"st\.global", r"shfl\.sync"):
        assert re.findall(pattern, plain) == re.findall(pattern, moved), pattern
    plain_body = plain[plain.index(".entry"):]
    assert plain_body.index("griddepcontrol.launch_dependents") < plain_body.index("st.global")


def _branches_between_wait_and_release(ptx: str) -> int:
    body = ptx[ptx.index("griddepcontrol.wait"):ptx.index("griddepcontrol.launch_dependents")]
    return len(re.findall(r"@%p\d+ bra", body))


def test_the_bx_form_loads_x_with_no_branch_on_m_and_changes_nothing_else(tmp_path):
    """``_bx`` (stop 36): the plain form at max_m=2 branches on each row of x after the wait (in its sm_90a SASS
    the second row's loads wait for the first row's multiplies); the ``_bx`` form has no branch there, the same
    loads and the same multiply-adds (the same sums in the same order: one order reference for both)."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "bx").mkdir()
    plain = _compile_and_read_ptx(tmp_path / "plain", DotConfig(2, 448, 1, True), 2048, 7168)
    bx = _compile_and_read_ptx(tmp_path / "bx", DotConfig(2, 448, 1, True, True), 2048, 7168)
    assert _branches_between_wait_and_release(plain) == 2
    assert _branches_between_wait_and_release(bx) == 0
    for pattern in (r"ld\.global[.a-z0-9]*\.v4", r"\bfma\.rn\.f32\b", r"st\.global"):
        assert len(re.findall(pattern, plain)) == len(re.findall(pattern, bx)), pattern


def _triton_tools(*names: str) -> Path:
    """The folder of Triton's wheel that ships ptxas and cuobjdump (any platform Triton installs on)."""
    spec = importlib.util.find_spec("triton")
    tools = Path(spec.origin).parent / "backends" / "nvidia" / "bin" if spec and spec.origin else None
    if tools is None or not all((tools / n).exists() for n in names):
        pytest.skip(f"needs Triton's {' and '.join(names)}")
    return tools


def _ptxas(ptx: Path, cubin: Path, *flags: str) -> str:
    """ptxas (sm_90a) on ``ptx``; its stderr. An older Triton's ptxas (3.6.0's, run 37d's H100) cannot read the
    PTX ISA the CuTe DSL writes (8.8 with 4.8.0): that is a skip, any other failure an error showing ptxas's words."""
    p = subprocess.run([str(_triton_tools("ptxas") / "ptxas"), *flags, "-arch=sm_90a", "-o", str(cubin), str(ptx)],
                       capture_output=True, text=True)
    if p.returncode != 0 and "Unsupported .version" in p.stderr:
        pytest.skip(f"Triton's ptxas is older than the CuTe DSL's PTX: {p.stderr.strip()[:200]}")
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stderr


def _sass(tmp_path: Path, ptx_text: str) -> str:
    """ptxas (sm_90a), then cuobjdump's SASS."""
    tools = _triton_tools("ptxas", "cuobjdump")
    src, cubin = tmp_path / "k.ptx", tmp_path / "k.cubin"
    src.write_text(ptx_text)
    _ptxas(src, cubin)
    return subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], check=True, capture_output=True,
                          text=True).stdout


def test_the_m8_forms_keep_everything_in_registers(tmp_path):
    """M=8 (stop 48): rows x 8 sums and x's rows live in registers beside W. At K=7168 ptxas (sm_90a) spilled the
    forms with 28 W vectors a thread (t64_r2, t128_r4), so above M=4 a form holds at most 16; the heaviest left,
    t224_r4 (16 vectors, 32 sums) and t64_r1 (14 vectors), compile with no spill."""
    _triton_tools("ptxas")
    b = CuteDSLDotBackend()
    for name in ("cutedsl_dot_m8_t64_r2_bx", "cutedsl_dot_m8_t128_r4_pdl_bx"):
        ok, why = b.supports(DotConfig.parse(name), 8, 1024, 7168)
        assert not ok and "28 W vectors a thread (more than 16 at max_m=8" in why, why
    assert b.supports(DotConfig.parse("cutedsl_dot_m4_t128_r4_pdl_bx"), 4, 1024, 7168)[0]  # M <= 4: as before
    for cfg in (DotConfig(8, 224, 4, False, True), DotConfig(8, 64, 1, False, True)):
        assert b.supports(cfg, 8, 1024, 7168)[0]
        d = tmp_path / cfg.name
        d.mkdir()
        (d / "k.ptx").write_text(_compile_and_read_ptx(d, cfg, 1024, 7168))
        info = _ptxas(d / "k.ptx", d / "k.cubin", "-v")
        assert "0 bytes spill stores, 0 bytes spill loads" in info, (cfg.name, info)


def _mb1_pair(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "plain").mkdir()
    (tmp_path / "mb1").mkdir()
    return (_compile_and_read_ptx(tmp_path / "plain", DotConfig(1, 224, 1, True), 2048, 7168),
            _compile_and_read_ptx(tmp_path / "mb1", DotConfig(1, 224, 1, True, False, True), 2048, 7168))


def test_the_mb1_form_asks_for_one_cta_an_sm_and_changes_no_sum(tmp_path):
    """``_mb1`` (stop 37): the launch's ``min_blocks_per_mp=1`` puts ``.minnctapersm 1`` in the PTX and nothing
    else that computes: the same loads, the same multiply-adds in the same order (the order reference holds for
    both forms)."""
    plain, mb1 = _mb1_pair(tmp_path)
    assert ".minnctapersm 1" in mb1 and "minnctapersm" not in plain
    assert re.findall(r"\bfma\.rn\.f32\b.*", plain) == re.findall(r"\bfma\.rn\.f32\b.*", mb1)
    for pattern in (r"ld\.global[.a-z0-9]*\.v4", r"st\.global", r"shfl\.sync", r"bar\.sync"):
        assert len(re.findall(pattern, plain)) == len(re.findall(pattern, mb1)), pattern


def test_the_mb1_form_issues_every_x_load_before_the_first_multiply(tmp_path):
    """Why ``_mb1`` is a candidate: at M=1, t224_r1, K=7168, ptxas (sm_90a) issues all four x loads of the mb1
    form before its first FFMA; in the plain form the fourth waits behind three FFMAs, a second round of
    memory latency after the PDL wait (vLLM's dot kernel launches with the same hint)."""
    plain, mb1 = _mb1_pair(tmp_path)

    def loads_after_first_ffma(sass: str) -> int:
        seq = "".join("L" if "LDG" in line else "F" if "FFMA" in line else "" for line in sass.splitlines())
        return seq[seq.index("F"):].count("L")

    assert loads_after_first_ffma(_sass(tmp_path / "plain", plain)) == 1
    assert loads_after_first_ffma(_sass(tmp_path / "mb1", mb1)) == 0


_PAIR_PTX = """
from sglang_fp32gemm.backends.cutedsl_dot import DotConfig, compile_pair
compile_pair(DotConfig.parse({name!r}), {n}, {n2}, {k})
"""


@pytest.mark.parametrize("cfg, n, n2, k", [(DotConfig(1, 448, 1, True), 512, 2048, 7168),
                                           (DotConfig(2, 256, 2, False), 512, 2048, 4096),
                                           (DotConfig(2, 448, 2, True, True, True), 512, 2048, 7168)])
def test_the_pair_form_is_two_of_the_forms_cta_bodies_in_one_launch(tmp_path, cfg, n, n2, k):
    """DeepSeek-V4's ratio-4 layers: the indexer's compressor (N=512) and the layer's (N=2048) on the same x.
    One kernel; the CTA index picks the body at N / rows; each body is the single form's (its W loads, then the
    wait, then x; the same FMAs); no atomics."""
    cutedsl_child(_PAIR_PTX.format(name=cfg.name, n=n, n2=n2, k=k), CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx",
                  CUTE_DSL_DUMP_DIR=str(tmp_path))
    (ptx,) = tmp_path.glob("*.ptx")
    text = ptx.read_text()
    assert text.count(".entry") == 1
    assert (".minnctapersm 1" in text) == cfg.min_blocks  # _mb1: the pair's launch takes the hint too
    body = text[text.index(".entry"):]
    # The one branch on the CTA index: CTAs 0 .. N/rows - 1 take (w, out).
    assert re.search(rf"setp\.(gt|ge|lt|le)\.[us]32\s+%p\d+, %r\d+, {n // cfg.rows - 1};"
                     rf"|setp\.(gt|ge|lt|le)\.[us]32\s+%p\d+, %r\d+, {n // cfg.rows};", body), "no branch at N / rows"
    iters = k // (8 * cfg.threads)
    loads = [mt.start() for mt in re.finditer(r"ld\.global[.a-z0-9]*\.v4", body)]
    assert len(loads) == 2 * (cfg.rows * iters + cfg.max_m * iters), len(loads)
    assert len(re.findall(r"\bfma\.rn\.f32\b", body)) == 2 * cfg.max_m * iters * cfg.rows * 8
    assert not re.search(r"\b(atom|red)\.", body)
    # Both bodies reduce through one buffer, the launch's smem: rows * max_m x warps fp32 (each body allocating
    # its own put the second past the launch's smem: an illegal address on the H100, run 21).
    size = cfg.rows * cfg.max_m * (cfg.threads // 32) * 4
    offsets = [int(o) for o in re.findall(r"\b(?:st|ld)\.shared[.a-z0-9]*\s+[^;]*\[%r\d+\+(\d+)\]", body)]
    assert all(o < size for o in offsets), (sorted(set(offsets)), size)
    if cfg.pdl:
        waits = [mt.start() for mt in re.finditer(r"griddepcontrol\.wait", body)]
        assert len(waits) == 2
        # Each body issues its W loads before its own wait.
        bodies = [(0, waits[0]), (waits[0], waits[1])]
        for lo, wait in bodies:
            assert sum(1 for p in loads if lo <= p < wait) >= cfg.rows * iters
    else:
        assert "griddepcontrol" not in body


def test_a_pair_the_form_does_not_tile_is_refused_before_compiling():
    b = CuteDSLDotBackend()
    with pytest.raises(ValueError, match="rows=4"):
        b.bind_pair(DotConfig(1, 448, 4, True), torch.device("cpu"), 512, 2046, 7168)
