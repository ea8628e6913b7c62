"""NVIDIA (and portable) backend: a one-launch split-K GEMM with fp32 output.

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
tile counters).

The workspace and counters are per (device, stream): two streams running the
same kernel concurrently must not share counters.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from typing import TYPE_CHECKING

import torch

from sglang_fp32gemm.backends.base import OK, Backend, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from sglang_fp32gemm.table import TunedRow

logger = logging.getLogger(__name__)

_NAME_RE = re.compile(
    r"^triton_splitk_fp32_bm(?P<bm>\d+)_bn(?P<bn>\d+)_bk(?P<bk>\d+)"
    r"_sk(?P<sk>\d+)_w(?P<w>\d+)_s(?P<s>\d+)$"
)


@dataclasses.dataclass(frozen=True)
class SplitKConfig:
    """One kernel configuration; ``name`` is its ``kernelName`` in the table."""

    bm: int
    bn: int
    bk: int
    split_k: int
    num_warps: int
    num_stages: int

    def __post_init__(self) -> None:
        for f in ("bm", "bn", "bk"):
            v = getattr(self, f)
            if v < 16 or v & (v - 1):
                raise ValueError(f"{f}={v}: must be a power of two >= 16")
        if self.split_k < 1 or self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise ValueError(f"bad split_k/num_warps/num_stages in {self}")

    @property
    def name(self) -> str:
        return (
            f"triton_splitk_fp32_bm{self.bm}_bn{self.bn}_bk{self.bk}"
            f"_sk{self.split_k}_w{self.num_warps}_s{self.num_stages}"
        )

    @classmethod
    def parse(cls, name: str) -> "SplitKConfig":
        m = _NAME_RE.match(name)
        if m is None:
            raise ValueError(
                f"kernelName {name!r} is not of the form "
                "triton_splitk_fp32_bm<BM>_bn<BN>_bk<BK>_sk<SPLITK>_w<WARPS>_s<STAGES>"
            )
        g = {k: int(v) for k, v in m.groupdict().items()}
        return cls(g["bm"], g["bn"], g["bk"], g["sk"], g["w"], g["s"])

    def check_shape(self, m: int, n: int, k: int) -> Verdict:
        if n % self.bn:
            return False, f"N={n} is not a multiple of BN={self.bn}"
        if k % (self.bk * self.split_k):
            return False, f"K={k} is not a multiple of BK*split_k={self.bk * self.split_k}"
        return OK

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


class _Workspace:
    __slots__ = ("partials", "counters")

    def __init__(self, partials: torch.Tensor, counters: torch.Tensor):
        self.partials = partials
        self.counters = counters


def launch(
    x: torch.Tensor,
    w: torch.Tensor,
    cfg: SplitKConfig,
    out: torch.Tensor,
    partials: torch.Tensor,
    counters: torch.Tensor,
) -> torch.Tensor:
    """Run the kernel into ``out`` with explicit buffers (tests, tuner)."""
    m, k = x.shape
    n = w.shape[0]
    _get_kernel()[cfg.grid(m, n)](
        x, w, out, partials, counters,
        m, n, k,
        x.stride(0), w.stride(0), out.stride(0),
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk,
        SPLIT_K=cfg.split_k, K_ITERS=k // (cfg.bk * cfg.split_k),
        UPCAST=not x.is_cuda,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """What the kernel computes, in float64: the check every test runs against."""
    return x.double() @ w.double().t()


class TritonSplitKBackend(Backend):
    name = "triton"
    libtype = "triton"

    # Deterministic in every mode (see the module docstring), so SGLang's
    # --enable-deterministic-inference needs nothing different here.
    deterministic = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ws: dict[tuple[int, int], _Workspace] = {}
        self._cfgs: dict[str, SplitKConfig] = {}
        self._max_floats: dict[int, int] = {}
        self._max_counters: dict[int, int] = {}

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

    def config(self, row: "TunedRow") -> SplitKConfig:
        cfg = self._cfgs.get(row.kernelName)
        if cfg is None:
            cfg = SplitKConfig.parse(row.kernelName)
            self._cfgs[row.kernelName] = cfg
        return cfg

    def supports(self, x: torch.Tensor, w: torch.Tensor, row: "TunedRow") -> Verdict:
        if x.dim() != 2 or w.dim() != 2:
            return False, "not 2-D"
        if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
            return False, f"dtypes {x.dtype}, {w.dtype} (needs bfloat16, bfloat16)"
        if not (x.is_cuda and w.is_cuda) or x.device != w.device:
            return False, "tensors not on one CUDA device"
        if x.stride(1) != 1 or w.stride(1) != 1 or not w.is_contiguous():
            return False, "needs row-major x and contiguous w"
        if row.outdtype != "torch.float32":
            return False, f"row outdtype {row.outdtype}"
        try:
            cfg = self.config(row)
        except ValueError as e:
            return False, str(e)
        return cfg.check_shape(x.shape[0], w.shape[0], x.shape[1])

    def prepare(self, device: torch.device, rows: "list[TunedRow]") -> None:
        """Size the workspace for every row of this device: no growth later."""
        idx = device.index if device.index is not None else torch.cuda.current_device()
        floats, cnts = 1, 1
        for r in rows:
            try:
                cfg = self.config(r)
            except ValueError:
                continue
            floats = max(floats, cfg.workspace_floats(r.M, r.N))
            cnts = max(cnts, cfg.counters(r.M, r.N))
        with self._lock:
            self._max_floats[idx] = max(self._max_floats.get(idx, 1), floats)
            self._max_counters[idx] = max(self._max_counters.get(idx, 1), cnts)

    def _workspace(self, device: torch.device, need_floats: int, need_counters: int) -> _Workspace:
        idx = device.index
        stream = torch.cuda.current_stream(device).cuda_stream
        key = (idx, stream)
        ws = self._ws.get(key)
        if ws is not None and ws.partials.numel() >= need_floats and ws.counters.numel() >= need_counters:
            return ws
        if torch.cuda.is_current_stream_capturing():
            # Allocating (and zeroing counters) inside a capture would tie the
            # buffers to the graph's pool; the router falls back instead.
            raise RuntimeError(
                "triton workspace for this stream was not allocated before CUDA-graph "
                "capture; run the routed call once eagerly on this stream first"
            )
        with self._lock:
            ws = self._ws.get(key)
            floats = max(need_floats, self._max_floats.get(idx, 1))
            cnts = max(need_counters, self._max_counters.get(idx, 1))
            if ws is None or ws.partials.numel() < floats or ws.counters.numel() < cnts:
                ws = _Workspace(
                    torch.empty(floats, dtype=torch.float32, device=device),
                    torch.zeros(cnts, dtype=torch.int32, device=device),
                )
                self._ws[key] = ws
            return ws

    def run(self, x: torch.Tensor, w: torch.Tensor, row: "TunedRow") -> torch.Tensor:
        cfg = self.config(row)
        m, n = x.shape[0], w.shape[0]
        out = torch.empty((m, n), dtype=torch.float32, device=x.device)
        if m == 0:
            return out
        ws = self._workspace(x.device, cfg.workspace_floats(m, n), cfg.counters(m, n))
        return launch(x, w, cfg, out, ws.partials, ws.counters)
