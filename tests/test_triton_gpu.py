"""The Triton kernel on a real NVIDIA GPU (skipped elsewhere).

Reference in float64, fresh random inputs each check, outputs poisoned with
NaN before the kernel runs so unwritten elements show.
"""

import pytest
import torch

from sglang_fp32gemm.backends import triton_splitk as ts

cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
    reason="needs an NVIDIA GPU",
)
K = 7168
CFGS = {
    512: ts.SplitKConfig(16, 32, 128, 7, 4, 4),
    1024: ts.SplitKConfig(16, 64, 128, 8, 4, 4),
    2048: ts.SplitKConfig(16, 64, 128, 4, 4, 4),
    2560: ts.SplitKConfig(16, 64, 256, 4, 4, 3),
}


def _run(cfg, m, n, x=None, w=None):
    dev = torch.device("cuda")
    x = torch.randn(m, K, device=dev).bfloat16() if x is None else x
    w = torch.randn(n, K, device=dev).bfloat16() if w is None else w
    out = torch.full((m, n), float("nan"), device=dev)
    ws = torch.full((max(1, cfg.workspace_floats(m, n)),), float("nan"), device=dev)
    cnt = torch.zeros(max(1, cfg.counters(m, n)), dtype=torch.int32, device=dev)
    ts.launch(x, w, cfg, out, ws, cnt)
    return x, w, out, cnt


@cuda
@pytest.mark.parametrize("n", sorted(CFGS))
@pytest.mark.parametrize("m", [1, 3, 8, 16, 17, 32])
def test_kernel_is_fp32_exact_on_dsv4_shapes(m, n):
    cfg = CFGS[n] if m <= 16 else ts.SplitKConfig(32, *dataclass_tail(CFGS[n]))
    x, w, out, cnt = _run(cfg, m, n)
    ref = ts.reference(x, w)
    assert torch.isfinite(out).all(), "unwritten or non-finite output"
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    assert rel <= 1e-5, rel
    torch.testing.assert_close(out.double(), ref, atol=1e-2, rtol=1e-4)
    assert (cnt == 0).all(), "tile counters must be left at zero"


def dataclass_tail(cfg):
    return cfg.bn, cfg.bk, cfg.split_k, cfg.num_warps, cfg.num_stages


@cuda
def test_kernel_is_bitwise_repeatable_whatever_finishes_last():
    cfg = ts.SplitKConfig(16, 32, 128, 14, 4, 4)
    x, w, first, _ = _run(cfg, 8, 1024)
    for _ in range(30):
        _, _, again, _ = _run(cfg, 8, 1024, x=x, w=w)
        assert torch.equal(first, again)


@cuda
def test_backend_under_cuda_graph_replay_equals_eager():
    be = ts.TritonSplitKBackend()
    from sglang_fp32gemm.table import TunedRow

    row = TunedRow("sm90", 132, 8, 1024, K, False, "torch.bfloat16", "torch.float32",
                   False, False, "triton", 0, 8, 0.0, CFGS[1024].name, 0, 0, 0)
    xs = [torch.randn(8, K, device="cuda").bfloat16() for _ in range(4)]
    ws = [torch.randn(1024, K, device="cuda").bfloat16() for _ in range(4)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        be.run(xs[0], ws[0], row)  # allocate this stream's workspace eagerly
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        outs = [be.run(xs[i], ws[i], row) for i in range(4)]
    for _ in range(3):
        for t in outs:
            t.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        for i in range(4):
            torch.testing.assert_close(outs[i].double(), ts.reference(xs[i], ws[i]), atol=1e-2, rtol=1e-4)


@cuda
def test_routed_decode_sequence_under_graph_replay_equals_eager(monkeypatch):
    """61 compressor-like calls (HCA/CSA/indexer/fused, M=4) through the plugin."""
    monkeypatch.setenv("SGLANG_ENABLE_FLYDSL_FP32_GEMM", "1")
    from sglang_fp32gemm import routing, settings
    from sglang_fp32gemm.layers import LayerInfo

    settings.reload()
    router = routing.reset_router()
    try:
        shapes = [(1024, "hca"), (2048, "csa"), (512, "indexer"), (2560, "fused")]
        ws = {n: torch.randn(n, K, device="cuda").bfloat16() for n, _ in shapes}
        x = torch.randn(4, K, device="cuda").bfloat16()
        seq = [shapes[i % 4] for i in range(61)]

        def step():
            return [routing.linear_bf16_fp32(x, ws[n], layer=LayerInfo(i, kind)) for i, (n, kind) in enumerate(seq)]

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            eager = step()
        torch.cuda.synchronize()
        assert router.decide(x, ws[1024]).route == "triton"
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            outs = step()
        for _ in range(3):
            x.copy_(torch.randn_like(x))
            g.replay()
            torch.cuda.synchronize()
            for o, (n, _) in zip(outs, seq):
                torch.testing.assert_close(o.double(), ts.reference(x, ws[n]), atol=1e-2, rtol=1e-4)
        assert len(eager) == 61
    finally:
        monkeypatch.delenv("SGLANG_ENABLE_FLYDSL_FP32_GEMM")
        settings.reload()
        routing.reset_router()
