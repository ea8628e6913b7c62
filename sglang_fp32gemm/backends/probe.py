"""The precision probe every bound kernel must pass before its first call.

Once per (kernel, device, N, K) and process, outside graph capture, the
bound kernel runs its row's M on fresh random inputs; its output is compared
with the float64 product of the same (bf16) inputs. A relative error above
1e-5, a non-finite element, a wrong shape or dtype, or an exception disables
that kernel. bf16 rounding of C gives ~2e-3, so it cannot pass.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import torch

from sglang_fp32gemm.backends import torch_ref

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


def run_probe(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], device: torch.device,
              m: int, n: int, k: int) -> ProbeResult:
    """Run ``fn`` once on fresh random bf16 inputs and judge it against float64."""
    shape = (m, n, k)
    gen = torch.Generator(device="cpu").manual_seed(time.time_ns() & 0x7FFFFFFF)
    try:
        x = torch.randn(m, k, generator=gen).to(device=device, dtype=torch.bfloat16)
        w = torch.randn(n, k, generator=gen).to(device=device, dtype=torch.bfloat16)
        out = fn(x, w)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as e:  # any failure means: do not trust this kernel
        return ProbeResult(False, float("nan"), shape, f"raised {type(e).__name__}: {e}")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (m, n) or out.dtype != torch.float32:
        got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        return ProbeResult(False, float("nan"), shape, f"returned {got}, expected ({m}, {n}) float32")
    # float64 on the device itself: a CPU reference at M=128 N=2560 takes
    # a large part of a second per kernel.
    err = torch_ref.rel_error(out, torch_ref.reference_fp64(x, w))
    if not err <= REL_TOL:  # also catches nan and inf
        return ProbeResult(False, err, shape, "above fp32 tolerance (bf16 rounding gives ~2e-3)")
    return ProbeResult(True, err, shape, "fp32-exact")
