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
    # Every thread/row form (the M=4 candidates, run at each M up to 4); the first form of M 1 and 2.
    b = CuteDSLDotBackend()
    cfgs = b.candidates(4, n, k) + b.candidates(2, n, k)[:1] + b.candidates(1, n, k)[:1]
    assert len(cfgs) >= 3
    w = rnd(n, k)
    for cfg in cfgs:
        fn = bound(cfg, n, k)
        for mm in range(1, cfg.max_m + 1):
            x = rnd(mm, k)
            check(poisoned_call(fn, x, w), x, w, cfg.threads)


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
