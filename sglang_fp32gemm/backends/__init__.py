"""Fast backends, by the CSV ``libtype`` they serve, in the order tried.

Backends are constructed on first use; constructing one imports nothing
heavy (triton, flydsl and aiter are imported inside their methods).
"""

from __future__ import annotations

from sglang_fp32gemm.backends.base import Backend


def default_backends() -> dict[str, list[Backend]]:
    from sglang_fp32gemm.backends.aiter_tgemm import AiterBackend
    from sglang_fp32gemm.backends.flydsl_gfx950 import FlyDSLBackend
    from sglang_fp32gemm.backends.triton_splitk import TritonSplitKBackend

    # On gfx950 aiter's own fixed kernel is preferred when the installed
    # aiter has it; our FlyDSL kernel is the second choice.
    return {
        "triton": [TritonSplitKBackend()],
        "flydsl": [AiterBackend(), FlyDSLBackend()],
    }
