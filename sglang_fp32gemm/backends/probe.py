"""The precision probe every bound kernel must pass before its first call.

Once per (kernel, device, N, K) and process, outside graph capture, the
bound kernel runs its row's M through ``exactness.check``: two calls on
fresh random bf16 inputs, the output memory poisoned with NaN before each,
compared with the float64 product of the same inputs. A relative error above
``REL_TOL`` (1e-5), an element outside the upstream atol/rtol, a non-finite
or unwritten element, a wrong shape or dtype, or an exception disables that
kernel. bf16 rounding of C gives ~2e-3, so it cannot pass.
"""

from __future__ import annotations

from typing import Callable

import torch

from sglang_fp32gemm import exactness

REL_TOL = exactness.REL_TOL
#: Calls per probe, each on fresh inputs (``exactness.check``'s default).
TRIALS = 2

#: The verdict (``ok``, ``rel_err``, ``shape``, ``detail``, ``describe()``).
ProbeResult = exactness.Check


def run_probe(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], device: torch.device,
              m: int, n: int, k: int) -> ProbeResult:
    """Judge the bound ``fn`` at M x N x K on ``device`` with ``exactness.check`` (``TRIALS`` calls)."""
    return exactness.check(fn, device, m, n, k, trials=TRIALS)
