"""NVIDIA backend ``triton``: a one-launch split-K GEMM, fp32 out, reduced with fp32 atomics.

The fastest design measured on the H200 for M <= 32 at N 512 and 1024 and
most of N 2560 (docs/benchmarks/README.md):

* Swap-AB: W rows are the MMA's M side (``BN`` rows of W per tile, 64 by
  default), tokens the N side, padded to ``BM`` (16 or 32) and masked past M.
  ``tl.dot(W_tile, x_tile^T)`` gives a [BN, BM] fp32 tile of out^T.
* Split-K: program ``pid`` of the 1-D grid takes split ``pid // tiles`` of
  tile ``pid % tiles``, so every split-0 program has a lower id than every
  other program. Split 0 zeroes its output tile at its start, then publishes
  an epoch flag for the tile with ``atomic_xchg(sem="release")``; the other
  splits run their K loop, then spin with ``atomic_add(flag, 0,
  sem="acquire")`` until the flag has reached their epoch, then every split
  adds its fp32 partial into out with ``tl.atomic_add``. Split-0 programs
  never wait, and are dispatched first, so the launch cannot deadlock even
  when the grid is larger than what is resident at once.
* Epochs: each program bumps its own (tile, split) int32 counter with *one*
  atomic per call (the old value + 1 is its epoch); split 0 publishes its
  epoch, the others wait for theirs. All splits of a tile are bumped once
  per call that covers the tile, so they agree. (A load/store pair instead
  of the single atomic raced between warps and hung a run.) The wait is
  ``flag - epoch >= 0`` in wrapping int32, equal to ``==`` in correct use and
  unable to hang if two launches ever shared the buffers.
* ``split_k == 1``: a plain store, no flags.

No 16-bit rounding: bf16 x bf16 products are exact in fp32 and the dot
accumulates in fp32. NOT deterministic: the order of the fp32 atomic adds
depends on scheduling (``deterministic()`` is False; SGLang's deterministic
mode uses ``triton-det``).

The flag and counter buffers are per (bound kernel, device, stream): the
counters carry state from call to call, so kernels of different tilings must
not share them, and two streams must not either. They are sized for
``MAX_M`` tokens, zeroed once when allocated (outside graph capture; a
first call on a stream during capture raises ``NotReadyInCapture`` and the
router falls back), and never freed while the backend lives. Binding,
launching and the per-stream buffers are ``triton_base``'s.

Under ``TRITON_INTERPRET=1`` the interpreter runs the programs one after the
other in program-id order: split 0 of every tile runs first, so the flag is
already published when a later split checks it, and the kernel runs as on a
GPU minus the concurrency (tests/test_triton_kernels_interpret.py).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, ClassVar

import torch

from sglang_fp32gemm.backends.base import MAX_M, Verdict
from sglang_fp32gemm.backends.triton_base import (
    Buffers,
    Plan,
    StreamBuffers,
    TileConfig,
    TritonBackend,
    fits_smem,
    launch_once,
    split_plans,
    with_pdl,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EpochConfig(TileConfig):
    """One configuration of the epoch kernel; ``name`` is its ``kernelName``.

    ``bm``: tokens per tile (the MMA's N side); ``bn``: W rows per tile (the
    MMA's M side); ``bk``: K step; ``split_k``: K splits.
    """

    PREFIX: ClassVar[str] = "triton_epoch_fp32"

    def check_shape(self, m: int, n: int, k: int) -> Verdict:
        if not 1 <= m <= MAX_M:
            return False, f"M={m} is outside 1..{MAX_M} (the flag buffers are sized for MAX_M)"
        return super().check_shape(m, n, k)

    def tiles(self, m: int, n: int) -> int:
        return (n // self.bn) * ((m + self.bm - 1) // self.bm)

    def grid(self, m: int, n: int) -> tuple[int]:
        return (self.tiles(m, n) * self.split_k,)

    def flags(self, n: int) -> int:
        """Flag slots for every tile of up to ``MAX_M`` tokens; counters: ``split_k`` times that."""
        return self.tiles(MAX_M, n)


def _get_kernel():
    """The @triton.jit kernel (backends/triton_kernels.py), imported on first use."""
    from sglang_fp32gemm.backends.triton_kernels import epoch_splitk_fp32_kernel

    return epoch_splitk_fp32_kernel


class SyncBuffers(Buffers):
    """One stream's epoch flags (the kernel's scratch) and per-(tile, split) epoch counters."""

    __slots__ = ()

    @property
    def flags(self) -> torch.Tensor:
        return self.scratch


def new_sync_buffers(cfg: EpochConfig, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeroed (flags, counters) for one bound kernel on one stream."""
    slots = cfg.flags(n)
    return (torch.zeros(slots, dtype=torch.int32, device=device),
            torch.zeros(slots * cfg.split_k, dtype=torch.int32, device=device))


def launch(
    x: torch.Tensor,
    w: torch.Tensor,
    cfg: EpochConfig,
    out: torch.Tensor,
    flags: torch.Tensor,
    counters: torch.Tensor,
) -> torch.Tensor:
    """Run the kernel into ``out`` with explicit buffers and the ordinary launch (tests, tuner).

    ``flags`` and ``counters`` come from ``new_sync_buffers`` and must be
    reused, unchanged, by every later launch of this config and N with them.
    """
    m, k = x.shape
    n = w.shape[0]
    ok, why = cfg.check_shape(m, n, k)
    if not ok:
        raise ValueError(why)
    if flags.numel() < cfg.flags(n) or counters.numel() < cfg.flags(n) * cfg.split_k:
        raise ValueError("flag/counter buffers too small: use new_sync_buffers(cfg, n, device)")
    return launch_once(_get_kernel(), cfg, cfg.grid(m, n), x, w, out, flags, counters)


class TritonEpochBackend(TritonBackend):
    """The one-launch epoch kernel; serves ``triton_epoch_fp32_*`` rows of ``libtype`` triton."""

    name = "triton"
    CONFIG = EpochConfig
    get_kernel = staticmethod(_get_kernel)

    def __init__(self) -> None:
        # Every bound kernel's buffers: graphs captured with them may replay
        # after the bound fn itself is gone.
        self._pools: list[StreamBuffers] = []

    def deterministic(self, cfg: EpochConfig) -> bool:
        # fp32 atomic adds in scheduling order; a single split stores plainly.
        return cfg.split_k == 1

    def candidates(self, m: int, n: int, k: int) -> list[EpochConfig]:
        """The tuner's search space for one shape: at most about 25 configs.

        4 warps; BM the token bucket (16, 32, else 64). BN 64 (the design
        point) with BK 64/128/256, the three split counts per BK whose grid
        is nearest 1.7 waves within 0.8-4 waves (split-K 14-16 at N=1024 and
        4 at N=2560 won on the H200), 4 and 6 stages (fewer when the K loop
        is shorter); BN 32 and 128 with BK 128/256, two split counts, 4
        stages. All within 200 KB of shared memory.
        """
        if not 1 <= m <= MAX_M:
            return []
        bm = 16 if m <= 16 else 32 if m <= 32 else 64
        m_tiles = (m + bm - 1) // bm
        plan = ((64, (64, 128, 256), 3, (4, 6)), (32, (128, 256), 2, (4,)), (128, (128, 256), 2, (4,)))
        out: list[EpochConfig] = []
        for bn0, bks, keep, stage_set in plan:
            for bn, bk, sk in split_plans(n, k, m_tiles, [(bn0, bk) for bk in bks], 0.8, 4.0, keep, 1.7, 1):
                iters = k // bk // sk
                for st in sorted({min(s, iters + 1) for s in stage_set}):
                    if st < 2 or not fits_smem(bm, bn, bk, st):
                        continue
                    cfg = EpochConfig(bm, bn, bk, sk, 4, st)
                    if cfg not in out:
                        out.append(cfg)
        return with_pdl(out)

    def plan(self, cfg: EpochConfig, n: int) -> Callable[[int], Plan]:
        n_tiles, bm, sk = n // cfg.bn, cfg.bm, cfg.split_k
        # Sized for MAX_M once: the same buffers serve every M.
        slots = cfg.flags(n)
        n_cnt = slots * sk

        def plan(m: int) -> Plan:
            if not 1 <= m <= MAX_M:
                raise ValueError(f"M={m} is outside 1..{MAX_M}")
            return n_tiles * ((m + bm - 1) // bm) * sk, 1, 1, slots, n_cnt

        return plan

    def buffers(self, cfg: EpochConfig, device: torch.device, n: int) -> StreamBuffers:
        # Per bound kernel: the counters carry this tiling's epochs from call to call.
        def allocate(slots: int, n_cnt: int, old: Buffers | None) -> Buffers:
            return SyncBuffers(*new_sync_buffers(cfg, n, device))

        pool = StreamBuffers(device, allocate, "triton epoch flag")
        self._pools.append(pool)
        return pool

