"""NVIDIA (and portable) backend ``triton-det``: a deterministic one-launch split-K GEMM, fp32 out.

Why this shape of kernel: at M <= 32 the call is bound by reading W, so the
work is cut along N *and* K to put every SM to streaming. The K-split
partials are reduced inside the same launch: each program stores its fp32
partial tile in a workspace, takes a ticket on a per-tile counter, and the
program that draws the last ticket sums the partials and writes C, then
resets the counter. No output zero-fill (a second graph node costs
0.5-0.8 us) and no 16-bit rounding anywhere.

The reduction sums the partials in split order, so the result does not
depend on which program finished last: the kernel is deterministic in every
mode and uses no floating-point atomics (the only atomics are the integer
tile counters). ``triton`` (the epoch kernel) is the faster non-deterministic sibling.

``triton_base.TritonBackend.bind`` compiles the kernel once per (config,
device, N, K) and returns a closure that launches the compiled kernel through
``triton_launch.BoundKernel`` (Triton's C launcher, no argument binding or
cache lookup per call), with the ordinary ``kernel[grid](...)`` launch as the
fallback when that internal API differs or a call does not match the
compiled specialization (unaligned pointers, x row stride not a multiple
of 16).

The workspace and counters are per (device, stream): two streams running
the same kernel concurrently must not share counters. Kernels of this
backend on one stream run one after the other, so they share that stream's
workspace; it is allocated on the first call on a stream and grown (never
freed: CUDA graphs captured earlier keep using the old one) outside graph
capture. A call during capture that would need a new or larger workspace
raises ``NotReadyInCapture`` and the router falls back.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, ClassVar

import torch

from sglang_fp32gemm.backends.base import Verdict
from sglang_fp32gemm.backends.triton_base import Allocate, Buffers, Plan, StreamBuffers, TileConfig, TritonBackend
from sglang_fp32gemm.backends.triton_base import fits_smem, launch_once, split_plans, with_pdl

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SplitKConfig(TileConfig):
    """One configuration of the ticket kernel; ``name`` is its ``kernelName``."""

    PREFIX: ClassVar[str] = "triton_splitk_fp32"

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        return (n // self.bn, self.split_k, (m + self.bm - 1) // self.bm)

    def workspace_floats(self, m: int, n: int) -> int:
        tiles_m = (m + self.bm - 1) // self.bm
        return 0 if self.split_k == 1 else self.split_k * tiles_m * self.bm * n

    def counters(self, m: int, n: int) -> int:
        return (n // self.bn) * ((m + self.bm - 1) // self.bm)


def _get_kernel():
    """The @triton.jit kernel (backends/triton_kernels.py), imported on first use."""
    from sglang_fp32gemm.backends.triton_kernels import splitk_fp32_kernel

    return splitk_fp32_kernel


def launch(
    x: torch.Tensor,
    w: torch.Tensor,
    cfg: SplitKConfig,
    out: torch.Tensor,
    partials: torch.Tensor,
    counters: torch.Tensor,
) -> torch.Tensor:
    """Run the kernel into ``out`` with explicit buffers and the ordinary launch (tests, tuner)."""
    m = x.shape[0]
    return launch_once(_get_kernel(), cfg, cfg.grid(m, w.shape[0]), x, w, out, partials, counters)


class Workspace(Buffers):
    """One stream's fp32 partial tiles (the kernel's scratch) and per-tile ticket counters."""

    __slots__ = ()

    @property
    def partials(self) -> torch.Tensor:
        return self.scratch


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


class TritonSplitKBackend(TritonBackend):
    """The deterministic ticket kernel; serves ``triton_splitk_fp32_*`` rows of ``libtype`` triton."""

    name = "triton-det"
    CONFIG = SplitKConfig
    SCRATCH_DTYPE = torch.float32
    get_kernel = staticmethod(_get_kernel)

    #: Floor of a new workspace, in floats (4 MiB) and counters: few grow events.
    MIN_WS_FLOATS = 1 << 20
    MIN_COUNTERS = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # device index (None on CPU) -> its workspaces, shared by every bound kernel.
        self._ws: dict[Any, StreamBuffers] = {}

    def deterministic(self, cfg: SplitKConfig) -> bool:
        # Partials summed in split order whoever arrives last: bitwise repeatable.
        return True

    def supports(self, cfg: SplitKConfig, m: int, n: int, k: int) -> Verdict:
        if m < 1:
            return False, f"M={m}"
        return cfg.check_shape(m, n, k)

    def candidates(self, m: int, n: int, k: int) -> list[SplitKConfig]:
        """The tuner's search space for one shape: about 10-30 configs.

        Trimmed to what won or came close on the H200 (configs/sm90.csv):
        4 warps; BM the token bucket (16, 32, else 64); BN 32/64 (16/32 at
        N <= 512 and M <= 32); BK 64/128/256 (128/256 past M=32); per (BN, BK) the three split counts whose
        grid is nearest 2.5 waves within 0.8-5 waves, at least 2 K steps each.
        """
        big = m > 32
        bm = 16 if m <= 16 else 32 if m <= 32 else 64
        m_tiles = (m + bm - 1) // bm
        bns = (32, 64) if big or n > 512 else (16, 32)
        bks = (128, 256) if big else (64, 128, 256)
        stages_by_bk = {64: (4,), 128: (4, 5), 256: (4,)}
        out = [SplitKConfig(bm, bn, bk, sk, 4, st)
               for bn, bk, sk in split_plans(n, k, m_tiles, [(bn, bk) for bn in bns for bk in bks], 0.8, 5.0, 3, 2.5, 2)
               for st in stages_by_bk[bk] if fits_smem(bm, bn, bk, st)]
        return with_pdl(out)

    def plan(self, cfg: SplitKConfig, n: int) -> Callable[[int], Plan]:
        n_tiles, bm, sk = n // cfg.bn, cfg.bm, cfg.split_k

        def plan(m: int) -> Plan:
            gz = (m + bm - 1) // bm
            return n_tiles, sk, gz, (sk * gz * bm * n if sk > 1 else 1), n_tiles * gz

        return plan

    def buffers(self, cfg: SplitKConfig, device: torch.device, n: int) -> StreamBuffers:
        with self._lock:
            pool = self._ws.get(device.index)
            if pool is None:
                pool = self._ws[device.index] = StreamBuffers(device, self._allocate(device), "triton-det workspace")
        return pool

    def _allocate(self, device: torch.device) -> Allocate:
        def allocate(need_floats: int, need_counters: int, old: Buffers | None) -> Buffers:
            # Powers of two above a floor, never below the old size: few grow events.
            floats = _pow2_at_least(max(need_floats, self.MIN_WS_FLOATS, old.scratch_len if old else 0))
            cnts = _pow2_at_least(max(need_counters, self.MIN_COUNTERS, old.counters_len if old else 0))
            return Workspace(torch.empty(floats, dtype=torch.float32, device=device),
                             torch.zeros(cnts, dtype=torch.int32, device=device))

        return allocate
