"""NVIDIA backend ``cutedsl-dot``: our CuTe-DSL dot-product kernel for M <= 8 (``cutedsl_dot_kernel.py``).

One CTA per ``rows`` rows of W over the whole K, every W load in flight
before the first multiply, no split-K; what it is and why it is exact: the
kernel module. Compiled and called through TVM-FFI (``cutedsl_tvm.py``).
Names parse without imports. It serves rows of libtype ``cutedsl`` whose
kernelName has this backend's form (the other ``cutedsl`` backends reject
those names, and this one rejects theirs).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

import torch

from sglang_fp32gemm.backends.base import OK, Verdict, bind_device, sm90_or_later
from sglang_fp32gemm.backends.cutedsl_tvm import VEC, TvmFfiBackend, check_w, compile_form, operand_x

#: The kernel takes M up to 8 (exact at every M 1-8 on an H100, run 36a), so a row may name an M=8 form.
MAX_M = 8
#: The M the forms are offered at: aiter's lookup gives each its own row (M 3 and 5-7 take the M=16 row). The dot
#: product wins at the smallest M (issue 15; vLLM's stops at 4). Not at M=8: there the best form took 9.8 us
#: alone at N=1024 K=7168 against Triton's 7.0, and 17.3 against 12.3 at N=2048 (H100, runs 36a-b), so the
#: tuner no longer spends time on them.
CANDIDATE_M = (1, 2, 4)
ROWS = (1, 2, 4)
#: The ``_g`` caps ``candidates`` offers: one and two CTAs an SM of a 132-SM H100/H200.
CAPS = (132, 264)
#: Where a ``_pdl`` form's wait and release sit (``cutedsl_dot_kernel.py``): "" W loads before the wait, release
#: after the multiply-adds; ``_ls`` release after the store; ``_lw`` also the wait before any load (vLLM's dot
#: kernel's placement, the lead of stop 45's SASS reading; docs/backends/cutedsl_dot.md).
PLACEMENTS = ("", "ls", "lw")
_FORM = "cutedsl_dot_m<MAX_M>_t<THREADS>_r<ROWS>[_pdl[_ls|_lw]][_bx][_mb1][_g<CTAS>]"
_NAME_RE = re.compile(r"^cutedsl_dot_m(?P<m>\d+)_t(?P<t>\d+)_r(?P<r>\d+)(?:(?P<pdl>_pdl)(?:_(?P<pl>ls|lw))?)?"
                      r"(?P<bx>_bx)?(?P<mb1>_mb1)?(?:_g(?P<g>[1-9]\d*))?$")
# A thread keeps rows x K / (8 x threads) 16-byte W vectors in registers; above M=4 half as many, the rest
# holding max_m x rows sums and x's rows (ptxas, sm_90a, stop 48: at M=8 the forms with 28 W vectors a thread
# spilled, t64_r2 and t128_r4 at K=7168; those with 16 or fewer did not).
MAX_W_VECTORS = 32
MAX_W_VECTORS_ABOVE_M4 = 16


@dataclasses.dataclass(frozen=True)
class DotConfig:
    """One form of the kernel; ``name`` is its kernelName."""

    max_m: int
    threads: int
    rows: int
    pdl: bool = False
    #: ``_bx``: x's rows loaded with no branch on the call's M (max_m >= 2; docs/backends/cutedsl_dot.md).
    branchless_x: bool = False
    #: ``_mb1``: the launch asks for at least one CTA an SM (``.minnctapersm 1``), which frees ptxas's
    #: register budget to issue all of x's loads at once (docs/backends/cutedsl_dot.md).
    min_blocks: bool = False
    #: ``_g<C>``: C CTAs in all, each taking every C-th block of ``rows`` rows in turn, instead of a CTA a block
    #: (0: no cap). Made for SGLang's multi-stream region, where the plain forms (a wave's whole share of W in
    #: flight at once) hold up the other streams' kernels more (docs/backends/cutedsl_dot.md; run 26, H100);
    #: the same sums, so the same bits.
    ctas_cap: int = 0
    #: ``_ls`` / ``_lw``: where PDL's wait and release sit (``PLACEMENTS``); only with ``pdl``. The same sums in
    #: the same order, so the same bits.
    placement: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.max_m <= MAX_M:
            raise ValueError(f"max_m={self.max_m}: must be in 1..{MAX_M}")
        if self.threads % 32 or not 32 <= self.threads <= 1024:
            raise ValueError(f"threads={self.threads}: must be a multiple of 32 in 32..1024")
        if self.rows not in ROWS:
            raise ValueError(f"rows={self.rows}: must be one of {ROWS}")
        if self.branchless_x and self.max_m == 1:
            raise ValueError("_bx: max_m=1 has one row of x and no branch to remove")
        if self.ctas_cap < 0:
            raise ValueError(f"ctas_cap={self.ctas_cap}: must be >= 0 (0: no cap)")
        if self.placement not in PLACEMENTS or (self.placement and not self.pdl):
            raise ValueError(f"placement={self.placement!r}: one of {PLACEMENTS}, and only with pdl")

    @property
    def name(self) -> str:
        return (f"cutedsl_dot_m{self.max_m}_t{self.threads}_r{self.rows}" + ("_pdl" if self.pdl else "")
                + (f"_{self.placement}" if self.placement else "") + ("_bx" if self.branchless_x else "")
                + ("_mb1" if self.min_blocks else "") + (f"_g{self.ctas_cap}" if self.ctas_cap else ""))

    @property
    def placed(self) -> dict:
        """The kernel's PDL placement arguments: ``_lw`` waits before any load; both release after the store."""
        return {"wait_first": self.placement == "lw", "release_last": bool(self.placement)}

    def ctas(self, n: int) -> int:
        """CTAs a call launches: one for each ``rows`` rows of W, at most ``ctas_cap`` (``compile_form`` checks
        the kernel's grid)."""
        return min(self.ctas_cap, n // self.rows) if self.ctas_cap else n // self.rows

    @classmethod
    def parse(cls, name: str) -> "DotConfig":
        g = _NAME_RE.match(name)
        if g is None:
            raise ValueError(f"kernelName {name!r} is not of the form {_FORM}")
        return cls(int(g["m"]), int(g["t"]), int(g["r"]), g["pdl"] is not None, g["bx"] is not None,
                   g["mb1"] is not None, int(g["g"] or 0), g["pl"] or "")

    @classmethod
    def parse_pair(cls, name: str) -> "DotConfig":
        """A pair table row's form: as ``parse``, without ``_g`` (the pair kernel launches a CTA a block)."""
        cfg = cls.parse(name)
        if cfg.ctas_cap:
            raise ValueError(f"kernelName {name!r}: a pair form takes no _g cap")
        return cfg

    def check_shape(self, m: int, n: int, k: int) -> Verdict:
        if not 1 <= m <= self.max_m:
            return False, f"M={m} is outside 1..{self.max_m}"
        if n <= 0 or n % self.rows:
            return False, f"N={n} is not a multiple of rows={self.rows}"
        if self.ctas_cap and self.ctas_cap >= n // self.rows:
            return False, f"_g{self.ctas_cap} caps nothing at N={n} ({n // self.rows} CTAs without it)"
        if k <= 0 or k % (VEC * self.threads):
            return False, f"K={k} is not a multiple of 8 x threads = {VEC * self.threads}"
        vectors = self.rows * k // (VEC * self.threads)
        limit = MAX_W_VECTORS if self.max_m <= 4 else MAX_W_VECTORS_ABOVE_M4
        if vectors > limit:
            return False, f"{vectors} W vectors a thread (more than {limit} at max_m={self.max_m}: registers)"
        return OK


def order_reference(x: torch.Tensor, w: torch.Tensor, threads: int) -> torch.Tensor:
    """The kernel's sums in the kernel's order, in fp32 on x's device: per thread over its K slots, the
    butterfly over the warp, the warps in order (IEEE fp32 adds give the same bits on any device)."""
    m, k = x.shape
    n = w.shape[0]
    iters = k // (VEC * threads)
    prod = x.float()[:, None, :] * w.float()[None, :, :]                      # [M, N, K], exact
    prod = prod.view(m, n, iters, threads, VEC)                                  # K = (iter, thread, v)
    acc = torch.zeros(m, n, threads, dtype=torch.float32, device=x.device)
    for i in range(iters):
        for v in range(VEC):
            acc = acc + prod[:, :, i, :, v]
    acc = acc.view(m, n, threads // 32, 32)
    off = 16
    while off:
        acc = acc + acc[..., torch.arange(32, device=x.device) ^ off]
        off //= 2
    total = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    for q in range(threads // 32):
        total = total + acc[..., q, 0]
    return total


def compile_kernel(cfg: DotConfig, n: int, k: int) -> Any:
    """The TVM-FFI function ``f(x, w, out)`` for (cfg, N, K), compiled on fake tensors (M symbolic)."""
    from sglang_fp32gemm.backends.cutedsl_dot_kernel import DotKernel

    return compile_form(DotKernel(n, k, cfg.threads, cfg.rows, cfg.max_m, cfg.pdl, VEC, cfg.branchless_x,
                                  cfg.min_blocks, cfg.ctas_cap, **cfg.placed), cfg, n, k)


def compile_pair(cfg: DotConfig, n: int, n2: int, k: int) -> Any:
    """The TVM-FFI function ``f(x, w, out, w2, out2)``: both products of ``cfg``'s form in one launch."""
    from sglang_fp32gemm.backends.cutedsl_dot_kernel import DotPairKernel

    kern = DotPairKernel(n, n2, k, cfg.threads, cfg.rows, cfg.max_m, cfg.pdl, VEC, cfg.branchless_x, cfg.min_blocks,
                         **cfg.placed)
    return compile_form(kern, cfg, n, k, n2=n2)


#: ``fn(x, w, w2) -> (x @ w^T, x @ w2^T)`` in fp32, one launch.
PairFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]


class CuteDSLDotBackend(TvmFfiBackend):
    """Our CuTe-DSL dot-product kernel (M <= 8); serves ``cutedsl`` rows of its name form."""

    name = "cutedsl-dot"
    config_class = DotConfig
    kernel_file = "cutedsl_dot_kernel.py"

    def compile(self, cfg: DotConfig, n: int, k: int) -> Any:
        return compile_kernel(cfg, n, k)

    def parse_pair(self, kernel_name: str) -> DotConfig:
        return DotConfig.parse_pair(kernel_name)

    def candidates(self, m: int, n: int, k: int) -> list[DotConfig]:
        """At ``CANDIDATE_M`` (1, 2 and 4; aiter's lookup gives each its own row): every thread count
        from 64 to 1024 that divides K into whole 16-byte slots (K=7168: 64, 128, 224, 448, 896) and row
        count that tiles the shape, with PDL on sm90 and later; at M=1 each also as ``_mb1``, from M=2 each also
        as ``_bx`` and ``_bx_mb1`` (the plain form stays there, to compare). Then a few ``_g`` forms, each
        ``CAPS`` cap of the smallest (>= 128) and largest (<= 512) thread count that tiles K at rows 1 and 4
        (``_bx`` from M=2): launches light enough to leave room beside SGLang's other streams, which the
        region rank offers as its lightest (``Tuner.lightest``). With PDL, every uncapped form also without
        it, then the ``_ls`` and ``_lw`` placements of every uncapped PDL form at M=1 and every ``_bx`` PDL form
        from M=2 (alone on an H100 they were 2-7% faster than the same form's plain placement at M 1-2,
        run 33b; the capped form was slower)."""
        if m not in CANDIDATE_M:
            return []
        pdl = sm90_or_later()
        out = []
        for threads in range(64, 1025, 32):
            for rows in ROWS:
                for bx, mb1 in (((False, False), (True, False), (True, True)) if m > 1
                                else ((False, False), (False, True))):
                    cfg = DotConfig(m, threads, rows, pdl, bx, mb1)
                    if cfg.check_shape(m, n, k)[0]:
                        out.append(cfg)
        tiling = [t for t in range(128, 513, 32) if k % (8 * t) == 0]
        for threads in sorted({tiling[0], tiling[-1]}) if tiling else []:
            for rows in (1, 4):
                for cap in CAPS:
                    cfg = DotConfig(m, threads, rows, pdl, m > 1, False, cap)
                    if cfg.check_shape(m, n, k)[0]:
                        out.append(cfg)
        if pdl:
            # Without PDL too: in SGLang's serial chain such a form beat the shipped row (Triton's, without PDL)
            # at M=4 N=1024 in a whole-step A/B on an H100 (run 35a); the serial and region ranks offer each
            # backend's fastest with and without PDL (Tuner.shape).
            out += [dataclasses.replace(c, pdl=False) for c in out if not c.ctas_cap]
            out += [dataclasses.replace(c, placement=p) for p in PLACEMENTS[1:] for c in out
                    if c.pdl and not c.ctas_cap and (c.branchless_x or m == 1)]
        return out

    def bind_pair(self, cfg: DotConfig, device: torch.device, n: int, n2: int, k: int) -> PairFn:
        """``fn(x, w, w2)``: two GEMMs on the same x in one launch (``DotPairKernel``), each output the bits of
        this form's own call. Both widths must take the form (``check_shape``); a ``_g`` form is refused."""
        self.parse_pair(cfg.name)  # the pair table's rule: no _g (its kernel launches a CTA a block)
        device = bind_device(cfg, device, k, n, n2, cuda_only=True)
        with torch.cuda.device(device):
            f = compile_pair(cfg, n, n2, k)
        f32 = torch.float32

        def fn(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            check_w(w)
            check_w(w2)
            x = operand_x(x, k)
            m = x.shape[0]
            out, out2 = torch.empty(m, n, dtype=f32, device=device), torch.empty(m, n2, dtype=f32, device=device)
            f(x, w, out, w2, out2)
            return out, out2

        fn.compiled = f  # type: ignore[attr-defined]
        return fn
