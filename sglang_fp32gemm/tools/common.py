"""What tune, bench and fuzz share: the backends, the exactness check, the
route a call takes, versions, JSON-lines logs, M lists.

Nothing here imports a kernel library at module load.
"""

from __future__ import annotations

import gzip
import inspect
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable, Iterable, Optional

import torch

#: fp32-exact: rel. error vs float64 at most this, and every element within
#: atol/rtol of the float64 product.
REL_TOL = 1e-5
ATOL, RTOL = 1e-2, 1e-4

K_PRO, K_FLASH = 7168, 4096
N_DSV4 = (512, 1024, 2048, 2560)


# -- backends ------------------------------------------------------------------
def all_backends() -> list:
    """Every backend of the package (available or not), in routing order."""
    from sglang_fp32gemm import backends as B

    return B.all_backends()


def backend_by_name(name: str):
    from sglang_fp32gemm import backends as B

    return B.by_name(name)


def available(b) -> tuple[bool, str]:
    try:
        ok, why = b.available()
        return bool(ok), str(why)
    except Exception as e:  # a broken install is "unavailable", with the reason
        return False, f"available() raised {type(e).__name__}: {e}"


def is_deterministic(b, cfg) -> bool:
    return bool(b.deterministic(cfg))


def split_k_of(cfg) -> int:
    for attr in ("split_k", "splitK", "splitk"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int):
            return v
    return 0


def bind_takes_pdl(b) -> bool:
    """Whether ``b.bind`` accepts a ``pdl`` keyword (programmatic dependent launch)."""
    try:
        params = inspect.signature(b.bind).parameters
    except (TypeError, ValueError):
        return False
    return "pdl" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class BindCache:
    """``bind(cfg, device, n, k)`` once per (backend, kernel, device, N, K); errors are cached too."""

    def __init__(self) -> None:
        self._fns: dict[tuple, Any] = {}

    def get(self, b, cfg, kernel: str, device, n: int, k: int, pdl: bool = False):
        key = (b.name, kernel, str(device), n, k, pdl)
        got = self._fns.get(key)
        if got is None:
            try:
                got = b.bind(cfg, device, n, k, pdl=True) if pdl else b.bind(cfg, device, n, k)
            except Exception as e:
                got = e
            self._fns[key] = got
        if isinstance(got, Exception):
            raise got
        return got

    def clear(self) -> None:
        self._fns.clear()


# -- exactness -----------------------------------------------------------------
def randn_bf16(*shape: int, device) -> torch.Tensor:
    t = torch.randn(*shape, device=device)
    return torch.where(t == 0, torch.full_like(t, 0.5), t).to(torch.bfloat16)


def poison(device, m: int, n: int) -> None:
    """Fill a freed block with NaN so the next [m, n] fp32 allocation likely reuses it."""
    junk = torch.full((m * n + 4096,), float("nan"), dtype=torch.float32, device=device)
    del junk


def measure_error(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """rel. error vs float64, allclose, finiteness and the fraction of elements outside atol/rtol."""
    o = out.double()
    finite = bool(torch.isfinite(o).all())
    if not finite:
        rel = float("inf")
    else:
        denom = float(ref.norm())
        rel = float((o - ref).norm() / denom) if denom else float((o - ref).norm())
    close = torch.isclose(o, ref, atol=ATOL, rtol=RTOL)
    bad = float((~close).double().mean()) if close.numel() else 0.0
    return {"rel_err": rel, "allclose": bad == 0.0, "finite": finite, "bad": bad}


def exact(err: dict) -> bool:
    return err["finite"] and err["rel_err"] <= REL_TOL and err["allclose"]


def check_fn(fn: Callable, m: int, n: int, k: int, device, repeat: int = 0) -> dict:
    """Run ``fn`` on fresh random inputs (output memory poisoned) against float64.

    With ``repeat`` > 0 it runs that many more times on the same inputs and
    says whether every result had the same bits (``repeatable``).
    """
    x, w = randn_bf16(m, k, device=device), randn_bf16(n, k, device=device)
    poison(device, m, n)
    out = fn(x, w)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or tuple(out.shape) != (m, n):
        got = (tuple(out.shape), out.dtype) if isinstance(out, torch.Tensor) else type(out).__name__
        return {"rel_err": float("inf"), "allclose": False, "finite": False, "bad": 1.0,
                "ok": False, "error": f"returned {got}, expected fp32 [{m}, {n}]"}
    res = measure_error(out, x.double() @ w.double().t())
    res["ok"] = exact(res)
    if repeat:
        first = out.clone()
        same = True
        for _ in range(repeat):
            poison(device, m, n)
            again = fn(x, w)
            same = same and bool(torch.equal(first, again))
        res["repeatable"] = same
    return res


# -- routing -------------------------------------------------------------------
def route_of(x: torch.Tensor, w: torch.Tensor) -> str:
    """Where the routed call sends (x, w): ``backend:kernelName`` or ``torch``.

    The router's own entry for the call (resolved here, outside graph capture).
    """
    from sglang_fp32gemm import routing

    route, detail = routing.get_router().describe_call(x, w)
    return f"{route}:{detail.split(' ')[0]}" if route != "torch" else "torch"


# -- versions, logs, lists -----------------------------------------------------
def _dist_version(*names: str) -> Optional[str]:
    from importlib import metadata

    for n in names:
        try:
            return metadata.version(n)
        except Exception:
            continue
    return None


def versions() -> dict:
    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:
        out["triton"] = None
    out["cutlass_dsl"] = _dist_version("nvidia-cutlass-dsl")
    if out["cutlass_dsl"] is None:
        try:
            import cutlass

            out["cutlass_dsl"] = getattr(cutlass, "__version__", "importable, version unknown")
        except Exception:
            out["cutlass_dsl"] = None
    try:
        import importlib.util

        spec = importlib.util.find_spec("sglang.kernels.ops.gemm.dense_bf16_gemm_warp_splitk")
        out["sglang_warp_splitk"] = spec.origin if spec else None
    except Exception:
        out["sglang_warp_splitk"] = None
    out["sglang"] = _dist_version("sglang")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out["gpu"] = torch.cuda.get_device_name()
        out["sms"] = props.multi_processor_count
        out["l2_bytes"] = getattr(props, "L2_cache_size", None)
        try:
            out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip() or None
        except Exception:
            out["driver"] = None
    try:
        out["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    timeout=10).stdout.strip() or None
    except Exception:
        out["git"] = None
    return out


def argv_line() -> str:
    return " ".join([os.path.basename(sys.executable), *sys.argv])


class JsonLog:
    """One JSON object per line, flushed at once; ``.gz`` paths are gzipped."""

    def __init__(self, path: Optional[str]):
        self.t0 = time.monotonic()
        self.path = path
        self._f = None
        if path:
            d = os.path.dirname(path)
            if d:
                os.makedirs(d, exist_ok=True)
            self._f = gzip.open(path, "wt") if path.endswith(".gz") else open(path, "w")

    def write(self, **rec: Any) -> None:
        rec.setdefault("t", round(time.monotonic() - self.t0, 2))
        if self._f is not None:
            self._f.write(json.dumps(rec, default=str) + "\n")
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def read_jsonl(path: str) -> Iterable[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut off by a killed run
            if isinstance(rec, dict):
                yield rec


def write_json(path: str, obj: Any) -> None:
    """Write atomically: a killed run leaves the previous complete file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def parse_ints(text: str) -> list[int]:
    """'1-4,8,16-32:8' -> [1, 2, 3, 4, 8, 16, 24, 32] (ranges inclusive, optional :step)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        rng, _, step = part.partition(":")
        a, sep, b = rng.partition("-")
        lo, hi = int(a), int(b) if sep else int(a)
        st = int(step) if step else 1
        if lo < 1 or hi < lo or st < 1:
            raise ValueError(f"bad range {part!r}")
        out.extend(range(lo, hi + 1, st))
    return sorted(set(out))
