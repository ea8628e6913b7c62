"""What tune, bench and fuzz share: the backends, bound kernels, the route a call takes, versions,
JSON-lines logs, atomic writes (exactness: ``sglang_fp32gemm.exactness``). Imports no kernel library.
"""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import json
import os
import platform
import subprocess
import time
from typing import Any, Callable, Iterable, Optional

import torch

from sglang_fp32gemm.backends.base import dist_version
from sglang_fp32gemm.tools import vllm_peer

K_PRO, K_FLASH = 7168, 4096
N_DSV4 = (512, 1024, 2048, 2560)


# -- backends ------------------------------------------------------------------
def available(b) -> tuple[bool, str]:
    try:
        ok, why = b.available()
        return bool(ok), str(why)
    except Exception as e:  # a broken install is "unavailable", with the reason
        return False, f"available() raised {type(e).__name__}: {e}"


def split_k_of(cfg) -> int:
    for attr in ("split_k", "splitK"):  # the Triton and FlyDSL configs
        v = getattr(cfg, attr, None)
        if isinstance(v, int):
            return v
    return 0


class BindCache:
    """``bind(cfg, device, n, k)`` once per (backend, kernel, device, N, K); errors are cached too."""

    def __init__(self) -> None:
        self._fns: dict[tuple, Any] = {}

    def get(self, b, cfg, kernel: str, device, n: int, k: int):
        key = (b.name, kernel, str(device), n, k)
        got = self._fns.get(key)
        if got is None:
            try:
                got = b.bind(cfg, device, n, k)
            except Exception as e:
                got = e
            self._fns[key] = got
        if isinstance(got, Exception):
            raise got
        return got


# -- routing -------------------------------------------------------------------
def route_of(x: torch.Tensor, w: torch.Tensor, captured: bool = False) -> str:
    """Where the routed call sends (x, w), resolved here, as an eager or (``captured``) a captured call:
    ``backend:kernelName`` or ``torch``."""
    from sglang_fp32gemm import routing

    route, detail = routing.get_router().describe_call(x, w, captured=captured)
    return f"{route}:{detail.split(' ')[0]}" if route != "torch" else "torch"


# -- versions, logs, lists -----------------------------------------------------
def _or_none(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None when it raises (a version that cannot be read is unknown)."""
    try:
        return fn()
    except Exception:
        return None


def _run(*cmd: str, timeout: float = 20) -> Optional[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout.strip() or None


def versions() -> dict:
    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    out["triton"] = _or_none(lambda: importlib.import_module("triton").__version__)
    out["cutlass_dsl"] = dist_version("nvidia-cutlass-dsl") or _or_none(
        lambda: getattr(importlib.import_module("cutlass"), "__version__", "importable, version unknown"))
    spec = _or_none(lambda: importlib.util.find_spec("sglang.kernels.ops.gemm.dense_bf16_gemm_warp_splitk"))
    out["sglang_warp_splitk"] = spec.origin if spec else None
    out["sglang"] = dist_version("sglang")
    out["vllm_ll"] = _or_none(vllm_peer.source)  # which release's ll_bf16 the peer columns time
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out["gpu"] = torch.cuda.get_device_name()
        out["sms"] = props.multi_processor_count
        out["l2_bytes"] = getattr(props, "L2_cache_size", None)
        out["driver"] = _or_none(lambda: _run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"))
    out["git"] = _or_none(lambda: _run("git", "rev-parse", "--short", "HEAD", timeout=10))
    # A copied tree (the device machine's) may carry an older .git: its HEAD is then not the code that ran.
    out["git_tracked_changes"] = _or_none(
        lambda: len((_run("git", "status", "--porcelain", "--untracked-files=no", timeout=10) or "").splitlines()))
    return out


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


def write_text(path: str, text: str) -> None:
    """Write atomically (a killed run leaves the previous complete file); creates the folder."""
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path: str, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=1, default=str))
