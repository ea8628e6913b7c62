"""Eager and captured calls of a ``cutedsl`` row, and of a torch row the eager table
overrides, on a real NVIDIA GPU (skipped elsewhere).

The packaged table routes some shapes to SGLang's CuTe-DSL kernel, whose eager
launch costs more host time than torch.mm: an eager call of such a shape runs
the nearest Triton row's kernel, a captured one the row's own kernel. Where the
region ranking made a row torch, the eager table (``configs/sm90_eager.csv``)
gives eager calls a Triton kernel. The counters say which ran, and every result
is exact. The fast table's rows serve calls inside SGLang's multi-stream region
(``routing.overlapped``; SGLang warms it up eagerly on the stream it then
captures), the serial table's (laid over them) every other call.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch

from sglang_fp32gemm.exactness import measure, random_bf16, reference

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
    reason="needs an NVIDIA GPU",
)


def _cutedsl_row(router, key, serial: bool):
    """(M, N, K, row plan) of a cutedsl row of this device with an eager alternative, in the fast table
    (calls inside the region) or the serial one; M inside its bucket."""
    table = router.config.serial_table if serial else router.config.table
    for row in sorted(table.rows() if table is not None else [], key=lambda r: (r.N, r.K, -r.M)):
        if (row.gfx, row.cu_num, row.libtype) != (key.gfx, key.cu_num, "cutedsl"):
            continue
        # One below the row's M when that M still takes this row: it is run at an M its probe did not run.
        for m in (row.M - 1, row.M):
            p = router.plan(key, m, row.N, row.K, serial=serial) if m >= 1 else None
            # SGLang's kernel (libtype cutedsl names our dot kernel too, whose eager launch is cheap)
            if p is not None and p.row == row and p.backend is not None and p.backend.name == "cutedsl" \
                    and p.eager is not None and p.eager.backend is not None:
                return m, row.N, row.K, p
    pytest.skip(f"no cutedsl row with an eager alternative for {key} in the {'serial' if serial else 'fast'} table")


def _where(serial: bool):
    from sglang_fp32gemm import routing

    return contextlib.nullcontext() if serial else routing.overlapped()


def _exact(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    r = measure(out, reference(x, w))
    assert r.finite and r.ok, r


@pytest.mark.parametrize("serial", [False, True], ids=["in-region", "serial"])
def test_an_eager_call_of_a_cutedsl_row_runs_triton_and_a_captured_one_cutedsl(monkeypatch, serial):
    from sglang_fp32gemm import routing, settings
    from sglang_fp32gemm.table import device_key

    monkeypatch.setenv(settings.ENABLE_VAR, "1")
    settings.reload()
    router = routing.reset_router()
    ok, why = router.available().get("cutedsl", (False, "no cutedsl backend"))
    if not ok:
        pytest.skip(f"cutedsl: {why}")
    dev = torch.device("cuda", torch.cuda.current_device())
    m, n, k, p = _cutedsl_row(router, device_key(dev), serial)
    row_key = ("cutedsl", p.backend.kernel_name(p.cfg))
    eager_key = (p.eager.backend.name, p.eager.backend.kernel_name(p.eager.cfg))
    assert p.eager.backend.eager_ok and eager_key[0] != "cutedsl", eager_key
    x, w = random_bf16(m, k, device=dev), random_bf16(n, k, device=dev)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), _where(serial):  # eager, on the stream the graph is captured on (as SGLang warms up)
        eager = [routing.linear_bf16_fp32(x, w) for _ in range(2)]
    torch.cuda.synchronize()
    for out in eager:
        _exact(out, x, w)
    assert router.counters() == {eager_key: 2}
    with _where(serial):
        assert router.describe_call(x, w)[0] == eager_key[0]
        assert router.describe_call(x, w, captured=True)[0] == "cutedsl"

    router.reset_counters()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s), _where(serial):
        out = routing.linear_bf16_fp32(x, w)
    assert router.counters() == {row_key: 1}  # compiled at this M when resolved, not a fallback
    for _ in range(2):
        x.copy_(random_bf16(m, k, device=dev))
        g.replay()
        torch.cuda.synchronize()
        _exact(out, x, w)


def test_an_eager_call_of_a_torch_row_runs_the_eager_tables_kernel_and_a_captured_one_torch(monkeypatch, tmp_path):
    from sglang_fp32gemm import routing, settings
    from sglang_fp32gemm.table import device_key, format_rows

    dev = torch.device("cuda", torch.cuda.current_device())
    key = device_key(dev)
    monkeypatch.setenv(settings.ENABLE_VAR, "1")
    settings.reload()
    # The eager table's rows override fast-table rows: calls inside SGLang's multi-stream region.
    found = [r for r in routing.reset_router().config.eager_table.rows() if (r.gfx, r.cu_num) == (key.gfx, key.cu_num)]
    if not found:
        pytest.skip(f"no eager-table row for {key}")
    m, n, k = found[0].M, found[0].N, found[0].K
    # The packaged fast table has a torch row on one GPU model only (the H200's M=1 N=512): one laid over it at
    # the eager row's shape lets every GPU with eager rows run this.
    fast = tmp_path / "torch_row.csv"
    fast.write_text(format_rows([dataclasses.replace(found[0], libtype="torch", kernelName="", splitK=0)]))
    monkeypatch.setenv(settings.CONFIG_VAR, str(fast))
    settings.reload()
    router = routing.reset_router()
    p = router.plan(key, m, n, k)
    assert p.backend is None and p.eager is not None and p.eager.backend is not None, p  # a torch row
    eager_key = (p.eager.backend.name, p.eager.backend.kernel_name(p.eager.cfg))
    x, w = random_bf16(m, k, device=dev), random_bf16(n, k, device=dev)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), routing.overlapped():
        eager = [routing.linear_bf16_fp32(x, w) for _ in range(2)]
    torch.cuda.synchronize()
    for out in eager:
        _exact(out, x, w)
    assert router.counters() == {eager_key: 2}

    router.reset_counters()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s), routing.overlapped():
        out = routing.linear_bf16_fp32(x, w)
    assert [route for route, _ in router.counters()] == ["torch"]
    for _ in range(2):
        x.copy_(random_bf16(m, k, device=dev))
        g.replay()
        torch.cuda.synchronize()
        _exact(out, x, w)
