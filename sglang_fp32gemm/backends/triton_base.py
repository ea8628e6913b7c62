"""What the two Triton backends (``triton`` and ``triton-det``) share.

Each kernel module keeps its config, buffer layout and search space; this
module has the kernelName grammar (``TileConfig``), the search-space helpers,
``TritonBackend`` (availability, parsing, source tag, ``bind`` with the fast
C-launcher launch and the ordinary one) and ``StreamBuffers`` (one buffer
pair per CUDA stream: two streams must not share a kernel's counters).
Both kernels take ``x, w, out, scratch, counters, M, N, K, stride_xm,
stride_wn, stride_om`` then ``TileConfig.constexprs``.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import math
import re
import threading
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch

from sglang_fp32gemm.backends.base import (OK, Backend, KernelFn, NotReadyInCapture, Verdict, bind_device,
                                           file_source_tag, sm90_or_later)
from sglang_fp32gemm.backends.triton_launch import BoundKernel, current_device_getter, raw_stream_getter

logger = logging.getLogger(__name__)

#: What a kernel needs for one call of M rows: the grid (3-D) and the
#: minimum sizes, in elements, of its scratch and counter buffers.
Plan = tuple[int, int, int, int, int]


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """A Triton split-K kernel's configuration; ``name`` is its kernelName, ``<PREFIX>_bm.._s<STAGES>[_pdl]``.

    ``pdl``: launched as a programmatic dependent launch (triton_kernels.py).
    """

    PREFIX: ClassVar[str] = ""

    bm: int
    bn: int
    bk: int
    split_k: int
    num_warps: int
    num_stages: int
    pdl: bool = False

    def __post_init__(self) -> None:
        for f in ("bm", "bn", "bk"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 16 or v & (v - 1):
                raise ValueError(f"{f}={v}: must be a power of two >= 16")
        if self.bm > 256 or self.bn > 256 or self.bk > 1024:
            raise ValueError(f"tile too large in {self}")
        if not isinstance(self.pdl, bool):
            raise ValueError(f"pdl={self.pdl!r}: must be a bool")
        if self.split_k < 1 or self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise ValueError(f"bad split_k/num_warps/num_stages in {self}")

    @property
    def name(self) -> str:
        return (f"{self.PREFIX}_bm{self.bm}_bn{self.bn}_bk{self.bk}"
                f"_sk{self.split_k}_w{self.num_warps}_s{self.num_stages}" + ("_pdl" if self.pdl else ""))

    @classmethod
    def parse(cls, name: str) -> "TileConfig":
        m = re.match(rf"^{cls.PREFIX}_bm(\d+)_bn(\d+)_bk(\d+)_sk(\d+)_w(\d+)_s(\d+)(_pdl)?$", name)
        if m is None:
            raise ValueError(f"kernelName {name!r} is not of the form "
                             f"{cls.PREFIX}_bm<BM>_bn<BN>_bk<BK>_sk<SPLITK>_w<WARPS>_s<STAGES>[_pdl]")
        return cls(*(int(g) for g in m.groups()[:6]), pdl=m.group(7) is not None)

    def check_shape(self, m: int, n: int, k: int) -> Verdict:
        if n % self.bn:
            return False, f"N={n} is not a multiple of BN={self.bn}"
        if k % (self.bk * self.split_k):
            return False, f"K={k} is not a multiple of BK*split_k={self.bk * self.split_k}"
        return OK

    def constexprs(self, k: int, upcast: bool) -> dict[str, Any]:
        """The kernels' ``tl.constexpr`` arguments for this config and K.

        ``K_ITERS`` is a constant so that Triton knows every split starts at a multiple of BK;
        ``UPCAST``: the CPU interpreter's exact-fp32 products (it mis-multiplies bf16 dots), no PDL.
        """
        return dict(BM=self.bm, BN=self.bn, BK=self.bk, SPLIT_K=self.split_k,
                    K_ITERS=k // (self.bk * self.split_k), UPCAST=upcast, PDL=self.pdl)

    def options(self, on_cuda: bool = True) -> dict[str, Any]:
        """Launch options: warps, stages, on a GPU FMA contraction named (``enable_fp_fusion``), and
        ``launch_pdl`` for a PDL config on a GPU.

        FMA contraction is what Triton 3.2-3.9 do by default and what every table row was checked and timed
        with; Triton 3.9 warns that 3.10 turns the default off, so the kernels ask for it by name.
        """
        opts: dict[str, Any] = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if on_cuda:
            opts["enable_fp_fusion"] = True
            if self.pdl:
                opts["launch_pdl"] = True
        return opts


def kernel_source_tag() -> str:
    """Hash of the kernels' source (triton_kernels.py) and the installed Triton version (import-free)."""
    return file_source_tag(Path(__file__).parent / "triton_kernels.py", "triton", "triton")


def launch_once(jit_fn: Any, cfg: TileConfig, grid: tuple[int, ...], x: torch.Tensor, w: torch.Tensor,
                out: torch.Tensor, scratch: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """One ordinary ``kernel[grid](...)`` launch into ``out`` with explicit buffers (tests, tuner)."""
    m, k = x.shape
    n = w.shape[0]
    jit_fn[grid](x, w, out, scratch, counters, m, n, k, x.stride(0), w.stride(0), out.stride(0),
                 **cfg.constexprs(k, upcast=not x.is_cuda), **cfg.options(x.is_cuda))
    return out


def sm_count() -> int:
    """SMs of the current CUDA device; 132 (an H100/H200) without one."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132


def split_candidates(iters: int, tiles: int, sms: int, lo: float, hi: float, keep: int,
                     target: float, min_iters: int) -> list[int]:
    """The ``keep`` split counts of a K loop of ``iters`` steps over ``tiles`` tiles whose program count is
    nearest ``target * sms`` within ``lo * sms``..``hi * sms``, each split ``min_iters`` steps or more, ascending.
    Counts need not be powers of two (K=7168 = 7 * 1024)."""
    ok = [s for s in range(1, iters + 1)
          if iters % s == 0 and iters // s >= min_iters and lo * sms <= tiles * s <= hi * sms]
    ok.sort(key=lambda s: abs(math.log(tiles * s / (target * sms))))
    return sorted(ok[:keep])


def split_plans(n: int, k: int, m_tiles: int, tiles: list[tuple[int, int]], lo: float, hi: float, keep: int,
                target: float, min_iters: int) -> list[tuple[int, int, int]]:
    """(BN, BK, split_k) for each (BN, BK) of ``tiles`` that divides N and K, with ``split_candidates``' splits."""
    sms = sm_count()
    return [(bn, bk, sk) for bn, bk in tiles if not (n % bn or k % bk)
            for sk in split_candidates(k // bk, (n // bn) * m_tiles, sms, lo, hi, keep, target, min_iters)]


#: Shared memory a config may plan for (of the H200's 227 KB a block).
SMEM_BUDGET = 200 * 1024


def fits_smem(bm: int, bn: int, bk: int, stages: int) -> bool:
    """Whether ``stages`` bf16 [BM, BK] + [BN, BK] tiles fit ``SMEM_BUDGET``."""
    return (bm + bn) * bk * 2 * stages <= SMEM_BUDGET


def with_pdl(cfgs: list[TileConfig]) -> list[TileConfig]:
    """``cfgs`` and, on sm90+, their PDL forms: PDL wins alone but not always in a decode chain
    (docs/backends/triton.md, PDL), so the tuner keeps the choice. A PDL form holds its first W tile
    outside the pipeline: none where stages plus that tile pass ``SMEM_BUDGET``."""
    if not sm90_or_later():
        return cfgs
    return cfgs + [dataclasses.replace(c, pdl=True) for c in cfgs
                   if not c.pdl and fits_smem(c.bm, c.bn, c.bk, c.num_stages + 1)]


class Buffers:
    """One stream's scratch (flags or partials) and int32 counters; pointers and sizes read once, not per call."""

    __slots__ = ("scratch", "counters", "scratch_ptr", "counters_ptr", "scratch_len", "counters_len")

    def __init__(self, scratch: torch.Tensor, counters: torch.Tensor):
        self.scratch = scratch
        self.counters = counters
        self.scratch_ptr = scratch.data_ptr()
        self.counters_ptr = counters.data_ptr()
        self.scratch_len = scratch.numel()
        self.counters_len = counters.numel()


#: ``(scratch elements, counter elements, the buffers being replaced or None) -> new Buffers``.
Allocate = Callable[[int, int, Optional[Buffers]], Buffers]


class StreamBuffers:
    """A kernel's ``Buffers`` on one device, one pair per raw CUDA stream (key 0 on CPU).

    A pair is allocated outside graph capture only; a replaced one is kept in
    ``retired``: graphs captured with it may still replay.
    """

    def __init__(self, device: torch.device, allocate: Allocate, what: str):
        self.device = device
        self.by_stream: dict[int, Buffers] = {}
        self.retired: list[Buffers] = []
        self._allocate = allocate
        self._what = what
        self._lock = threading.Lock()

    def get(self, stream: int, scratch: int, counters: int) -> Buffers:
        b = self.by_stream.get(stream)
        if b is not None and b.scratch_len >= scratch and b.counters_len >= counters:
            return b
        return self.replace(stream, scratch, counters)

    def replace(self, stream: int, scratch: int, counters: int) -> Buffers:
        """A new pair for ``stream`` (outside capture), unless another thread made one large enough."""
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # Allocating (and zeroing counters) inside a capture would tie the
            # buffers to the graph's pool; the router falls back instead.
            raise NotReadyInCapture(
                f"{self._what} buffers for this stream are missing or too small during CUDA-graph "
                "capture; run the routed call once eagerly on this stream (at this M) first"
            )
        with self._lock:
            old = self.by_stream.get(stream)
            if old is not None and old.scratch_len >= scratch and old.counters_len >= counters:
                return old
            new = self._allocate(scratch, counters, old)
            if old is not None:
                self.retired.append(old)
            self.by_stream[stream] = new
            return new


class TritonBackend(Backend):
    """The part of a Triton split-K backend that does not depend on its kernel.

    A subclass sets ``name``, ``CONFIG`` and ``KERNEL``, and implements
    ``plan``, ``buffers``, ``deterministic`` and ``candidates``.
    """

    libtype = "triton"
    CONFIG: ClassVar[type[TileConfig]] = TileConfig
    #: The kernel's scratch buffer dtype, for the compiled specialization.
    SCRATCH_DTYPE: ClassVar[torch.dtype] = torch.int32

    #: The name of its ``@triton.jit`` kernel in triton_kernels.py.
    KERNEL: ClassVar[str] = ""

    @classmethod
    def get_kernel(cls) -> Any:
        """The kernel's ``@triton.jit`` function, imported on first use (triton is imported lazily)."""
        from sglang_fp32gemm.backends import triton_kernels

        return getattr(triton_kernels, cls.KERNEL)

    # -- the interface ---------------------------------------------------------------------------
    def available(self) -> Verdict:
        if not torch.cuda.is_available():
            return False, "no CUDA device"
        if getattr(torch.version, "hip", None):
            return False, "ROCm build of torch (gfx rows use the flydsl backends)"
        try:
            import triton  # noqa: F401
        except Exception as e:  # ImportError, or a broken install
            return False, f"triton does not import ({type(e).__name__}: {e})"
        return OK

    def parse(self, kernel_name: str) -> TileConfig:
        return self.CONFIG.parse(kernel_name)

    def supports(self, cfg: TileConfig, m: int, n: int, k: int) -> Verdict:
        return cfg.check_shape(m, n, k)

    def source_tag(self, cfg: TileConfig) -> str:
        return kernel_source_tag()

    # -- what each kernel says -------------------------------------------------------------------
    @abc.abstractmethod
    def plan(self, cfg: TileConfig, n: int) -> Callable[[int], Plan]:
        """``m -> (gx, gy, gz, scratch elements, counter elements)`` for one bound (cfg, N)."""

    @abc.abstractmethod
    def buffers(self, cfg: TileConfig, device: torch.device, n: int) -> StreamBuffers:
        """The per-stream buffers a kernel bound for (cfg, device, N) launches with."""

    def ctas(self, cfg: TileConfig, m: int, n: int, k: int) -> Optional[int]:
        gx, gy, gz = self.plan(cfg, n)(m)[:3]
        return gx * gy * gz

    def specimen(self, n: int, k: int) -> tuple:
        """The kernel's run-time arguments as the compiled specialization sees them: pointer dtypes, then
        integers (x, w, out, scratch, counters, M, N, K, stride_xm, stride_wn, stride_om)."""
        return (torch.bfloat16, torch.bfloat16, torch.float32, self.SCRATCH_DTYPE, torch.int32, 1, n, k, k, k, n)

    # -- bind --------------------------------------------------------------------------------------
    def launching(self, jit_fn: Any, specimen: Sequence[Any], cfg: TileConfig, device: torch.device, n: int,
                  k: int) -> tuple:
        """What a bound fn of ``jit_fn`` (its run-time arguments as ``specimen``) launches with for ``cfg`` on
        ``device`` (from ``bind_device``), over N rows of W: (BoundKernel, plan, per-stream buffers,
        ``get_stream(index)``, ``get_device()``, ``on_device()``)."""
        on_cuda = device.type == "cuda"
        idx = device.index
        kern = BoundKernel(jit_fn, device, specimen, cfg.constexprs(k, upcast=not on_cuda), cfg.options(on_cuda),
                           try_fast=on_cuda)
        get_stream = raw_stream_getter() if on_cuda else (lambda i: 0)
        get_device = current_device_getter() if on_cuda else (lambda: idx)
        on_device = (lambda: torch.cuda.device(device)) if on_cuda else contextlib.nullcontext
        return kern, self.plan(cfg, n), self.buffers(cfg, device, n), get_stream, get_device, on_device

    def bind(self, cfg: TileConfig, device: torch.device, n: int, k: int) -> KernelFn:
        """Compile once for (cfg, device, N, K) and return the hot-path ``fn(x, w)``."""
        device = bind_device(cfg, device, k, n)
        idx = device.index
        kern, plan, pool, get_stream, get_device, on_device = self.launching(
            self.get_kernel(), self.specimen(n, k), cfg, device, n, k)
        by_stream, replace = pool.by_stream, pool.replace
        fast, launch, slow = kern.fast, kern.launch, kern.slow
        f32 = torch.float32

        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            m = x.shape[0]
            gx, gy, gz, need_s, need_c = plan(m)
            # Sizes as arguments, not a tuple, and stride() whole: torch parses them faster (0.5 us a call
            # less on this project's CPU; an eager call's host time is what it costs).
            out = torch.empty(m, n, dtype=f32, device=device)
            if fast and get_device() == idx:
                sxm = x.stride()[0] if m > 1 else k
                xp = x.data_ptr()
                wp = w.data_ptr()
                # Inside the compiled specialization: 16-byte aligned pointers,
                # x row stride divisible by 16 (out and the buffers always are).
                if not ((xp | wp | sxm) & 15):
                    stream = get_stream(idx)
                    b = by_stream.get(stream)
                    if b is None or b.scratch_len < need_s or b.counters_len < need_c:
                        b = replace(stream, need_s, need_c)
                    launch(gx, gy, gz, stream, xp, wp, out.data_ptr(), b.scratch_ptr, b.counters_ptr,
                           m, n, k, sxm, k, n)
                    return out
            with on_device():
                b = pool.get(get_stream(idx), need_s, need_c)
                slow((gx, gy, gz), x, w, out, b.scratch, b.counters,
                     m, n, k, x.stride(0), w.stride(0), out.stride(0))
            return out

        def prepare(m: int) -> None:
            # Outside capture: this stream's buffers, sized for M (base.py says who calls it).
            _, _, _, need_s, need_c = plan(m)
            pool.get(get_stream(idx), need_s, need_c)

        fn.prepare = prepare  # type: ignore[attr-defined]
        fn.launcher = kern  # type: ignore[attr-defined]  (tests read .fast/.reason)
        fn.buffers = pool  # type: ignore[attr-defined]  (tests read the counters and epochs)
        return fn
