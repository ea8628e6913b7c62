"""NVIDIA backend ``triton``: a one-launch split-K GEMM, fp32 out, reduced with fp32 atomics.

The kernel (swap-AB tiles, split 0 zeroes and publishes an epoch flag, the
other splits wait for it and add with fp32 atomics) and why it cannot
deadlock: docs/backends/triton.md. NOT deterministic beyond split-K 1;
SGLang's deterministic mode uses ``triton-det``. This module holds the
config, the flag/counter buffers (per bound kernel and stream, sized for
``MAX_M``) and the search space; binding and launching are ``triton_base``'s.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, ClassVar

import torch

from sglang_fp32gemm.backends.base import MAX_M, Verdict, bind_device
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

#: ``fn(x, w, w2) -> (x @ w^T, x @ w2^T)`` in fp32, one launch (``bind_pair``).
PairFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]


@dataclasses.dataclass(frozen=True)
class EpochConfig(TileConfig):
    """One configuration of the epoch kernel: ``bm`` tokens (the MMA's N side) x ``bn`` W rows per tile."""

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


def new_sync_buffers(cfg: EpochConfig, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeroed (flags, counters) for one bound kernel on one stream."""
    slots = cfg.flags(n)
    return (torch.zeros(slots, dtype=torch.int32, device=device),
            torch.zeros(slots * cfg.split_k, dtype=torch.int32, device=device))


def launch(x: torch.Tensor, w: torch.Tensor, cfg: EpochConfig, out: torch.Tensor, flags: torch.Tensor,
           counters: torch.Tensor) -> torch.Tensor:
    """Run the kernel into ``out`` with buffers from ``new_sync_buffers``, reused unchanged by every later launch
    of this config and N, and the ordinary launch (tests, tuner)."""
    m, k = x.shape
    n = w.shape[0]
    ok, why = cfg.check_shape(m, n, k)
    if not ok:
        raise ValueError(why)
    if flags.numel() < cfg.flags(n) or counters.numel() < cfg.flags(n) * cfg.split_k:
        raise ValueError("flag/counter buffers too small: use new_sync_buffers(cfg, n, device)")
    return launch_once(TritonEpochBackend.get_kernel(), cfg, cfg.grid(m, n), x, w, out, flags, counters)


class TritonEpochBackend(TritonBackend):
    """The one-launch epoch kernel; serves ``triton_epoch_fp32_*`` rows of ``libtype`` triton."""

    name = "triton"
    CONFIG = EpochConfig
    KERNEL = "epoch_splitk_fp32_kernel"

    def __init__(self) -> None:
        # Every bound kernel's buffers: graphs captured with them may replay
        # after the bound fn itself is gone.
        self._pools: list[StreamBuffers] = []

    def deterministic(self, cfg: EpochConfig) -> bool:
        # fp32 atomic adds in scheduling order; a single split stores plainly.
        return cfg.split_k == 1

    def candidates(self, m: int, n: int, k: int) -> list[EpochConfig]:
        """The tuner's search space for one shape, at most 27 plain configs (docs/backends/triton.md, Tuning).

        Split-K 14-16 at N=1024 and 4 at N=2560 won on the H200.
        """
        if not 1 <= m <= MAX_M:
            return []
        bm = 16 if m <= 16 else 32 if m <= 32 else 64
        m_tiles = (m + bm - 1) // bm
        # (BN, BKs, splits kept, stages, (grid within lo..hi waves, nearest target))
        wide = (0.8, 4.0, 1.7)
        plan = [(64, (64, 128, 256), 3, (4, 6), wide), (32, (128, 256), 2, (4,), wide),
                (128, (128, 256), 2, (4,), wide)]
        if m <= 64:
            # Under one wave, fewer stages: less of W in flight and SMs left to the other streams of SGLang's
            # overlapped region (up to M=64 on Hopper). At N=2048 such grids beat the full-wave rows there (runs
            # 30a and 31: M 4-64), though alone they are slower (run 31): the rank of each table decides.
            plan.append((64, (128, 256), 2, (3,), (0.3, 0.8, 0.5)))
        out: list[EpochConfig] = []
        for bn0, bks, keep, stage_set, (lo, hi, target) in plan:
            for bn, bk, sk in split_plans(n, k, m_tiles, [(bn0, bk) for bk in bks], lo, hi, keep, target, 1):
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

    def bind_pair(self, cfg: EpochConfig, device: torch.device, n: int, n2: int, k: int) -> PairFn:
        """``fn(x, w, w2) -> (x @ w^T, x @ w2^T)``, fp32, one launch of ``epoch_pair_fp32_kernel`` (each tile as
        this config's single kernel computes it), through Triton's C launcher where ``bind``'s fast path would
        take the call (16-byte aligned pointers, x's row stride a multiple of 16), else the ordinary launch."""
        device = bind_device(cfg, device, k, n, n2)
        idx = device.index
        f32, bf16, i32 = torch.float32, torch.bfloat16, torch.int32
        specimen = (bf16, bf16, f32, bf16, f32, i32, i32, 1, n, n2, k, k, k, n, n2)
        kern, plan, pool, get_stream, get_device, on_device = self.launching(
            self.get_pair_kernel(), specimen, cfg, device, n + n2, k)
        fast, launch = kern.fast, kern.launch

        def fn(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            m = x.shape[0]
            if w.stride(0) != w2.stride(0):
                raise ValueError(f"w and w2 row strides differ ({w.stride(0)}, {w2.stride(0)}): the kernel takes one")
            gx, gy, gz, need_s, need_c = plan(m)
            out, out2 = torch.empty(m, n, dtype=f32, device=device), torch.empty(m, n2, dtype=f32, device=device)
            if fast and get_device() == idx:
                sxm = x.stride()[0] if m > 1 else k
                xp, wp, w2p = x.data_ptr(), w.data_ptr(), w2.data_ptr()
                if not ((xp | wp | w2p | sxm) & 15):
                    stream = get_stream(idx)
                    b = pool.get(stream, need_s, need_c)
                    launch(gx, gy, gz, stream, xp, wp, out.data_ptr(), w2p, out2.data_ptr(), b.scratch_ptr,
                           b.counters_ptr, m, n, n2, k, sxm, k, n, n2)
                    return out, out2
            with on_device():
                b = pool.get(get_stream(idx), need_s, need_c)
                kern.slow((gx, gy, gz), x, w, out, w2, out2, b.scratch, b.counters, m, n, n2, k,
                          x.stride(0), w.stride(0), out.stride(0), out2.stride(0))
            return out, out2

        fn.buffers = pool  # type: ignore[attr-defined]
        fn.launcher = kern  # type: ignore[attr-defined]
        return fn

    @staticmethod
    def get_pair_kernel():
        from sglang_fp32gemm.backends import triton_kernels

        return triton_kernels.epoch_pair_fp32_kernel

    def buffers(self, cfg: EpochConfig, device: torch.device, n: int) -> StreamBuffers:
        # Per bound kernel: the counters carry this tiling's epochs from call to call.
        def allocate(slots: int, n_cnt: int, old: Buffers | None) -> Buffers:
            return Buffers(*new_sync_buffers(cfg, n, device))

        pool = StreamBuffers(device, allocate, "triton epoch flag")
        self._pools.append(pool)
        return pool

