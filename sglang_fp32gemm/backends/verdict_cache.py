"""The on-disk cache of passed child-probe verdicts (``isolated_probe.py``).

One small JSON file per key, in ``settings.probe_cache_dir()``. The key
(``key_fields``) is what a verdict is valid for: backend name, kernelName,
N, K, ``backend.source_tag(cfg)``, this package's version, torch's version
and its HIP/CUDA versions, the GPU driver version and the device. Only
passes are written; writes are atomic (temporary file + rename); an entry
that is missing, unreadable, corrupt or written for another key reads as no
entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch

from sglang_fp32gemm import exactness

logger = logging.getLogger(__name__)

FORMAT = 1
_MAX_ENTRY_BYTES = 64 << 10

_write_warned = False


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang-fp32gemm")
    except Exception:
        return "unknown"


def _first_line(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.readline(512).decode("utf-8", "replace").strip() or None
    except OSError:
        return None


def driver_version() -> Optional[str]:
    """The GPU kernel driver's version, when a cheap file says it; else None."""
    return _first_line("/sys/module/amdgpu/version") or _first_line("/proc/driver/nvidia/version")


def device_facts(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda":
        import platform

        return {"type": device.type, "machine": platform.machine()}
    props = torch.cuda.get_device_properties(device)
    arch = getattr(props, "gcnArchName", "") if getattr(torch.version, "hip", None) else ""
    return {"type": "cuda", "name": props.name, "arch": arch or f"sm{props.major}{props.minor}",
            "units": int(props.multi_processor_count)}


def key_fields(backend_name: str, kernel_name: str, n: int, k: int, source_tag: str,
               device: torch.device) -> dict[str, Any]:
    """What a cached verdict is valid for (JSON-native values only)."""
    return {
        "format": FORMAT,
        "backend": backend_name,
        "kernel": kernel_name,
        "n": int(n),
        "k": int(k),
        "source_tag": str(source_tag),
        "package": _package_version(),
        "torch": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "driver": driver_version(),
        "device": device_facts(device),
    }


def entry_path(cache_dir: str | os.PathLike, fields: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / f"{digest[:40]}.json"


def read(path: Path, fields: dict[str, Any]) -> Optional[exactness.Check]:
    """A cached pass for exactly ``fields``, or None (missing, unreadable, corrupt, other key)."""
    from sglang_fp32gemm.errors import ConfigError, read_config_text

    try:
        if not path.exists():
            return None
        if path.stat().st_size > _MAX_ENTRY_BYTES:
            raise ValueError("too large")
        entry = json.loads(read_config_text(path, "probe cache entry"))
        if entry.get("key") != fields:
            raise ValueError("written for another key")
        res = entry["result"]
        rel_err, shape = float(res["rel_err"]), tuple(int(v) for v in res["shape"])
        if res.get("ok") is not True or not rel_err <= exactness.REL_TOL or len(shape) != 3:
            raise ValueError("not a pass")
    except (OSError, ConfigError, ValueError, TypeError, KeyError, AttributeError) as e:
        logger.debug("probe cache entry %s ignored: %s", path, e)
        return None
    return exactness.Check(True, rel_err, shape,  # type: ignore[arg-type]
                           f"passed in a child process at {entry.get('written', '?')} (cached in {path})")


def write(path: Path, fields: dict[str, Any], result: exactness.Check) -> bool:
    """Atomically record a pass; False (and one debug log per process) if it cannot."""
    global _write_warned
    if not result.ok:
        return False
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"key": fields, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "result": {"ok": True, "rel_err": result.rel_err, "shape": list(result.shape),
                                  "detail": result.detail}}, f, sort_keys=True)
        os.replace(tmp, path)
        return True
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if not _write_warned:
            _write_warned = True
            logger.debug("probe verdicts are not cached: cannot write %s (%s)", path.parent, e)
        return False
