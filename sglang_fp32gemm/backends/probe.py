"""The precision probe every fast backend must pass before its first call.

Once per (backend, device) and process, outside graph capture, the backend
runs one tuned row's shape on fresh random inputs; its output is compared
with ``torch.mm(out_dtype=fp32)`` (the fallback). A relative error above
1e-5, a non-finite or unwritten element, or an exception disables the
backend for the process. bf16-level error is ~2e-3, so it cannot pass.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import torch

from sglang_fp32gemm.backends import torch_ref

if TYPE_CHECKING:  # pragma: no cover
    from sglang_fp32gemm.backends.base import Backend
    from sglang_fp32gemm.table import TunedRow

REL_TOL = 1e-5


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    ok: bool
    rel_err: float
    shape: tuple[int, int, int]
    detail: str

    def describe(self) -> str:
        m, n, k = self.shape
        return f"probe M={m} N={n} K={k}: rel. error {self.rel_err:.2e} (limit {REL_TOL:.0e}); {self.detail}"


def run_probe(backend: "Backend", row: "TunedRow", device: torch.device) -> ProbeResult:
    m, n, k = row.M, row.N, row.K
    shape = (m, n, k)
    gen = torch.Generator(device="cpu").manual_seed(time.time_ns() & 0x7FFFFFFF)
    try:
        x = torch.randn(m, k, generator=gen).to(device=device, dtype=torch.bfloat16)
        w = torch.randn(n, k, generator=gen).to(device=device, dtype=torch.bfloat16)
        ok, why = backend.supports(x, w, row)
        if not ok:
            return ProbeResult(False, float("nan"), shape, f"probe call rejected: {why}")
        out = backend.run(x, w, row)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as e:  # any failure means: do not trust this backend
        return ProbeResult(False, float("nan"), shape, f"raised {type(e).__name__}: {e}")
    if tuple(out.shape) != (m, n) or out.dtype != torch.float32:
        return ProbeResult(False, float("nan"), shape, f"returned {tuple(out.shape)} {out.dtype}, expected ({m}, {n}) float32")
    try:
        err = torch_ref.rel_error(out, torch_ref.mm_fp32(x, w))
    except Exception as e:
        return ProbeResult(False, float("nan"), shape, f"reference failed: {type(e).__name__}: {e}")
    if not err <= REL_TOL:  # also catches nan
        return ProbeResult(False, err, shape, "above fp32 tolerance (bf16 rounding gives ~2e-3)")
    return ProbeResult(True, err, shape, "fp32-exact")
