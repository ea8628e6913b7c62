"""Fast backends, by the CSV ``libtype`` they serve, in the order tried (the first that parses a name serves it).

Constructing a backend imports nothing heavy: kernel libraries are imported inside their methods.
"""

from __future__ import annotations

from typing import Callable

from sglang_fp32gemm.backends.base import Backend


def all_backends() -> list[Backend]:
    """A fresh instance of every backend, in routing order."""
    from sglang_fp32gemm.backends.aiter_tgemm import AiterBackend
    from sglang_fp32gemm.backends.cutedsl_dot import CuteDSLDotBackend
    from sglang_fp32gemm.backends.cutedsl_mma import CuteDSLMmaBackend
    from sglang_fp32gemm.backends.cutedsl_warp import CuteDSLWarpBackend
    from sglang_fp32gemm.backends.flydsl_gfx950 import FlyDSLBackend
    from sglang_fp32gemm.backends.triton import TritonEpochBackend
    from sglang_fp32gemm.backends.triton_det import TritonSplitKBackend

    # On gfx950 aiter's own fixed kernel is preferred when the installed
    # aiter has it; our FlyDSL kernel (same kernelName grammar) is second.
    return [TritonEpochBackend(), TritonSplitKBackend(), CuteDSLWarpBackend(), CuteDSLDotBackend(), CuteDSLMmaBackend(),
            AiterBackend(), FlyDSLBackend()]


def default_backends() -> dict[str, list[Backend]]:
    out: dict[str, list[Backend]] = {}
    for b in all_backends():
        out.setdefault(b.libtype, []).append(b)
    return out


def by_name(name: str) -> Backend:
    for b in all_backends():
        if b.name == name:
            return b
    raise KeyError(f"no backend named {name!r} (known: {', '.join(b.name for b in all_backends())})")


def parsers(backends: dict[str, list[Backend]], pair: bool = False) -> dict[str, list[Callable[[str], object]]]:
    """libtype -> the parse functions that may accept its kernelNames (start-up validation); ``pair``: only
    the backends with a pair form (``bind_pair``: the pair table's rows), through ``parse_pair`` where a backend
    has one (forms its pair kernel does not take)."""
    return {lib: fns for lib, bs in backends.items()
            if (fns := [getattr(b, "parse_pair", b.parse) if pair else b.parse
                        for b in bs if not pair or hasattr(b, "bind_pair")])}
