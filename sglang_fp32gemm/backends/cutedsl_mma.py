"""NVIDIA backend ``cutedsl-mma``: our CuTe-DSL tensor-core split-K kernel for M <= 32 (``cutedsl_mma_kernel.py``).

Swap-AB ``mma.sync`` with K split over a CTA's warps and a cluster's CTAs,
reduced through shared and distributed shared memory in a fixed order; what
it is and why it is exact: the kernel module. Compiled and called through
TVM-FFI (``cutedsl_tvm.py``). Names parse without imports. It serves rows of
libtype ``cutedsl`` whose kernelName has this backend's form.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any

from sglang_fp32gemm.backends.base import OK, Verdict, sm90_or_later
from sglang_fp32gemm.backends.cutedsl_tvm import TvmFfiBackend, compile_form

MAX_M = 32                # four n8 tiles of x rows
TILES = (8, 16, 32)       # the rows of x a form holds: 1, 2 or 4 n8 tiles
WARPS = (2, 4, 8)
ROW_GROUPS = (1, 2)       # 16-row groups of W a CTA owns
CLUSTERS = (1, 2, 4, 8)   # CTAs along K (8: the portable cluster limit)
DEPTHS = (4, 8)           # streamed forms: 32-K steps in the ring (depth - 1 in flight)
# Where W goes: (staged, depth): registers, all staged, streamed.
_PLACEMENTS = ((False, 0), (True, 0)) + tuple((False, d) for d in DEPTHS)
_FORM = "cutedsl_mma_m<8|16|32>_w<WARPS>_r<ROW_GROUPS>_c<CLUSTER>[_s|_p<DEPTH>][_push][_pdl]"
_NAME_RE = re.compile(r"^cutedsl_mma_m(?P<m>\d+)_w(?P<w>\d+)_r(?P<r>\d+)_c(?P<c>\d+)(?:(?P<s>_s)|_p(?P<p>\d+))?"
                      r"(?P<push>_push)?(?P<pdl>_pdl)?$")
# 16-byte vectors a thread keeps in registers (W unless staged, and x): 4 registers each.
MAX_VECTORS = 48
# Shared memory a staged CTA may fill with W (of the 227 KiB an sm90 CTA may have).
MAX_STAGE_BYTES = 200 << 10


@dataclasses.dataclass(frozen=True)
class MmaConfig:
    """One form of the kernel; ``name`` is its kernelName."""

    max_m: int
    warps: int
    rg: int
    cs: int
    pdl: bool = False
    staged: bool = False  # W through shared memory (cp.async) instead of registers
    depth: int = 0        # streamed: W (and x) through a ring of this many steps in shared memory
    #: The cluster's sums pushed into each share owner's shared memory (one cluster barrier at the end)
    #: instead of pulled from the peers' (two); the same bits. Run 19 timed both: push was faster in the
    #: serial schedule in 9 of 11 pairs (by up to 0.49 us) and within 0.09 us where slower, so both are offered.
    push: bool = False

    def __post_init__(self) -> None:
        if self.max_m not in TILES:
            raise ValueError(f"max_m={self.max_m}: must be one of {TILES}")
        if self.warps not in WARPS:
            raise ValueError(f"warps={self.warps}: must be one of {WARPS}")
        if self.rg not in ROW_GROUPS:
            raise ValueError(f"row groups={self.rg}: must be one of {ROW_GROUPS}")
        if self.cs not in CLUSTERS:
            raise ValueError(f"cluster={self.cs}: must be one of {CLUSTERS}")
        if self.depth and (self.depth not in DEPTHS or self.staged):
            raise ValueError(f"depth={self.depth}: must be one of {DEPTHS}, and not staged")
        if self.push and self.cs < 2:
            raise ValueError(f"push with cluster={self.cs}: pushing needs a cluster of 2 or more")

    @property
    def name(self) -> str:
        return (f"cutedsl_mma_m{self.max_m}_w{self.warps}_r{self.rg}_c{self.cs}" + ("_s" if self.staged else "")
                + (f"_p{self.depth}" if self.depth else "") + ("_push" if self.push else "")
                + ("_pdl" if self.pdl else ""))

    @classmethod
    def parse(cls, name: str) -> "MmaConfig":
        g = _NAME_RE.match(name)
        if g is None:
            raise ValueError(f"kernelName {name!r} is not of the form {_FORM}")
        return cls(int(g["m"]), int(g["w"]), int(g["r"]), int(g["c"]), g["pdl"] is not None, g["s"] is not None,
                   int(g["p"] or 0), g["push"] is not None)

    def chunks(self, k: int) -> int:
        """32-K steps of each warp."""
        return k // (self.cs * self.warps * 32)

    def stage_bytes(self, k: int) -> int:
        """Shared memory a CTA stages: all its W (staged), the ring's W and x of ``depth`` steps (streamed),
        or none. The kernel sizes its allocation itself; ``compile_kernel`` checks the two agree."""
        per_thread = (self.depth * (2 * self.rg + self.max_m // 8) if self.depth else
                      self.chunks(k) * 2 * self.rg if self.staged else 0)
        return per_thread * 16 * 32 * self.warps

    def ctas(self, n: int) -> int:
        """CTAs a call launches: a cluster of ``cs`` for each 16 x ``rg`` rows of W (``compile_form``
        checks the kernel's grid against it)."""
        return self.cs * n // (16 * self.rg)

    def check_shape(self, m: int, n: int, k: int) -> Verdict:
        if not 1 <= m <= self.max_m:
            return False, f"M={m} is outside 1..{self.max_m}"
        if n <= 0 or n % (16 * self.rg):
            return False, f"N={n} is not a multiple of 16 x {self.rg} rows"
        step = 32 * self.warps * self.cs
        if k <= 0 or k % step:
            return False, f"K={k} is not a multiple of 32 x warps x cluster = {step}"
        steps, nt = self.chunks(k), self.max_m // 8
        if self.depth:
            if steps < 2 * self.depth:
                return False, f"{steps} steps of 32 K a warp: too few to stream through {self.depth}"
            vectors = (self.depth - 1) * nt  # registers: the first depth - 1 steps' x
        else:
            vectors = steps * nt + (0 if self.staged else steps * 2 * self.rg)
        stage = self.stage_bytes(k)
        if vectors > MAX_VECTORS:
            return False, f"{vectors} 16-byte vectors a thread (more than {MAX_VECTORS}: registers)"
        if stage > MAX_STAGE_BYTES:
            return False, f"{stage} bytes staged a CTA (more than {MAX_STAGE_BYTES}: shared memory)"
        return OK


def compile_kernel(cfg: MmaConfig, n: int, k: int) -> Any:
    """The TVM-FFI function ``f(x, w, out)`` for (cfg, N, K), compiled on fake tensors (M symbolic)."""
    from sglang_fp32gemm.backends.cutedsl_mma_kernel import MmaKernel

    kern = MmaKernel(n, k, cfg.warps, cfg.rg, cfg.max_m // 8, cfg.cs, cfg.pdl, cfg.staged, cfg.depth, cfg.push)
    if kern.stage_bytes != cfg.stage_bytes(k):  # the rule and the launch must size shared memory alike
        raise AssertionError(f"{cfg.name}: the kernel stages {kern.stage_bytes} bytes, the rule {cfg.stage_bytes(k)}")
    return compile_form(kern, cfg, n, k)


class CuteDSLMmaBackend(TvmFfiBackend):
    """Our CuTe-DSL tensor-core split-K kernel (M <= 32); serves ``cutedsl`` rows of its name form."""

    name = "cutedsl-mma"
    config_class = MmaConfig
    kernel_file = "cutedsl_mma_kernel.py"

    def compile(self, cfg: MmaConfig, n: int, k: int) -> Any:
        return compile_kernel(cfg, n, k)

    def candidates(self, m: int, n: int, k: int) -> list[MmaConfig]:
        """At M 1..32 (at M 1-2 for the region's sake: a light launch beside the other streams, where the dot
        kernel holds every SM): every warp count, row-group count and cluster size that tiles the shape, the
        smallest n8 tile count that holds M, W in registers, staged, or (4 or 8 warps) streamed; with
        and without PDL on sm90 and later; clustered forms pulling their sums and pushing them."""
        if not 1 <= m <= MAX_M:
            return []
        max_m = next(t for t in TILES if m <= t)
        pdls = (False, True) if sm90_or_later() else (False,)
        out = []
        for pdl, warps, rg, cs, (staged, depth), push in itertools.product(pdls, WARPS, ROW_GROUPS, CLUSTERS,
                                                                           _PLACEMENTS, (False, True)):
            if (depth and warps < 4) or (push and cs < 2):  # streamed needs 4+ warps; push, a cluster
                continue
            cfg = MmaConfig(max_m, warps, rg, cs, pdl, staged, depth, push)
            if cfg.check_shape(m, n, k)[0]:
                out.append(cfg)
        return out
