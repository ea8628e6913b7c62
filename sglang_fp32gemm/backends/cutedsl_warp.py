"""NVIDIA backend ``cutedsl``: SGLang's CuTe-DSL warp split-K GEMM with fp32 output.

This module only calls SGLang 0.5.23's ``run_warp_splitk_dense(a=x, b=w.T,
out, pdl, tactic)`` (FlashInfer's copy takes only a bf16 ``out``). Configs
name one tactic and parse without imports; ``supports`` restates the
tactic's rules so that start-up imports nothing, and SGLang's
``validate_tactic`` has the last word in ``bind``. SGLang compiles per exact
M, so a first call at a new M inside CUDA-graph capture raises
``NotReadyInCapture``. The kernel, its rules and its host cost:
docs/backends/cutedsl.md.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from typing import Any

import torch

from sglang_fp32gemm.backends.base import (OK, Backend, KernelFn, NotReadyInCapture, Verdict, dist_version,
                                           nvidia_capability)

logger = logging.getLogger(__name__)

SGLANG_MODULE = "sglang.kernels.ops.gemm.dense_bf16_gemm_warp_splitk"

_FORM = "cutedsl_warpsplitk_o<OUTPUT_TILE>_t<TOKEN_TILE>_k<K_TILE>_s<STAGES>_b<B_LOADER_WARPS>[_pdl]"
_NAME_RE = re.compile(
    r"^cutedsl_warpsplitk_o(?P<o>\d+)_t(?P<t>\d+)_k(?P<k>\d+)_s(?P<s>\d+)_b(?P<b>\d+)(?P<pdl>_pdl)?$"
)

# The kernel's fixed facts (SGLang 0.5.23), restated so that parsing and
# ``supports`` need no import.
OUTPUT_TILES = (16, 32)
TOKEN_TILES = (8, 16, 32)
K_TILES = (128, 256)
B_LOADER_WARPS = (1, 2)
MAX_M = 32
MAX_STAGES = 16
MAX_K_TILES = 64          # its K loop is fully unrolled
SMEM_LIMIT = 232448       # bytes of shared memory per CTA on sm90 / sm100 (227 KiB)
_COMPUTE_WARPS = 4


def _round_up(v: int, a: int) -> int:
    return -(-v // a) * a


@dataclasses.dataclass(frozen=True)
class WarpSplitKConfig:
    """One tactic of SGLang's warp split-K kernel; ``name`` is its ``kernelName``."""

    output_tile: int
    token_tile: int
    k_tile: int
    stages: int
    b_loader_warps: int
    pdl: bool = False

    def __post_init__(self) -> None:
        for field, allowed in (("output_tile", OUTPUT_TILES), ("token_tile", TOKEN_TILES), ("k_tile", K_TILES),
                               ("b_loader_warps", B_LOADER_WARPS)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field}={getattr(self, field)}: must be one of {allowed}")
        if not 1 <= self.stages <= MAX_STAGES:
            raise ValueError(f"stages={self.stages}: must be in 1..{MAX_STAGES}")
        if self.smem_bytes() > SMEM_LIMIT:
            raise ValueError(f"{self.smem_bytes()} bytes of shared memory (more than {SMEM_LIMIT})")

    @property
    def name(self) -> str:
        return (
            f"cutedsl_warpsplitk_o{self.output_tile}_t{self.token_tile}_k{self.k_tile}"
            f"_s{self.stages}_b{self.b_loader_warps}" + ("_pdl" if self.pdl else "")
        )

    @classmethod
    def parse(cls, name: str) -> "WarpSplitKConfig":
        m = _NAME_RE.match(name)
        if m is None:
            raise ValueError(f"kernelName {name!r} is not of the form {_FORM}")
        g = m.groupdict()
        return cls(int(g["o"]), int(g["t"]), int(g["k"]), int(g["s"]), int(g["b"]), g["pdl"] is not None)

    def smem_bytes(self) -> int:
        """Shared memory of one CTA: the W and x stage rings (bf16, W 1 KiB aligned), the mailbox (per compute
        warp, the fp32 partial tile in groups of 32 padded to 34), two 8-byte mbarriers per stage."""
        nbytes = _round_up(self.output_tile * self.k_tile * 2 * self.stages, 1024)
        nbytes = _round_up(nbytes + self.token_tile * self.k_tile * 2 * self.stages, 16)
        groups = self.output_tile * self.token_tile // 32
        nbytes = _round_up(nbytes + _COMPUTE_WARPS * groups * 34 * 4, 8)
        nbytes = _round_up(nbytes + 8 * self.stages, 8)
        return nbytes + 8 * self.stages

    def check_shape(self, m: int, n: int, k: int) -> Verdict:
        if not 1 <= m <= MAX_M:
            return False, f"M={m} is outside 1..{MAX_M}"
        if n <= 0 or n % 16 or n % self.output_tile:
            return False, f"N={n} is not a multiple of output_tile={self.output_tile} (and of 16)"
        if k <= 0 or k % self.k_tile:
            return False, f"K={k} is not a multiple of k_tile={self.k_tile}"
        tiles = k // self.k_tile
        if tiles > MAX_K_TILES:
            return False, f"K={k} is {tiles} tiles of {self.k_tile} (at most {MAX_K_TILES})"
        if self.k_tile == 256 and tiles == 2:
            return False, "k_tile=256 with exactly two K tiles is not supported by the kernel"
        lo = 1 if tiles <= 1 else 2
        if not lo <= self.stages <= min(MAX_STAGES, tiles):
            return False, f"stages={self.stages} is outside {lo}..{min(MAX_STAGES, tiles)} for K={k}"
        return OK

    def tactic(self, module: Any) -> Any:
        """SGLang's ``WarpSplitKTactic`` for this config (``module``: SGLang's kernel module)."""
        return module.WarpSplitKTactic(self.output_tile, self.token_tile, self.k_tile, self.stages,
                                       self.b_loader_warps)

    @classmethod
    def from_tactic(cls, tactic: Any, pdl: bool = False) -> "WarpSplitKConfig":
        return cls(int(tactic.output_tile), int(tactic.token_tile), int(tactic.k_tile), int(tactic.stages),
                   int(tactic.b_loader_warps), pdl)


_module_lock = threading.Lock()
_module: Any = None
_module_error: str | None = None


def sglang_module() -> Any:
    """SGLang's kernel module, imported once (it imports ``cutlass`` and ``cuda.bindings``); ``ImportError`` says why not."""
    global _module, _module_error
    if _module is not None:
        return _module
    with _module_lock:
        if _module is None and _module_error is None:
            try:
                import importlib

                mod = importlib.import_module(SGLANG_MODULE)
                missing = [s for s in ("run_warp_splitk_dense", "WarpSplitKTactic", "validate_tactic",
                                       "autotune_tactics", "default_tactic") if not hasattr(mod, s)]
                if missing:
                    raise ImportError(f"{SGLANG_MODULE} lacks {missing}")
                _module = mod
            except Exception as e:  # ImportError, or cutlass failing to initialise
                _module_error = f"{type(e).__name__}: {e}"
        if _module is None:
            raise ImportError(
                f"SGLang's CuTe-DSL warp split-K ({SGLANG_MODULE}) does not import ({_module_error}); "
                "FlashInfer's copy takes only a bf16 out, so there is no fp32 substitute"
            )
        return _module


class CuteDSLWarpBackend(Backend):
    """SGLang's CuTe-DSL warp split-K kernel; serves rows of ``libtype`` cutedsl."""

    name = "cutedsl"
    libtype = "cutedsl"
    # Run on the H200 by this project (tuner and GPU tests exercise every
    # shipped tactic): the in-process probe before first use is enough; the
    # child-process probe is for kernels never run on their hardware.
    isolated_probe = False
    # Eager host time 99-166 us per call against torch.mm's 18-28 (H200 run 9,
    # docs/benchmarks/README.md): SGLang's run_warp_splitk_dense re-converts
    # its tensors on every call. Captured calls replay only the launch.
    eager_ok = False

    def available(self) -> Verdict:
        cap, why = nvidia_capability()
        if cap is None:
            return False, why
        major, minor = cap
        if major not in (9, 10):
            # elect.sync and mbarrier try_wait need sm90; tactics are sized for
            # 227 KiB of shared memory, which sm_12x does not have.
            return False, f"sm_{major}{minor}: the kernel needs sm90 or sm100-class (227 KiB smem)"
        try:
            sglang_module()
        except ImportError as e:
            return False, str(e)
        return OK

    def parse(self, kernel_name: str) -> WarpSplitKConfig:
        return WarpSplitKConfig.parse(kernel_name)

    def deterministic(self, cfg: WarpSplitKConfig) -> bool:
        # K-split partials are reduced in a fixed order inside each CTA.
        return True

    def supports(self, cfg: WarpSplitKConfig, m: int, n: int, k: int) -> Verdict:
        return cfg.check_shape(m, n, k)

    def source_tag(self, cfg: WarpSplitKConfig) -> str:
        return "-".join(f"{dist}{dist_version(dist) or '-none'}" for dist in ("sglang", "nvidia-cutlass-dsl"))

    def candidates(self, m: int, n: int, k: int) -> list[WarpSplitKConfig]:
        """SGLang's ``autotune_tactics(m, n, k)`` (its default first); [] without SGLang's module."""
        try:
            mod = sglang_module()
            tactics = mod.autotune_tactics(m, n, k)
        except Exception as e:  # not importable, or no CUDA device for its default tactic
            logger.info("cutedsl: no candidates for M=%d N=%d K=%d (%s: %s)", m, n, k, type(e).__name__, e)
            return []
        out: list[WarpSplitKConfig] = []
        for t in tactics:
            try:
                cfg = WarpSplitKConfig.from_tactic(t)
            except ValueError:
                continue
            if cfg.check_shape(m, n, k)[0] and cfg not in out:
                out.append(cfg)
        return out

    def bind(self, cfg: WarpSplitKConfig, device: torch.device, n: int, k: int) -> KernelFn:
        ok, why = cfg.check_shape(1, n, k)
        if not ok:
            raise ValueError(why)
        mod = sglang_module()
        tactic = cfg.tactic(mod)
        mod.validate_tactic(tactic, 1, n, k)  # SGLang's own check; raises ValueError
        run = mod.run_warp_splitk_dense
        pdl = cfg.pdl
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        bf16, f32 = torch.bfloat16, torch.float32
        compiled_ms: set[int] = set()
        capturing = torch.cuda.is_current_stream_capturing

        # The per-call host cost is SGLang's public function (docs/backends/cutedsl.md);
        # skipping its checks would mean calling its private _compile/_from_dlpack.
        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            m = x.shape[0]
            if x.stride(0) != k or x.data_ptr() & 31:
                # SGLang takes only a packed, 32-byte aligned x (for M = 1 too).
                x = torch.empty((m, k), dtype=bf16, device=device).copy_(x)
            out = torch.empty((m, n), dtype=f32, device=device)
            if m not in compiled_ms and capturing():
                raise NotReadyInCapture(
                    f"cutedsl kernel for M={m} not compiled before CUDA-graph capture; "
                    "run the routed call once eagerly at this M first"
                )
            run(x, w.t(), out, pdl, tactic)
            compiled_ms.add(m)
            return out

        fn.tactic = tactic  # type: ignore[attr-defined]
        fn.compiled_ms = compiled_ms  # type: ignore[attr-defined]
        return fn
