"""The precision probe every bound kernel passes before its first call (docs/design.md, "Probe and faults")."""

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
