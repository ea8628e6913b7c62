"""The ``cutedsl-dot`` kernel on an NVIDIA GPU (sm90+): bit-for-bit its order reference, fp32-exact, under
graph capture on a side stream, and with PDL right after the kernel that writes its x. Skipped elsewhere."""

from __future__ import annotations

import pytest
import torch

from conftest import cutedsl_bound, poisoned_call, replays_after_the_writer
from sglang_fp32gemm.backends.cutedsl_dot import CuteDSLDotBackend, DotConfig, order_reference
from sglang_fp32gemm.exactness import measure, reference

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
    reason="needs an NVIDIA GPU",
)


def bound(cfg: DotConfig, n: int, k: int):
    return cutedsl_bound(CuteDSLDotBackend(), cfg, n, k)


def rnd(*shape):
    return torch.randn(*shape, device="cuda").bfloat16()


def check(out, x, w, threads):
    r = measure(out, reference(x, w))
    assert r.finite and r.ok and r.rel_err <= 1e-5, r
    # The kernel's sums in the kernel's order: the same bits (and so deterministic).
    assert torch.equal(out, order_reference(x, w, threads))


@pytest.mark.parametrize("n, k", [(512, 7168), (2560, 7168), (1024, 4096), (2048, 5120)])
def test_candidates_are_exact_and_equal_their_order_reference(n, k):
    # Every thread/row form (the M=4 candidates, run at each M up to 4); the first form of M 1 and 2, and M=1's
    # _mb1 forms (the launch's occupancy hint; every thread count, the smallest row count of each). The PDL
    # placements (_ls, _lw) only move two instructions and have their own test below: with them the M=4
    # candidates double, and on an H100 the file did not finish in 140 s (run 33j: two of this test's shapes).
    b = CuteDSLDotBackend()
    ones = [c for c in b.candidates(1, n, k) if not c.placement]
    mb1 = {c.threads: c for c in reversed(ones) if c.min_blocks}
    cfgs = ([c for c in b.candidates(4, n, k) if not c.placement] + b.candidates(2, n, k)[:1] + ones[:1]
            + sorted(mb1.values(), key=lambda c: c.threads))
    assert len(cfgs) >= 3
    w = rnd(n, k)
    for cfg in cfgs:
        fn = bound(cfg, n, k)
        for mm in range(1, cfg.max_m + 1):
            x = rnd(mm, k)
            check(poisoned_call(fn, x, w), x, w, cfg.threads)


@pytest.mark.parametrize("name, n, k", [("cutedsl_dot_m8_t224_r2_bx", 1024, 7168),
                                        ("cutedsl_dot_m8_t448_r1", 1024, 7168),
                                        ("cutedsl_dot_m8_t224_r4_pdl_lw_bx_mb1", 2048, 7168),
                                        ("cutedsl_dot_m8_t256_r2_pdl_bx", 2560, 4096)])
def test_the_m8_forms_are_exact_at_every_m_up_to_8(name, n, k):
    # M=8 (stop 48; passed on an H100, run 36a): every M 1-8 (rows past M with _bx read x's last row and are
    # never stored), NaN-poisoned, the order reference's bits; with PDL also right after x's writer. The tuner
    # no longer offers these forms (36a-b: slower than Triton's); a row may still name one.
    cfg = DotConfig.parse(name)
    assert CuteDSLDotBackend().supports(cfg, 8, n, k)[0]
    fn = bound(cfg, n, k)
    w = rnd(n, k)
    for mm in range(1, 9):
        x = rnd(mm, k)
        check(poisoned_call(fn, x, w), x, w, cfg.threads)
    if cfg.pdl:
        for out, x in replays_after_the_writer(fn, w, cfg.max_m):
            check(out, x, w, cfg.threads)


@pytest.mark.parametrize("cfg, n, k", [(DotConfig(1, 448, 1, True, False, False, 132), 2048, 7168),
                                       (DotConfig(1, 448, 1, True, False, False, 264), 512, 7168),
                                       (DotConfig(2, 448, 2, True, True, False, 100), 1024, 7168),  # a short last trip
                                       (DotConfig(4, 128, 1, False, True, False, 7), 512, 7168),
                                       (DotConfig(1, 448, 4, True, False, False, 132), 2048, 7168),
                                       (DotConfig(1, 128, 1, True, False, False, 264), 2560, 7168),
                                       (DotConfig(1, 256, 1, True, False, False, 132), 1024, 4096)])
def test_capped_forms_are_exact_and_give_the_plain_forms_bits(cfg, n, k):
    # _g<C> (stop 39): C CTAs, each taking every C-th block of rows; every row of out written (NaN-poisoned),
    # the same sums in the same order as the plain form.
    fn = bound(cfg, n, k)
    w = rnd(n, k)
    for mm in range(1, cfg.max_m + 1):
        x = rnd(mm, k)
        check(poisoned_call(fn, x, w), x, w, cfg.threads)
    if cfg.pdl:
        for out, x in replays_after_the_writer(fn, w, cfg.max_m):
            check(out, x, w, cfg.threads)


@pytest.mark.parametrize("name, n", [("cutedsl_dot_m2_t224_r1_pdl_lw_bx_mb1", 2048),   # the rows of run 33
                                     ("cutedsl_dot_m4_t224_r2_pdl_lw_bx", 2048),
                                     ("cutedsl_dot_m2_t896_r2_pdl_ls_bx", 1024),
                                     ("cutedsl_dot_m1_t448_r1_pdl_ls", 2048)])
def test_placement_forms_are_exact_and_safe_right_after_the_kernel_that_writes_x(name, n):
    # _ls / _lw (stop 46) move PDL's wait and release: every M exact with the order reference's bits, and under
    # graph replay right after the kernel that writes x (with _lw nothing is loaded before the wait).
    cfg, k = DotConfig.parse(name), 7168
    fn = bound(cfg, n, k)
    w = rnd(n, k)
    for mm in range(1, cfg.max_m + 1):
        x = rnd(mm, k)
        check(poisoned_call(fn, x, w), x, w, cfg.threads)
    for out, x in replays_after_the_writer(fn, w, cfg.max_m):
        check(out, x, w, cfg.threads)


def test_strided_and_misaligned_x():
    cfg, n, k = DotConfig(4, 128, 2, True), 1024, 7168
    fn = bound(cfg, n, k)
    w = rnd(n, k)
    base = rnd(4, k + 24)
    for x in (base[:, :k], base[:, 8:8 + k], base[:, 1:1 + k], base[:1, 3:3 + k], base[2:3, :k]):
        check(fn(x, w), x, w, cfg.threads)


def test_under_graph_replay_on_a_side_stream_with_pdl_after_the_kernel_that_writes_x():
    cfg, n, k = DotConfig(2, 128, 2, True), 2048, 7168
    w = rnd(n, k)
    for out, x in replays_after_the_writer(bound(cfg, n, k), w, 2):
        check(out, x, w, cfg.threads)


def test_a_misaligned_weight_raises_instead_of_loading_it_misaligned():
    cfg, n, k = DotConfig(1, 128, 2, True), 512, 7168
    fn = bound(cfg, n, k)
    buf = rnd(n * k + 8)
    with pytest.raises(ValueError, match="16-byte aligned"):
        fn(rnd(1, k), buf[1:1 + n * k].view(n, k))


@pytest.mark.parametrize("cfg, k", [(DotConfig(1, 448, 1, True), 7168), (DotConfig(2, 448, 2, True), 7168),
                                    (DotConfig(4, 128, 2, False), 4096),
                                    (DotConfig.parse("cutedsl_dot_m2_t224_r1_pdl_lw_bx_mb1"), 7168)])  # run 33
def test_the_pair_form_gives_each_output_the_single_forms_bits(cfg, k):
    """DeepSeek-V4's ratio-4 pair (N=512 and N=2048 on the same x) in one launch: each output NaN-poisoned
    first, fp32-exact and bit for bit the single form's call on its own weight, at every M of the form."""
    ok, why = CuteDSLDotBackend().available()
    if not ok:
        pytest.skip(why)
    n, n2 = 512, 2048
    pair = CuteDSLDotBackend().bind_pair(cfg, torch.device("cuda"), n, n2, k)
    single, single2 = bound(cfg, n, k), bound(cfg, n2, k)
    w, w2 = rnd(n, k), rnd(n2, k)
    for mm in range(1, cfg.max_m + 1):
        x = rnd(mm, k)
        p = torch.full((mm, n + n2), float("nan"), device="cuda")
        del p  # the caching allocator hands this NaN block to the outputs
        out, out2 = pair(x, w, w2)
        check(out, x, w, cfg.threads)
        check(out2, x, w2, cfg.threads)
        assert torch.equal(out, single(x, w)) and torch.equal(out2, single2(x, w2))


@pytest.mark.parametrize("cfg", [DotConfig(1, 448, 1, True), DotConfig.parse("cutedsl_dot_m2_t224_r1_pdl_lw_bx_mb1")])
def test_the_pair_form_under_graph_replay_with_pdl_after_the_kernel_that_writes_x(cfg):
    k = 7168
    ok, why = CuteDSLDotBackend().available()
    if not ok:
        pytest.skip(why)
    pair = CuteDSLDotBackend().bind_pair(cfg, torch.device("cuda"), 512, 2048, k)
    w, w2 = rnd(512, k), rnd(2048, k)
    got = {}

    def both(x, w_):  # replays_after_the_writer's fn(x, w): the pair, keeping its second output
        out, got["out2"] = pair(x, w_, w2)
        return out

    for out, x in replays_after_the_writer(both, w, cfg.max_m):
        check(out, x, w, cfg.threads)
        check(got["out2"], x, w2, cfg.threads)
