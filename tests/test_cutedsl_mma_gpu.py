"""The ``cutedsl-mma`` kernel on an NVIDIA GPU (sm90+): fp32-exact at every M up to its tile, the same bits
on every call, under graph capture on a side stream with PDL right after the kernel that writes its x.
Skipped elsewhere."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import cutedsl_bound, poisoned_call, replays_after_the_writer
from sglang_fp32gemm.backends.cutedsl_mma import CuteDSLMmaBackend, MmaConfig
from sglang_fp32gemm.exactness import measure, reference

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
    reason="needs an NVIDIA GPU",
)


def bound(cfg: MmaConfig, n: int, k: int):
    return cutedsl_bound(CuteDSLMmaBackend(), cfg, n, k)


def rnd(*shape):
    return torch.randn(*shape, device="cuda").bfloat16()


def check(out, x, w):
    r = measure(out, reference(x, w))
    assert r.finite and r.ok and r.rel_err <= 1e-5, r


@pytest.mark.parametrize("n, k, every", [(1024, 7168, 7), (512, 7168, 23), (2560, 7168, 23), (1024, 4096, 23),
                                         (2048, 5120, 23)])
def test_candidates_are_exact_and_deterministic(n, k, every):
    # Every seventh form offered at M 8, 16 and 32 at N=1024 K=7168 (elsewhere every 23rd: each form
    # compiles for a second or two), each run at M 1, 3, its largest M and one between.
    b = CuteDSLMmaBackend()
    cfgs = (b.candidates(8, n, k) + b.candidates(16, n, k) + b.candidates(32, n, k))[::every]
    assert len(cfgs) >= 3 and any(c.staged for c in cfgs) and any(not c.staged for c in cfgs)
    assert any(c.max_m == 32 for c in cfgs) and any(c.depth for c in cfgs)
    w = rnd(n, k)
    for cfg in cfgs:
        fn = bound(cfg, n, k)
        for mm in sorted({1, 3, cfg.max_m - 3, cfg.max_m}):
            x = rnd(mm, k)
            out = poisoned_call(fn, x, w)
            check(out, x, w)
            # A fixed summation order: the same bits again.
            assert torch.equal(out, poisoned_call(fn, x, w)), (cfg.name, mm)


@pytest.mark.parametrize("pull, n, k", [(MmaConfig(8, 8, 1, 2, True), 1024, 7168),
                                         (MmaConfig(16, 4, 2, 8, False, True), 512, 7168),
                                         (MmaConfig(8, 4, 2, 4, False, depth=4), 2048, 7168),
                                         (MmaConfig(32, 4, 1, 8, True), 2560, 4096)])
def test_the_push_reduction_is_exact_and_gives_the_pull_reductions_bits(pull, n, k):
    push = dataclasses.replace(pull, push=True)
    fa, fb = bound(pull, n, k), bound(push, n, k)
    w = rnd(n, k)
    for mm in sorted({1, 3, pull.max_m - 1, pull.max_m}):
        x = rnd(mm, k)
        out = poisoned_call(fb, x, w)
        check(out, x, w)
        # The same sums added in the same order.
        assert torch.equal(out, poisoned_call(fa, x, w)), (push.name, mm)


def test_strided_and_misaligned_x():
    cfg, n, k = MmaConfig(16, 8, 1, 4, True), 1024, 7168
    fn = bound(cfg, n, k)
    w = rnd(n, k)
    base = rnd(16, k + 24)
    for x in (base[:, :k], base[:, 8:8 + k], base[:5, 1:1 + k], base[:1, 3:3 + k], base[2:3, :k]):
        check(poisoned_call(fn, x, w), x, w)


@pytest.mark.parametrize("cfg", [MmaConfig(8, 8, 1, 4, True), MmaConfig(8, 8, 1, 1, True, depth=8),
                                 MmaConfig(8, 8, 1, 2, True, push=True)], ids=lambda c: c.name)
def test_under_graph_replay_on_a_side_stream_with_pdl_after_the_kernel_that_writes_x(cfg):
    n, k = 2048, 7168
    w = rnd(n, k)
    for out, x in replays_after_the_writer(bound(cfg, n, k), w, 6):
        check(out, x, w)


def test_a_misaligned_weight_raises_instead_of_loading_it_misaligned():
    cfg, n, k = MmaConfig(8, 4, 1, 8), 512, 7168
    fn = bound(cfg, n, k)
    buf = rnd(n * k + 8)
    with pytest.raises(ValueError, match="16-byte aligned"):
        fn(rnd(1, k), buf[1:1 + n * k].view(n, k))
