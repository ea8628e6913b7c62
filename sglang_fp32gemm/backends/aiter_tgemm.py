"""aiter backend: ``aiter.tuned_gemm.tgemm.mm(x, w, otype=fp32)``, only when provably fp32.

The three conditions the installed aiter must meet are in docs/backends/flydsl.md; the probe still
checks the result. ``aiter`` is imported lazily: its import fails without ROCm.
"""

import functools
import importlib
import importlib.util
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from sglang_fp32gemm.backends.base import OK, Backend, Verdict

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from sglang_fp32gemm.backends.flydsl_gfx950 import FlyDSLConfig

logger = logging.getLogger(__name__)

FIXED_KERNEL_MARK = "hgemm_bf16_fp32c_"


@functools.lru_cache(maxsize=None)
def aiter_has_fp32c_kernel(package_dir: str) -> Optional[str]:
    """The aiter FlyDSL source file that names the fixed fp32-C kernel, or None (reads text only)."""
    root = Path(package_dir)
    for sub in ("ops/flydsl", "aot/flydsl"):
        d = root / sub
        if not d.is_dir():
            continue
        for f in sorted(d.rglob("*.py")):
            try:
                if FIXED_KERNEL_MARK in f.read_text(errors="replace"):
                    return str(f)
            except OSError:
                continue
    return None


def _fixed_kernel_file() -> Optional[str]:
    """The installed aiter's file naming the fixed fp32-C kernel, or None."""
    spec = importlib.util.find_spec("aiter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return aiter_has_fp32c_kernel(list(spec.submodule_search_locations)[0])


class AiterBackend(Backend):
    """Routes to aiter's tuned GEMM when its FlyDSL kernel keeps C in fp32."""

    name = "aiter"
    libtype = "flydsl"
    # Never run on an MI355X by this project: probe each kernel in a child first.
    isolated_probe = True
    # Device types a call may be on; tests with the fake aiter add "cpu".
    device_types: tuple[str, ...] = ("cuda",)

    def available(self) -> Verdict:
        import torch

        if not getattr(torch.version, "hip", None):
            return False, "torch is not a ROCm build"
        try:
            importlib.import_module("aiter")
            importlib.import_module("aiter.tuned_gemm")
        except Exception as e:  # ImportError, or aiter's own start-up errors without ROCm tools
            return False, f"aiter not importable: {type(e).__name__}: {e}"
        if _fixed_kernel_file() is None:
            # Not fatal for available(): supports() gives the per-call reason,
            # but say it once here too, it is the usual case.
            logger.info("aiter: no %s kernel in the installed aiter; its fp32 FlyDSL output is bf16-rounded",
                        FIXED_KERNEL_MARK)
        return OK

    def _lookup(self, m: int, n: int, k: int) -> tuple[Optional[dict], str]:
        try:
            tg = importlib.import_module("aiter.tuned_gemm")
            get_cfg = getattr(tg, "get_GEMM_A16W16_config")
        except Exception as e:
            return None, f"aiter's tuned lookup is not reachable ({type(e).__name__}: {e})"
        try:
            cfg = get_cfg(m, n, k, False, "torch.bfloat16", "torch.float32", False, False)
        except Exception as e:
            return None, f"aiter's tuned lookup failed ({type(e).__name__}: {e})"
        if cfg is None:
            return None, f"aiter has no tuned row for M={m} N={n} K={k} bf16->fp32"
        return dict(cfg), ""

    def parse(self, kernel_name: str) -> "FlyDSLConfig":
        from sglang_fp32gemm.backends.flydsl_gfx950 import FlyDSLConfig

        return FlyDSLConfig.parse(kernel_name)

    def deterministic(self, cfg: "FlyDSLConfig") -> bool:
        # tgemm.mm runs whatever kernel aiter's own table picks, which may
        # add split-K partials with atomics: never claim determinism.
        return False

    def source_tag(self, cfg: "FlyDSLConfig") -> str:
        found = _fixed_kernel_file()
        try:
            mtime = os.stat(found).st_mtime_ns if found else 0
        except OSError:
            mtime = 0
        return f"aiter:{found}:{mtime}"

    def supports(self, cfg: "FlyDSLConfig", m: int, n: int, k: int) -> Verdict:
        # aiter resolves the call with its own table; our row only says that
        # a FlyDSL kernel should serve this shape. Check what aiter would run.
        acfg, why = self._lookup(m, n, k)
        if acfg is None:
            return False, why
        lib = str(acfg.get("libtype", ""))
        name = str(acfg.get("kernelName", "") or "")
        if lib != "flydsl":
            return False, f"aiter resolves M={m} N={n} K={k} to libtype {lib!r}, not a FlyDSL fp32-C kernel"
        try:
            out_dt: Optional[str] = self.parse(name).out_dtype
        except ValueError:
            out_dt = None
        if out_dt != "fp32":
            return False, f"aiter's row kernel {name!r} has output {out_dt or '?'}: its C is not fp32"
        if _fixed_kernel_file() is None:
            return False, (f"installed aiter lacks the {FIXED_KERNEL_MARK}... kernel (aiter PR #6005): "
                           "its FlyDSL HGEMM rounds C to bf16 before writing fp32")
        return OK

    def bind(self, cfg: "FlyDSLConfig", device: "torch.device", n: int, k: int) -> Callable:
        import torch
        from aiter.tuned_gemm import tgemm

        if device.type not in self.device_types:
            raise RuntimeError(f"aiter backend does not run on {device}")
        f32 = torch.float32

        def run(x: "torch.Tensor", w: "torch.Tensor") -> "torch.Tensor":
            out = tgemm.mm(x, w, otype=f32)
            if out.dtype != f32 or out.shape[0] != x.shape[0] or out.shape[1] != n:
                raise RuntimeError(f"aiter tgemm.mm returned {out.dtype} {tuple(out.shape)}, "
                                   f"expected float32 {(x.shape[0], n)}")
            return out

        return run
