"""The ``cutedsl-mma`` backend (our CuTe-DSL tensor-core split-K kernel, M <= 32) on CPU.

The kernel runs only on an sm90+ GPU (tests/test_cutedsl_mma_gpu.py). Here: names and shape rules, the
candidates, and the kernel compiled for sm_90a on this CPU (nvidia-cutlass-dsl compiles without a GPU; the
tests skip, saying so, where it is not installed), its PTX read for what the design promises.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import cutedsl_child, cutedsl_ptx
from sglang_fp32gemm.backends import default_backends, parsers
from sglang_fp32gemm.backends.cutedsl_mma import MAX_STAGE_BYTES, MAX_VECTORS, CuteDSLMmaBackend, MmaConfig


@pytest.mark.parametrize("cfg", [MmaConfig(8, 8, 1, 2, True), MmaConfig(16, 4, 2, 8),
                                 MmaConfig(8, 2, 1, 4, False, True), MmaConfig(16, 8, 1, 1, True, True),
                                 MmaConfig(32, 4, 2, 8, True, True), MmaConfig(8, 8, 1, 1, True, depth=8),
                                 MmaConfig(16, 4, 2, 2, depth=4), MmaConfig(8, 8, 1, 2, True, push=True),
                                 MmaConfig(8, 4, 1, 8, False, True, push=True),
                                 MmaConfig(16, 8, 2, 4, True, depth=4, push=True)])
def test_names_round_trip(cfg):
    assert MmaConfig.parse(cfg.name) == cfg
    assert CuteDSLMmaBackend().kernel_name(cfg) == cfg.name


@pytest.mark.parametrize("name, why", [
    ("cutedsl_mma_m4_w8_r1_c2", "max_m=4"),
    ("cutedsl_mma_m64_w8_r1_c4", "max_m=64"),
    ("cutedsl_mma_m8_w3_r1_c2", "warps=3"),
    ("cutedsl_mma_m8_w8_r4_c2", "row groups=4"),
    ("cutedsl_mma_m8_w8_r1_c16", "cluster=16"),
    ("cutedsl_mma_m8_w8_r1", "is not of the form"),
    ("cutedsl_mma_m8_w8_r1_c2_pdl_s", "is not of the form"),
    ("cutedsl_mma_m8_w8_r1_c2_p6", "depth=6"),
    ("cutedsl_mma_m8_w8_r1_c2_s_p4", "is not of the form"),
    ("cutedsl_mma_m8_w8_r1_c1_push", "pushing needs a cluster"),
    ("cutedsl_mma_m8_w8_r1_c2_pdl_push", "is not of the form"),
    ("cutedsl_mma_m8_w8_r1_c2_push_s", "is not of the form"),
    ("cutedsl_dot_m1_t128_r2_pdl", "is not of the form"),
])
def test_bad_names_say_what_is_wrong(name, why):
    with pytest.raises(ValueError, match=why):
        MmaConfig.parse(name)


def test_each_cutedsl_name_has_exactly_one_backend():
    names = ["cutedsl_mma_m8_w8_r1_c2_pdl", "cutedsl_dot_m1_t128_r2_pdl", "cutedsl_warpsplitk_o16_t8_k256_s8_b1"]
    for name in names:
        accepted = []
        for parse in parsers(default_backends())["cutedsl"]:
            try:
                accepted.append(parse(name))
            except ValueError:
                pass
        assert len(accepted) == 1, (name, accepted)


@pytest.mark.parametrize("cfg, m, n, k, ok", [
    (MmaConfig(8, 8, 1, 4), 8, 1024, 7168, True),
    (MmaConfig(8, 8, 1, 4), 1, 1024, 7168, True),       # any M up to max_m
    (MmaConfig(8, 8, 1, 4), 9, 1024, 7168, False),      # above max_m
    (MmaConfig(16, 8, 2, 4), 16, 1040, 7168, False),    # N not a multiple of 32
    (MmaConfig(8, 8, 1, 8), 8, 1024, 7168, False),      # 7168 = 3.5 x 32 x 8 x 8
    (MmaConfig(8, 8, 1, 1), 8, 1024, 7168, False),      # 28 steps: 84 vectors in registers
    (MmaConfig(8, 8, 1, 1, staged=True), 8, 1024, 7168, False),   # 229376 bytes staged
    (MmaConfig(8, 4, 1, 2, staged=True), 8, 1024, 7168, True),    # 114688 bytes staged
    (MmaConfig(16, 8, 1, 2), 16, 1024, 7168, False),    # 14 steps x (2 + 2) vectors
    (MmaConfig(16, 8, 1, 2, staged=True), 16, 1024, 7168, True),
    (MmaConfig(32, 8, 1, 4), 32, 1024, 7168, True),     # 7 steps x (4 + 2) vectors
    (MmaConfig(32, 8, 1, 4), 33, 1024, 7168, False),
    (MmaConfig(32, 8, 2, 4), 32, 1024, 7168, False),    # 7 steps x (4 + 4) vectors
    (MmaConfig(32, 8, 2, 4, staged=True), 32, 1024, 7168, True),
    (MmaConfig(32, 8, 1, 2, staged=True), 32, 1024, 7168, False),  # 14 steps x 4 x vectors
    (MmaConfig(8, 8, 1, 1, depth=8), 8, 2048, 7168, True),    # 28 steps through a ring of 8
    (MmaConfig(8, 8, 1, 4, depth=4), 8, 2048, 7168, False),   # 7 steps: too few to stream
    (MmaConfig(32, 8, 2, 1, depth=8), 32, 2048, 7168, False),  # 8 x (4 + 4) x 16 x 256 bytes in the ring
    (MmaConfig(32, 8, 2, 1, depth=4), 32, 2048, 7168, True),
])
def test_shape_rules(cfg, m, n, k, ok):
    assert CuteDSLMmaBackend().supports(cfg, m, n, k)[0] is ok


def test_candidates_only_at_m_1_to_32_and_every_one_takes_the_shape(monkeypatch):
    from sglang_fp32gemm.backends import cutedsl_mma

    monkeypatch.setattr(cutedsl_mma, "sm90_or_later", lambda: False)  # as on this CPU, on a GPU too
    b = CuteDSLMmaBackend()
    for k in (7168, 4096, 5120):
        for n in (512, 1024, 2048, 2560):
            for m in (1, 2, 3, 4, 8, 9, 16, 17, 32, 33):
                cands = b.candidates(m, n, k)
                assert bool(cands) == (1 <= m <= 32), (m, n, k)
                for c in cands:
                    assert c.max_m == (8 if m <= 8 else 16 if m <= 16 else 32), (c, m)
                    assert b.supports(c, m, n, k)[0], (c, m, n, k)
                    steps, nt = c.chunks(k), c.max_m // 8
                    if c.depth:
                        assert c.warps >= 4 and steps >= 2 * c.depth
                        assert c.depth * (2 * c.rg + nt) * 16 * 32 * c.warps <= MAX_STAGE_BYTES
                        continue
                    assert steps * (nt + (0 if c.staged else 2 * c.rg)) <= MAX_VECTORS
                    assert not c.staged or steps * 2 * c.rg * 16 * 32 * c.warps <= MAX_STAGE_BYTES
    # Without PDL (no sm90 GPU) no PDL form is offered; every W placement is.
    assert {(c.staged, c.depth) for c in b.candidates(8, 1024, 7168)} == {(False, 0), (True, 0), (False, 4),
                                                                            (False, 8)}
    assert not any(c.pdl for c in b.candidates(8, 1024, 7168))


_SIZES_AGREE = """
import math
from sglang_fp32gemm.backends import cutedsl_mma
from sglang_fp32gemm.backends.cutedsl_mma_kernel import MmaKernel
cutedsl_mma.sm90_or_later = lambda: True  # the PDL forms too
b, seen, bad = cutedsl_mma.CuteDSLMmaBackend(), set(), []
for n, k in ((512, 7168), (1024, 7168), (2048, 7168), (2560, 7168), (1024, 4096), (512, 5120)):
    for m in range(1, 33):
        for c in b.candidates(m, n, k):
            if (c, n, k) in seen:
                continue
            seen.add((c, n, k))
            kern = MmaKernel(n, k, c.warps, c.rg, c.max_m // 8, c.cs, c.pdl, c.staged, c.depth, c.push)
            if math.prod(kern.grid) != c.ctas(n) or kern.stage_bytes != c.stage_bytes(k):
                bad.append((c.name, n, k))
print(len(seen), len(bad), bad[:5])
"""


def test_every_candidates_launch_and_staging_are_the_configs_own():
    """What the tuner reads from a config (CTAs a call launches, bytes staged a CTA) is what its kernel
    launches, for every form offered at six DSv4 shapes (kernel objects built in a child, not compiled)."""
    count, bad, first = cutedsl_child(_SIZES_AGREE).split(" ", 2)
    assert int(count) > 1000 and bad == "0", first


def _compile_and_read_ptx(tmp_path: Path, cfg: MmaConfig, n: int, k: int) -> str:
    return cutedsl_ptx(tmp_path, "sglang_fp32gemm.backends.cutedsl_mma", "MmaConfig", cfg.name, n, k)


@pytest.mark.parametrize("cfg, n, k", [(MmaConfig(8, 8, 1, 4, True), 1024, 7168),
                                       (MmaConfig(16, 4, 2, 8, False), 512, 7168),
                                       (MmaConfig(8, 8, 1, 2, True, True), 2048, 7168),
                                       (MmaConfig(16, 8, 1, 1, False, True), 1024, 4096),
                                       (MmaConfig(32, 8, 1, 4, True), 1024, 7168),
                                       (MmaConfig(32, 4, 2, 8, False, True), 2560, 7168),
                                       (MmaConfig(8, 8, 1, 1, True, depth=8), 2048, 7168),
                                       (MmaConfig(16, 4, 2, 2, False, depth=4), 1024, 7168),
                                       (MmaConfig(8, 8, 1, 2, True, push=True), 1024, 7168),
                                       (MmaConfig(8, 4, 2, 4, False, depth=4, push=True), 2048, 7168)])
def test_compiled_for_sm90_on_this_cpu_w_is_in_flight_before_the_wait_and_nothing_is_atomic(tmp_path, cfg, n, k):
    ptx = _compile_and_read_ptx(tmp_path, cfg, n, k)
    body = ptx[ptx.index(".entry"):]
    steps, nt = cfg.chunks(k), cfg.max_m // 8
    w_vectors = steps * 2 * cfg.rg
    wait = body.index("griddepcontrol.wait")  # also the fence of the forms launched without PDL
    loads = [mt.start() for mt in re.finditer(r"ld\.global[.a-z0-9]*\.v4", body)]
    copies = [mt.start() for mt in re.finditer(r"cp\.async\.cg\.shared\.global", body)]
    if cfg.depth:
        # Streamed: the first depth - 1 steps' W before the wait, their x after it into registers; then per
        # step one wait for that step's group, the next step's W and x copied, its MMAs.
        ahead = cfg.depth - 1
        assert sum(1 for p in copies if p < wait) == ahead * 2 * cfg.rg
        assert len(copies) == w_vectors + (steps - ahead) * nt
        assert len(loads) == ahead * nt and min(loads) > wait
        waits = [int(v) for v in re.findall(r"cp\.async\.wait_group\s+(\d+);", body)]
        assert waits == [min(steps, i + ahead) - i - 1 for i in range(steps)]
    elif cfg.staged:
        assert len(copies) == w_vectors and max(copies) < wait
        assert "cp.async.wait_group" in body[wait:]
        assert len(loads) == steps * nt and min(loads) > wait     # x, after the wait
    else:
        assert not copies
        assert len(loads) == w_vectors + steps * nt
        assert sum(1 for p in loads if p < wait) == w_vectors      # every W vector first
    assert len(re.findall(r"\bmma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32\b", body)) == \
        steps * cfg.rg * nt * 2
    assert not re.search(r"\b(atom|red)\.", body)  # partial sums meet in (distributed) shared memory only
    clustered = cfg.cs > 1
    assert ("barrier.cluster.arrive" in body) is clustered
    assert ("ld.shared::cluster" in body) is (clustered and not cfg.push)  # pull: read the peers' sums
    assert ("st.shared::cluster" in body) is cfg.push                      # push: store into the owners'
    assert ("griddepcontrol.launch_dependents" in body) is cfg.pdl
    if clustered:
        waits = [mt.start() for mt in re.finditer(r"barrier\.cluster\.wait", body)]
        writes = [mt.start() for mt in re.finditer(r"\bst\.global", body)]
        assert len(waits) == 2 and writes
        if cfg.push:
            # Arrived at the start (no CTA is stored into before it runs), and no cluster wait after the
            # output is written: a CTA leaves as soon as its share is out.
            assert body.index("barrier.cluster.arrive.relaxed") < min(loads + copies)
            assert max(waits) < min(writes)
        else:
            assert max(waits) > max(writes)  # no CTA leaves while a peer may still read its shared memory
