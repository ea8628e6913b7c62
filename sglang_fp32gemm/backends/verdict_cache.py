"""The on-disk cache of passed child-probe verdicts (``isolated_probe.py``).

One small JSON file per key (``key_fields``) in ``settings.probe_cache_dir()``; only passes are
written. What the key holds and which entries are trusted: docs/design.md ("Probe and faults").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch

from sglang_fp32gemm import exactness
from sglang_fp32gemm.backends.base import dist_version

logger = logging.getLogger(__name__)

FORMAT = 2
#: Distributions whose installed version changes a probed binary (several
#: names where the same compiler ships under more than one).
COMPILER_DISTS = ("flydsl", "aiter", "amd-aiter", "triton", "pytorch-triton-rocm", "nvidia-cutlass-dsl")
_MAX_ENTRY_BYTES = 64 << 10

#: (directory, problem) pairs already warned about in this process.
_warned: set[tuple[str, str]] = set()


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
        "package": dist_version("sglang-fp32gemm") or "unknown",
        "compilers": {dist: dist_version(dist) for dist in COMPILER_DISTS},
        "torch": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "driver": driver_version(),
        "device": device_facts(device),
    }


def entry_path(cache_dir: str | os.PathLike, fields: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / f"{digest[:40]}.json"


def _private(st: os.stat_result, owners: tuple[int, ...]) -> Optional[str]:
    """Why a file or directory with this stat is not ours alone; None when it is."""
    if st.st_uid not in owners:
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def dir_problem(cache_dir: str | os.PathLike) -> Optional[str]:
    """Why verdicts cannot be kept in ``cache_dir``; None when they can (missing but creatable counts)."""
    path = Path(cache_dir)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        parent = path.parent
        while parent != parent.parent and not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            return f"{parent} is not a directory"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"cannot create it: {parent} is not writable by this user"
        return None
    except NotADirectoryError:
        return "a part of the path is not a directory"
    except OSError as e:
        return f"cannot read it ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    why = _private(st, (os.geteuid(), 0))
    if why:
        return why
    if not os.access(path, os.W_OK | os.X_OK):
        return "not writable by this user"
    return None


def usable(cache_dir: str | os.PathLike) -> bool:
    """Whether verdicts can be kept in ``cache_dir``; one warning per process and problem when not."""
    why = dir_problem(cache_dir)
    if why is None:
        return True
    if (str(cache_dir), why) not in _warned:
        _warned.add((str(cache_dir), why))
        logger.warning("sglang-fp32gemm: probe verdicts are not kept in %s (%s): every start probes "
                       "the gfx950 kernels again", cache_dir, why)
    return False


def describe_dir(cache_dir: str | os.PathLike) -> str:
    """``DIR (kept)`` or ``DIR (not kept: why)``, for ``explain``."""
    why = dir_problem(cache_dir)
    return f"{cache_dir} (kept; {'exists' if os.path.isdir(cache_dir) else 'created at the first probe'})" \
        if why is None else f"{cache_dir} (not kept: {why})"


def _read_entry(path: Path) -> bytes:
    """The entry's bytes if it is a small regular file we alone own and may write; else ValueError/OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        why = _private(st, (os.geteuid(),))
        if why:
            raise ValueError(why)
        data = f.read(_MAX_ENTRY_BYTES + 1)
    if len(data) > _MAX_ENTRY_BYTES:
        raise ValueError("too large")
    return data


def read(path: Path, fields: dict[str, Any]) -> Optional[exactness.Check]:
    """A trusted cached pass for exactly ``fields``, or None. Never raises."""
    try:
        if dir_problem(path.parent) is not None:
            return None
        try:
            data = _read_entry(path)
        except FileNotFoundError:
            return None
        entry = json.loads(data.decode("utf-8"))
        if entry.get("key") != fields:
            raise ValueError("written for another key")
        res = entry["result"]
        rel_err, shape = float(res["rel_err"]), tuple(int(v) for v in res["shape"])
        if res.get("ok") is not True or not rel_err <= exactness.REL_TOL or len(shape) != 3:
            raise ValueError("not a pass")
        written = str(entry.get("written", "?"))[:40]
    except Exception as e:  # RecursionError, UnicodeError, OSError, ...: an unreadable entry is no entry
        logger.debug("probe cache entry %s ignored: %s: %.200s", path, type(e).__name__, e)
        return None
    return exactness.Check(True, rel_err, shape,  # type: ignore[arg-type]
                           f"passed in a child process at {written} (cached in {path})")


def write(path: Path, fields: dict[str, Any], result: exactness.Check) -> bool:
    """Atomically record a pass (replacing whatever is there); False if it cannot. Never raises."""
    if not result.ok:
        return False
    tmp = None
    try:
        cache_dir = path.parent
        if not cache_dir.exists():
            cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # private; parents as umask says
        if not usable(cache_dir):
            return False
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-", suffix=".json")  # mode 0600
        with os.fdopen(fd, "w") as f:
            json.dump({"key": fields, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "result": {"ok": True, "rel_err": result.rel_err, "shape": list(result.shape),
                                  "detail": result.detail}}, f, sort_keys=True)
        os.replace(tmp, path)
        return True
    except Exception as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        usable(path.parent)  # says why, once
        logger.debug("probe verdict not cached in %s: %s: %s", path.parent, type(e).__name__, e)
        return False
