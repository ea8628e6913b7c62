"""NVIDIA (and portable) backend ``triton-det``: a deterministic one-launch split-K GEMM, fp32 out.

Each program stores its fp32 partial tile in a workspace and takes a ticket
on a per-tile counter; the last one sums the partials in split order and
writes C, so the result is bitwise repeatable and no floating-point atomic
is used (docs/backends/triton.md). This module holds the config, the
workspace (per device and stream, shared by the backend's kernels, grown
outside capture only) and the search space; binding and launching are
``triton_base``'s.
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


def launch(x: torch.Tensor, w: torch.Tensor, cfg: SplitKConfig, out: torch.Tensor, partials: torch.Tensor,
           counters: torch.Tensor) -> torch.Tensor:
    """Run the kernel into ``out`` with explicit buffers and the ordinary launch (tests, tuner)."""
    m = x.shape[0]
    return launch_once(TritonSplitKBackend.get_kernel(), cfg, cfg.grid(m, w.shape[0]), x, w, out, partials, counters)


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


class TritonSplitKBackend(TritonBackend):
    """The deterministic ticket kernel; serves ``triton_splitk_fp32_*`` rows of ``libtype`` triton."""

    name = "triton-det"
    CONFIG = SplitKConfig
    SCRATCH_DTYPE = torch.float32
    KERNEL = "splitk_fp32_kernel"

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
        """The tuner's search space for one shape, about 10-30 configs (docs/backends/triton.md, Tuning).

        Trimmed to what won or came close on the H200.
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
            return Buffers(torch.empty(floats, dtype=torch.float32, device=device),
                           torch.zeros(cnts, dtype=torch.int32, device=device))

        return allocate
