"""A stand-in ``aiter`` package for tests on machines without ROCm.

It is written to a temporary folder as real files (so code that reads
aiter's sources, like AiterBackend's check for the fixed fp32-C kernel, sees
files), put first on ``sys.path``, and imported fresh. It has aiter's real
``tgemm.mm(inp, weights, bias=None, otype=None, scale_a=None, scale_b=None,
scale_c=None)`` signature (weights [N, K]) and a ``get_GEMM_A16W16_config``
lookup over the rows given.

mode="exact": mm computes in fp32 (what a fixed aiter does).
mode="bf16":  mm rounds the result to bf16 and casts back to the requested
              dtype (what a deployed, unfixed aiter FlyDSL path does).

Usage (pytest):
    from fakes.fake_aiter import install_fake_aiter
    aiter = install_fake_aiter(tmp_path, monkeypatch, mode="bf16")
"""

import importlib
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterable, Optional

FIXED_NAME = "flydsl_hgemm_abf16_wbf16_fp32_t16x64x128x4_ks7_w1x4x1_bias0_ktail0_gm1_pft_gfx950"
LOSSY_NAME = "flydsl_hgemm_abf16_wbf16_bf16_t16x64x128x4_ks7_w1x4x1_bias0_ktail0_gm1_pft_gfx950"

_TUNED_GEMM = '''
"""Fake aiter.tuned_gemm (tests only)."""
import torch

MODE = {mode!r}
ROWS = {rows!r}   # (M, N, K, otype) -> {{"libtype": ..., "kernelName": ...}}
CALLS = []


def get_GEMM_A16W16_config(M, N, K, bias, dtype, otype, scaleAB=False, bpreshuffle=False):
    if bias or scaleAB or bpreshuffle or str(dtype) != "torch.bfloat16":
        return None
    for m in (M, (M + 15) // 16 * 16, 1 << max(0, (M - 1).bit_length())):
        row = ROWS.get((m, N, K, str(otype)))
        if row is not None:
            return dict(row)
    return None


class TunedGemm:
    def mm(self, inp, weights, bias=None, otype=None, scale_a=None, scale_b=None, scale_c=None):
        CALLS.append((tuple(inp.shape), tuple(weights.shape), otype))
        out = torch.mm(inp.float(), weights.float().t())
        if bias is not None:
            out = out + bias.float()
        if MODE == "bf16":
            out = out.to(torch.bfloat16)
        return out.to(otype if otype is not None else inp.dtype)


tgemm = TunedGemm()
'''

_FIXED_KERNEL = '''
"""Fake aiter FlyDSL HGEMM source (tests only): names the fixed kernel."""
def kernel_name(tile):
    return "hgemm_bf16_fp32c_" + tile
'''

_OLD_KERNEL = '''
"""Fake aiter FlyDSL HGEMM source (tests only): the pre-fix kernel name."""
def kernel_name(tile):
    return "hgemm_bf16_" + tile
'''


def default_rows(kernel_name: str = FIXED_NAME, libtype: str = "flydsl",
                 shapes: Iterable[tuple[int, int, int]] = ()) -> dict:
    shapes = list(shapes) or [(m, n, 7168) for m in (1, 2, 4, 8, 16, 32) for n in (1024, 2560)]
    return {(m, n, k, "torch.float32"): {"libtype": libtype, "kernelName": kernel_name}
            for m, n, k in shapes}


def write_fake_aiter(root: Path, mode: str = "exact", fixed_kernel: bool = True,
                     rows: Optional[dict] = None) -> Path:
    """Write the fake package under ``root``; return ``root``."""
    if mode not in ("exact", "bf16"):
        raise ValueError(f"mode must be 'exact' or 'bf16', got {mode!r}")
    rows = default_rows() if rows is None else rows
    pkg = Path(root) / "aiter"
    (pkg / "ops" / "flydsl").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""Fake aiter (tests only)."""\n__fake__ = True\n')
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "flydsl" / "__init__.py").write_text("")
    (pkg / "ops" / "flydsl" / "gemm_kernels.py").write_text(
        textwrap.dedent(_FIXED_KERNEL if fixed_kernel else _OLD_KERNEL))
    (pkg / "tuned_gemm.py").write_text(_TUNED_GEMM.format(mode=mode, rows=rows))
    return Path(root)


def _drop_aiter_modules() -> None:
    for name in [n for n in sys.modules if n == "aiter" or n.startswith("aiter.")]:
        del sys.modules[name]


def install_fake_aiter(tmp_path: Path, monkeypatch: Any, mode: str = "exact",
                       fixed_kernel: bool = True, rows: Optional[dict] = None,
                       rocm: bool = True):
    """Install a fresh fake aiter for one test; returns the imported package.

    ``rocm=True`` also makes torch look like a ROCm build (torch.version.hip)
    for the duration of the test. monkeypatch undoes everything afterwards
    except the imported modules, which the next install replaces.
    """
    import torch

    root = write_fake_aiter(Path(tmp_path) / f"fake_aiter_{mode}_{int(fixed_kernel)}", mode, fixed_kernel, rows)
    _drop_aiter_modules()
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    if rocm:
        monkeypatch.setattr(torch.version, "hip", "6.4.0-fake", raising=False)
    # Cached source scans belong to an earlier fake.
    try:
        from sglang_fp32gemm.backends import aiter_tgemm

        aiter_tgemm.aiter_has_fp32c_kernel.cache_clear()
    except ImportError:  # pragma: no cover
        pass
    mods = {n: importlib.import_module(n) for n in ("aiter", "aiter.tuned_gemm")}
    # Registered through monkeypatch so the fake leaves sys.modules afterwards.
    _drop_aiter_modules()
    for n, mod in mods.items():
        monkeypatch.setitem(sys.modules, n, mod)
    return mods["aiter"]


def uninstall_fake_aiter() -> None:
    """Forget any imported aiter (fake or real) so the next import starts over."""
    _drop_aiter_modules()
