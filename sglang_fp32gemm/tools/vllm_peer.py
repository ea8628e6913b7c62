"""vLLM's CuTe-DSL ``ll_bf16`` GEMM as a measurement peer (a ``bench`` column, never part of the plugin).

Importable only where ``../shared/tools/vllm_ll_carry.sh`` unpacked it. Its defaults are tuned for
router shapes (N 256/384), so each shape sweeps a few configs by isolated time and keeps the fastest exact one.
At M=1 the sweep includes the dot-product kernel with W loaded before the PDL wait (``_pdl``): vLLM's own
``ll_bf16_gemm`` takes that instance (``prefetch_pdl_weights=True``) at M=1 and the plain one above.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Callable, Optional

import torch

from sglang_fp32gemm import exactness
from sglang_fp32gemm.backends.base import sha12

logger = logging.getLogger(__name__)

MODULE = "vllm.model_executor.kernels.linear.cute_dsl.ll_bf16"
DOTPROD_MAX_M = 4
DOTPROD_BS = (128, 256)
SPLITK = ((2, 4), (2, 6), (4, 4), (6, 4), (8, 4))  # (split_k, num_stages)

Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: sha256 (first 12 hex digits) of the carried ``_ll_bf16_splitk.py`` -> the vLLM release it is from. The
#: carry's other files are the same in 0.33.0 and 0.34.0; 0.34.0's split-K kernel makes every CTA of a
#: cluster arrive at its start and wait before the epilogue stores into its peers' shared memory.
SPLITK_SOURCES = {"afcebac75622": "0.33.0", "bf9011e5a912": "0.34.0"}


def source() -> Optional[str]:
    """The vLLM release the peer on the path comes from (``"0.34.0"``, or ``"unknown (sha256 ...)"``), read
    from its split-K file; None where there is none. Imports nothing (``vllm`` itself may be heavy)."""
    rel = os.path.join(*MODULE.split(".")[:-1], "_ll_bf16_splitk.py")
    for entry in sys.path:
        path = os.path.join(entry or os.getcwd(), rel)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                sha = sha12(f.read())
            return SPLITK_SOURCES.get(sha, f"unknown (sha256 {sha})")
    return None


def load(device: Optional[torch.device] = None) -> tuple[Optional["VllmLL"], str]:
    """(the peer, "ok") or (None, why it is absent); it runs on CUDA devices only."""
    if device is not None and device.type != "cuda":
        return None, "no CUDA"
    try:
        import importlib

        mod = importlib.import_module(MODULE)
        from cuda.bindings.driver import CUstream  # noqa: F401  (the launch needs it)
    except Exception as e:
        return None, f"{MODULE} not importable ({type(e).__name__}: {str(e)[:160]}); carry it with vllm_ll_carry.sh"
    try:
        prefetching = mod.LLBf16Gemm(prefetch_pdl_weights=True)
    except TypeError:  # a release without the option
        prefetching = None
    return VllmLL(mod.LLBf16Gemm(), prefetching), "ok"


def _stream():
    from cuda.bindings.driver import CUstream

    return CUstream(torch.cuda.current_stream().cuda_stream)


def _cached(cache: dict, prefix: tuple):
    # vLLM versions differ in the cache key's tail (0.33 adds the output dtype): match the head.
    for key, kern in cache.items():
        if tuple(key[:len(prefix)]) == prefix:
            return kern
    raise KeyError(f"no compiled ll_bf16 kernel for {prefix}")


class VllmLL:
    def __init__(self, gemm, prefetching=None) -> None:
        self.g = gemm
        #: The instance vLLM's ``ll_bf16_gemm`` calls at M=1 (W loaded before the PDL wait), or None.
        self.g_pdl = prefetching
        self.picked: dict[tuple[int, int, int], tuple[str, Fn]] = {}

    def configs(self, m: int) -> list[str]:
        dot = [f"dotprod_bs{bs}" for bs in DOTPROD_BS] if m <= DOTPROD_MAX_M else []
        if m == 1 and self.g_pdl is not None:
            dot += [f"dotprod_bs{bs}_pdl" for bs in DOTPROD_BS]
        return dot + [f"splitk_{sk}x{ns}" for sk, ns in SPLITK]

    def fn(self, cfg: str, m: int, k: int) -> Fn:
        """The kernel of ``cfg`` (compiled on first use) as fn(x, w) -> fp32 out."""
        if cfg.startswith("dotprod_bs"):
            g = self.g_pdl if cfg.endswith("_pdl") else self.g
            bs = int(cfg[len("dotprod_bs"):].removesuffix("_pdl"))
            g.compile(g.CompileKey(backend="dotprod", M=m, K=k, bs=bs))
            kern = _cached(g._compiled_cache, (m, k, bs))
            launch = lambda x, w, out: kern(x, w, out, w.shape[0], _stream())  # noqa: E731
        else:
            sk, ns = (int(v) for v in cfg[len("splitk_"):].split("x"))
            self.g.compile(self.g.CompileKey(backend="splitk", split_k=sk, num_stages=ns))
            kern = _cached(self.g._splitk_cache, (sk, ns))
            launch = lambda x, w, out: kern(x, w, out, _stream(), 1.0)  # noqa: E731

        def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            out = torch.empty(x.shape[0], w.shape[0], dtype=torch.float32, device=x.device)
            launch(x, w, out)
            return out
        return run

    def pick(self, m: int, n: int, k: int, timer, weights: list[torch.Tensor], device,
             replays: int = 15) -> tuple[Optional[str], Optional[Fn], dict]:
        """(config, fn, {config: isolated us or why not}) for the fastest exact config of the sweep."""
        if (m, n, k) in self.picked:
            cfg, fn = self.picked[(m, n, k)]
            return cfg, fn, {}
        x = exactness.random_bf16(m, k, device=device)
        sweep: dict = {}
        for cfg in self.configs(m):
            try:
                fn = self.fn(cfg, m, k)
                sweep[cfg] = round(timer.per_call(fn, x, weights, replays=replays), 3)
            except Exception as e:
                sweep[cfg] = f"{type(e).__name__}: {str(e)[:120]}"
        for cfg in sorted((c for c, v in sweep.items() if isinstance(v, float)), key=lambda c: sweep[c]):
            fn = self.fn(cfg, m, k)
            c = exactness.check(fn, device, m, n, k)
            if c.ok:
                self.picked[(m, n, k)] = (cfg, fn)
                return cfg, fn, sweep
            sweep[cfg] = f"not exact: {c.detail[:120]}"
        return None, None, sweep
