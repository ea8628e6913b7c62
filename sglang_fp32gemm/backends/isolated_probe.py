"""A kernel's first probe, run in a child process on the same device.

For kernels this project has never run on their hardware (the gfx950 FlyDSL
kernels, aiter's), a GPU fault, a hang or a wrong result in the probe must
disable that kernel, not take SGLang down. ``probe_in_child`` therefore runs
the probe (``probe_child.py``: ``exactness.check`` on the bound kernel) in a
fresh interpreter (``sys.executable -m sglang_fp32gemm.backends.probe_child``;
never ``fork``, which would copy the parent's CUDA/HIP state) and waits for
it. The result is the child's verdict; or failed with "hung for Ns" after
``timeout_s`` (the child's process group is killed); or failed with the exit
code or signal and the last lines of its stderr.

Passed verdicts (only those) are cached on disk (``verdict_cache.py``); a
later start with the same key skips the child. Cost at start-up: one child
per kernel not yet cached, each importing torch and the backend, compiling
the kernel and running it twice (a few seconds to tens of seconds with a
cold compiler cache); nothing once cached.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional, Union

import torch

from sglang_fp32gemm import exactness
from sglang_fp32gemm.backends import probe_child, verdict_cache
from sglang_fp32gemm.backends.probe_child import DEFAULT_RESOLVER, fail

logger = logging.getLogger(__name__)

STDERR_TAIL_LINES = 6
_KILL_WAIT_S = 5.0

DeviceLike = Union[int, str, torch.device]


def as_device(device: DeviceLike) -> torch.device:
    """An int is a CUDA/HIP device index; a string or torch.device is taken as is."""
    if isinstance(device, bool):
        raise TypeError("device must be an index, a string or a torch.device")
    if isinstance(device, int):
        return torch.device("cuda", device)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:  # the child's "current" device may differ
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    kept = [ln.strip()[:300] for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) if kept else "(no stderr)"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The child imports this very package, whatever its working directory. An
    # installed package is found through site-packages anyway (and putting
    # site-packages on PYTHONPATH would move it ahead of the standard library).
    root = str(Path(__file__).resolve().parents[2])
    if root not in _site_dirs():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _site_dirs() -> set[str]:
    import site

    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        dirs.append(user)
    return {str(Path(d).resolve()) for d in dirs}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own session: also its helpers
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass


def run_child(backend_name: str, kernel_name: str, device: torch.device, m: int, n: int, k: int,
              timeout_s: float, resolver: str = DEFAULT_RESOLVER) -> exactness.Check:
    """Spawn the child and read its verdict (no cache)."""
    shape = (m, n, k)
    cmd = [sys.executable, "-m", "sglang_fp32gemm.backends.probe_child",
           "--backend", backend_name, "--kernel", kernel_name, "--device", str(device),
           "--m", str(m), "--n", str(n), "--k", str(k), "--resolver", resolver]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_child_env(), start_new_session=True, text=True, errors="replace")
    except OSError as e:
        return fail(shape, f"could not start the probe process: {e}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            _, err = proc.communicate(timeout=_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            err = ""
        return fail(shape, f"hung for {timeout_s:g}s in a child process (killed); stderr: {_tail(err or '')}")
    rc = proc.returncode
    verdict = probe_child.parse_verdict(out or "", shape)
    if rc != 0:
        if rc < 0:
            try:
                how = f"killed by {signal.Signals(-rc).name} (signal {-rc})"
            except ValueError:
                how = f"killed by signal {-rc}"
        else:
            how = f"exited with code {rc}"
        return fail(shape, f"child process {how}; stderr: {_tail(err or '')}")
    if verdict is None:
        return fail(shape, f"child process printed no verdict; stderr: {_tail(err or '')}")
    return verdict


def probe_in_child(backend_name: str, kernel_name: str, device: DeviceLike, m: int, n: int, k: int,
                   timeout_s: float = 120.0, *, resolver: str = DEFAULT_RESOLVER,
                   cache_dir: Optional[str | os.PathLike] = None, use_cache: bool = True) -> exactness.Check:
    """Probe one kernel in a child process on ``device`` (an int is a CUDA/HIP index).

    Returns a cached pass when there is one for this key (no child);
    otherwise runs the child and caches a pass. Never raises for anything the
    kernel or the child does. ``resolver`` (``module:function``) builds the
    backend by name in both processes; only the tests pass another one.
    """
    shape = (m, n, k)
    try:
        dev = as_device(device)
        backend = probe_child.resolve(resolver)(backend_name)
        cfg = backend.parse(kernel_name)
        tag = backend.source_tag(cfg)
    except Exception as e:
        return fail(shape, f"cannot probe {backend_name} kernel {kernel_name!r}: {type(e).__name__}: {e}")
    path: Optional[Path] = None
    fields: dict[str, Any] = {}
    if use_cache:
        try:
            from sglang_fp32gemm import settings as settings_mod

            fields = verdict_cache.key_fields(backend_name, kernel_name, n, k, tag, dev)
            path = verdict_cache.entry_path(cache_dir if cache_dir is not None else settings_mod.probe_cache_dir(),
                                            fields)
        except Exception as e:  # the cache is an optimisation only
            logger.debug("probe cache unavailable: %s: %s", type(e).__name__, e)
            path = None
        if path is not None:
            hit = verdict_cache.read(path, fields)
            if hit is not None:
                return hit
    result = run_child(backend_name, kernel_name, dev, m, n, k, float(timeout_s), resolver)
    if result.ok and path is not None:
        verdict_cache.write(path, fields, result)
    return result
