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
tile counters). ``triton_epoch`` is the faster non-deterministic sibling.

``TritonSplitKBackend.bind`` compiles the kernel once per (config, device,
N, K) and returns a closure that launches the compiled kernel through
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
raises ``RuntimeError`` and the router falls back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import threading
from typing import Any, ClassVar

import torch

from sglang_fp32gemm.backends.base import OK, Backend, KernelFn, NotReadyInCapture, Verdict
from sglang_fp32gemm.backends.triton_launch import BoundKernel, TileConfig, current_device_getter, raw_stream_getter

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


_kernel = None


def _get_kernel():
    """Build the @triton.jit kernel on first use: triton is imported lazily."""
    global _kernel
    if _kernel is not None:
        return _kernel
    import triton
    import triton.language as tl

    # M is not specialised: one compile serves every M of a BM bucket.
    @triton.jit(do_not_specialize=["M"])
    def splitk_fp32_kernel(
        x_ptr, w_ptr, out_ptr, ws_ptr, cnt_ptr,
        M, N, K,
        stride_xm, stride_wn, stride_om,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
        SPLIT_K: tl.constexpr, K_ITERS: tl.constexpr,
        UPCAST: tl.constexpr,
    ):
        pid_n = tl.program_id(0)
        pid_k = tl.program_id(1)
        pid_m = tl.program_id(2)
        n_tiles = tl.num_programs(0)
        m_tiles = tl.num_programs(2)

        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        mask_m = offs_m < M
        # K_ITERS is a compile-time constant so k0 is a known multiple of BK:
        # with a run-time K // SPLIT_K Triton cannot prove alignment and
        # falls back to narrow loads (10-40x slower at SPLIT_K=7 on an H200).
        k0 = pid_k * (K_ITERS * BK)
        x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :]
        w_ptrs = w_ptr + offs_n[:, None] * stride_wn + (k0 + offs_k)[None, :]

        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, K_ITERS):
            a = tl.load(x_ptrs, mask=mask_m[:, None], other=0.0)
            b = tl.load(w_ptrs)
            # bf16 x bf16 products are exact in fp32 and the dot accumulates
            # in fp32: nothing is rounded to 16 bits.
            if UPCAST:
                # Triton's CPU interpreter mis-multiplies bf16 dots; exact
                # fp32 ("ieee", not tf32) products give the same result.
                acc = tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), acc,
                             input_precision="ieee", out_dtype=tl.float32)
            else:
                acc = tl.dot(a, tl.trans(b), acc, out_dtype=tl.float32)
            x_ptrs += BK
            w_ptrs += BK

        out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
        if SPLIT_K == 1:
            tl.store(out_ptrs, acc, mask=mask_m[:, None])
        else:
            tile = pid_m * n_tiles + pid_n
            n_all_tiles = n_tiles * m_tiles
            tile_offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
            ws_tile = ws_ptr + tile * (BM * BN) + tile_offs
            split_stride = n_all_tiles * BM * BN
            tl.store(ws_tile + pid_k * split_stride, acc)
            # Every thread's partial is written before the ticket is taken;
            # acq_rel publishes them to the program that draws the last one.
            tl.debug_barrier()
            ticket = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if ticket == SPLIT_K - 1:
                # Unrolled, so all partial loads are in flight at once (one L2
                # round trip), and summed in split order whichever program
                # arrived last: the result is deterministic.
                total = tl.zeros((BM, BN), dtype=tl.float32)
                for s in tl.static_range(SPLIT_K):
                    total += tl.load(ws_tile + s * split_stride, cache_modifier=".cg")
                tl.store(out_ptrs, total, mask=mask_m[:, None])
                # Leave the counter at zero for the next call on this stream.
                tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")

    _kernel = splitk_fp32_kernel
    return _kernel


def launch(
    x: torch.Tensor,
    w: torch.Tensor,
    cfg: SplitKConfig,
    out: torch.Tensor,
    partials: torch.Tensor,
    counters: torch.Tensor,
) -> torch.Tensor:
    """Run the kernel into ``out`` with explicit buffers and the ordinary launch (tests, tuner)."""
    m, k = x.shape
    n = w.shape[0]
    _get_kernel()[cfg.grid(m, n)](
        x, w, out, partials, counters,
        m, n, k,
        x.stride(0), w.stride(0), out.stride(0),
        **_constexprs(cfg, k, upcast=not x.is_cuda),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """What the kernel computes, in float64: the check every test runs against."""
    return x.double() @ w.double().t()


def _constexprs(cfg: SplitKConfig, k: int, upcast: bool) -> dict[str, Any]:
    return dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, SPLIT_K=cfg.split_k,
                K_ITERS=k // (cfg.bk * cfg.split_k), UPCAST=upcast)


def kernel_source_tag() -> str:
    """Hash of the kernel's source and the installed Triton version (import-free)."""
    try:
        from importlib.metadata import version

        tv = version("triton")
    except Exception:  # not installed
        tv = "none"
    src = inspect.getsource(_get_kernel)
    return f"{hashlib.sha256(src.encode()).hexdigest()[:12]}-triton{tv}"


def sm_count() -> int:
    """SMs of the current CUDA device; 132 (an H100/H200) without one."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132


def split_candidates(iters: int, tiles: int, sms: int, lo: float, hi: float, keep: int,
                     target: float, min_iters: int) -> list[int]:
    """Split counts for a K loop of ``iters`` steps over ``tiles`` output tiles.

    Only splits dividing ``iters`` with at least ``min_iters`` steps each and
    ``lo * sms <= tiles * split <= hi * sms`` programs; the ``keep`` whose
    program count is nearest (in ratio) to ``target * sms``, in increasing
    order. Counts need not be powers of two (K=7168 = 7 * 1024).
    """
    import math

    ok = [s for s in range(1, iters + 1)
          if iters % s == 0 and iters // s >= min_iters and lo * sms <= tiles * s <= hi * sms]
    ok.sort(key=lambda s: abs(math.log(tiles * s / (target * sms))))
    return sorted(ok[:keep])


class _Workspace:
    __slots__ = ("partials", "counters", "p_ptr", "c_ptr", "floats", "ncnt")

    def __init__(self, partials: torch.Tensor, counters: torch.Tensor):
        self.partials = partials
        self.counters = counters
        self.p_ptr = partials.data_ptr()
        self.c_ptr = counters.data_ptr()
        self.floats = partials.numel()
        self.ncnt = counters.numel()


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


class TritonSplitKBackend(Backend):
    """The deterministic ticket kernel; serves ``triton_splitk_fp32_*`` rows of ``libtype`` triton."""

    name = "triton-det"
    libtype = "triton"

    #: Floor of a new workspace, in floats (4 MiB) and counters: few grow events.
    MIN_WS_FLOATS = 1 << 20
    MIN_COUNTERS = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # device index (None on CPU) -> raw stream -> workspace; shared by every bound kernel.
        self._ws: dict[Any, dict[int, _Workspace]] = {}
        # Workspaces replaced by larger ones: graphs captured earlier still use them.
        self._retired: list[_Workspace] = []

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

    def parse(self, kernel_name: str) -> SplitKConfig:
        return SplitKConfig.parse(kernel_name)

    def deterministic(self, cfg: SplitKConfig) -> bool:
        # Partials summed in split order whoever arrives last: bitwise repeatable.
        return True

    def supports(self, cfg: SplitKConfig, m: int, n: int, k: int) -> Verdict:
        if m < 1:
            return False, f"M={m}"
        return cfg.check_shape(m, n, k)

    def kernel_name(self, cfg: SplitKConfig) -> str:
        return cfg.name

    def source_tag(self, cfg: SplitKConfig) -> str:
        return kernel_source_tag()

    def candidates(self, m: int, n: int, k: int) -> list[SplitKConfig]:
        """The tuner's search space for one shape: about 10-30 configs.

        Trimmed to what won or came close on the H200 (configs/sm90.csv):
        4 warps; BM the token bucket (16, 32, else 64); BN 32/64 (16/32 at
        N <= 512 and M <= 32); BK 64/128/256 (128/256 past M=32); per (BN, BK) the three split counts whose
        grid is nearest 2.5 waves within 0.8-5 waves, at least 2 K steps each.
        """
        sms = sm_count()
        big = m > 32
        bm = 16 if m <= 16 else 32 if m <= 32 else 64
        m_tiles = (m + bm - 1) // bm
        bns = (32, 64) if big or n > 512 else (16, 32)
        bks = (128, 256) if big else (64, 128, 256)
        stages_by_bk = {64: (4,), 128: (4, 5), 256: (4,)}
        out: list[SplitKConfig] = []
        for bn in bns:
            if n % bn:
                continue
            for bk in bks:
                if k % bk:
                    continue
                tiles = (n // bn) * m_tiles
                for sk in split_candidates(k // bk, tiles, sms, 0.8, 5.0, 3, 2.5, 2):
                    for st in stages_by_bk[bk]:
                        if (bm + bn) * bk * 2 * st > 200 * 1024:
                            continue  # over the 227 KB of shared memory
                        out.append(SplitKConfig(bm, bn, bk, sk, 4, st))
        return out

    def bind(self, cfg: SplitKConfig, device: torch.device, n: int, k: int) -> KernelFn:
        ok, why = cfg.check_shape(1, n, k)
        if not ok:
            raise ValueError(why)
        device = torch.device(device)
        on_cuda = device.type == "cuda"
        if on_cuda and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        idx = device.index
        bm, bn, sk = cfg.bm, cfg.bn, cfg.split_k
        n_tiles = n // bn
        kern = BoundKernel(
            _get_kernel(), device,
            # x, w, out, partials, counters, M, N, K, stride_xm, stride_wn, stride_om
            (torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, torch.int32, 1, n, k, k, k, n),
            _constexprs(cfg, k, upcast=not on_cuda), cfg.num_warps, cfg.num_stages, try_fast=on_cuda,
        )
        with self._lock:
            per_stream = self._ws.setdefault(idx, {})
        workspace = self._workspace
        fast, launch, slow = kern.fast, kern.launch, kern.slow
        get_stream = raw_stream_getter() if on_cuda else (lambda i: 0)
        get_device = current_device_getter() if on_cuda else (lambda: idx)
        f32 = torch.float32

        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            m = x.shape[0]
            out = torch.empty((m, n), dtype=f32, device=device)
            gz = (m + bm - 1) // bm
            need = sk * gz * bm * n if sk > 1 else 1
            ncnt = n_tiles * gz
            if fast and get_device() == idx:
                sxm = x.stride(0) if m > 1 else k
                xp = x.data_ptr()
                wp = w.data_ptr()
                # Inside the compiled specialization: 16-byte aligned pointers,
                # x row stride divisible by 16 (out and the workspace always are).
                if not ((xp | wp | sxm) & 15):
                    stream = get_stream(idx)
                    ws = per_stream.get(stream)
                    if ws is None or ws.floats < need or ws.ncnt < ncnt:
                        ws = workspace(device, per_stream, stream, need, ncnt)
                    launch(n_tiles, sk, gz, stream, xp, wp, out.data_ptr(), ws.p_ptr, ws.c_ptr,
                           m, n, k, sxm, k, n)
                    return out
            if on_cuda:
                with torch.cuda.device(device):
                    stream = get_stream(idx)
                    ws = workspace(device, per_stream, stream, need, ncnt)
                    slow((n_tiles, sk, gz), x, w, out, ws.partials, ws.counters,
                         m, n, k, x.stride(0), w.stride(0), out.stride(0))
            else:
                ws = workspace(device, per_stream, 0, need, ncnt)
                slow((n_tiles, sk, gz), x, w, out, ws.partials, ws.counters,
                     m, n, k, x.stride(0), w.stride(0), out.stride(0))
            return out

        fn.launcher = kern  # type: ignore[attr-defined]  (tests and explain read .fast/.reason)
        return fn

    # -- workspaces ------------------------------------------------------------------------------
    def _workspace(self, device: torch.device, per_stream: dict[int, _Workspace], stream: int,
                   need_floats: int, need_counters: int) -> _Workspace:
        ws = per_stream.get(stream)
        if ws is not None and ws.floats >= need_floats and ws.ncnt >= need_counters:
            return ws
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # Allocating (and zeroing counters) inside a capture would tie the
            # buffers to the graph's pool; the router falls back instead.
            raise NotReadyInCapture(
                "triton-det workspace for this stream is missing or too small during CUDA-graph "
                "capture; run the routed call once eagerly on this stream (at this M) first"
            )
        with self._lock:
            ws = per_stream.get(stream)
            if ws is not None and ws.floats >= need_floats and ws.ncnt >= need_counters:
                return ws
            floats = _pow2_at_least(max(need_floats, self.MIN_WS_FLOATS, ws.floats if ws else 0))
            cnts = _pow2_at_least(max(need_counters, self.MIN_COUNTERS, ws.ncnt if ws else 0))
            new = _Workspace(
                torch.empty(floats, dtype=torch.float32, device=device),
                torch.zeros(cnts, dtype=torch.int32, device=device),
            )
            if ws is not None:
                self._retired.append(ws)
            per_stream[stream] = new
            return new
