"""A kernel's first probe, run in a child process on the same device: a GPU fault, a hang or a wrong result
in a kernel never run on its hardware disables that kernel, not SGLang. How the child is started, watched
and ended: docs/design.md ("Probe and faults"); passed verdicts are cached by ``verdict_cache.py``.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Union

import torch

from sglang_fp32gemm import exactness
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.backends import probe_child, verdict_cache
from sglang_fp32gemm.backends.probe_child import DEFAULT_RESOLVER, fail

logger = logging.getLogger(__name__)

#: How much of the child's output the parent keeps (the end of it).
TAIL_BYTES = 4096
_TAIL_LINES = 6
_KILL_WAIT_S = 5.0
_DRAIN_S = 1.0
_MAX_VERDICT_BYTES = 64 << 10

DeviceLike = Union[int, str, torch.device]

#: argv: [-c, package root, child arguments...]. Runs before anything of the
#: package is imported: the working directory ('' from -c) never reaches sys.path.
_BOOT = """\
import importlib.util, os, sys
root = sys.argv[1]
want = os.path.realpath(os.path.join(root, "sglang_fp32gemm", "__init__.py"))
sys.path[:] = [p for p in sys.path if p]
if root not in {os.path.realpath(p) for p in sys.path}:
    sys.path.insert(0, root)
def found():
    spec = importlib.util.find_spec("sglang_fp32gemm")
    return os.path.realpath(spec.origin) if spec is not None and spec.origin else None
if found() != want:
    sys.path.insert(0, root)
    importlib.invalidate_caches()
    if found() != want:
        sys.stderr.write(f"probe child: sglang_fp32gemm resolves to {found()}, not {want}\\n")
        os._exit(3)
from sglang_fp32gemm.backends.probe_child import run
run(sys.argv[2:])
"""


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


class _OutputTail:
    """Reads a pipe as it fills, keeping only its last ``limit`` bytes (a thread)."""

    def __init__(self, pipe: Any, limit: int = TAIL_BYTES):
        self._pipe, self._limit = pipe, limit
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._stop_at: Optional[float] = None
        self._thread = threading.Thread(target=self._run, name="sglang-fp32gemm-probe-output", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd = self._pipe.fileno()
        poller = select.poll()  # not select(): a server process may hold more than 1024 descriptors
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while True:
                ready = poller.poll(50)
                stop_at = self._stop_at
                if stop_at is not None and (not ready or time.monotonic() > stop_at):
                    break  # told to stop: what was written is read, or a helper keeps writing
                if not ready:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                with self._lock:
                    self._buf += chunk
                    del self._buf[:-self._limit]
        except (OSError, ValueError):
            pass
        finally:
            self._pipe.close()

    def finish(self, drain_s: float = _DRAIN_S) -> str:
        """Stop reading once what is already written is read (at most ``drain_s``); the tail, in lines."""
        self._stop_at = time.monotonic() + drain_s
        self._thread.join(drain_s + 1.0)
        with self._lock:
            text = self._buf.decode("utf-8", "replace")
        kept = [ln.strip()[:300] for ln in text.splitlines() if ln.strip()][-_TAIL_LINES:]
        return " | ".join(kept) if kept else "(no output)"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own session: also its helpers
    except (ProcessLookupError, PermissionError, OSError):
        if proc.returncode is None:
            try:
                proc.kill()
            except OSError:
                pass


def _read_verdict(path: str, shape: tuple[int, int, int]) -> Optional[exactness.Check]:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_VERDICT_BYTES + 1)
    except OSError:
        return None
    if not data:
        return None
    if len(data) > _MAX_VERDICT_BYTES:
        return fail(shape, "child wrote a verdict larger than a verdict can be")
    return probe_child.parse_verdict(data.decode("utf-8", "replace"), shape)


def _how_it_ended(rc: int) -> str:
    if rc >= 0:
        return f"exited with code {rc}"
    try:
        return f"killed by {signal.Signals(-rc).name} (signal {-rc})"
    except ValueError:
        return f"killed by signal {-rc}"


def run_child(backend_name: str, kernel_name: str, device: torch.device, m: int, n: int, k: int,
              timeout_s: float, resolver: str = DEFAULT_RESOLVER) -> exactness.Check:
    """Spawn the child, wait for its exit and read its verdict (no cache)."""
    shape = (m, n, k)
    with tempfile.TemporaryDirectory(prefix="sglang_fp32gemm-probe-") as tmp:
        verdict_path = os.path.join(tmp, "verdict.json")
        cmd = [sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parents[2]),
               "--backend", backend_name, "--kernel", kernel_name, "--device", str(device),
               "--m", str(m), "--n", str(n), "--k", str(k), "--resolver", resolver,
               "--verdict-file", verdict_path]
        env = dict(os.environ, PYTHONUNBUFFERED="1")  # the output tail is complete when it dies
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        except OSError as e:
            return fail(shape, f"could not start the probe process: {e}")
        tail = _OutputTail(proc.stdout)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            try:
                proc.wait(timeout=_KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            return fail(shape, f"hung for {timeout_s:g}s in a child process (killed); output: {tail.finish()}")
        _kill_group(proc)  # helpers it left behind (holding the pipe, or the device)
        verdict = _read_verdict(verdict_path, shape)
        output = tail.finish()
    if rc != 0:
        return fail(shape, f"child process {_how_it_ended(rc)}; output: {output}")
    if verdict is None:
        return fail(shape, f"child process wrote no verdict; output: {output}")
    return verdict


def _timeout_setting() -> float:
    try:
        return settings_mod.get().probe_timeout_s
    except Exception:  # a bad switch stops the plugin elsewhere; the probe keeps its default
        return settings_mod.DEFAULT_PROBE_TIMEOUT_S


def probe_in_child(backend_name: str, kernel_name: str, device: DeviceLike, m: int, n: int, k: int,
                   timeout_s: Optional[float] = None, *, resolver: str = DEFAULT_RESOLVER,
                   cache_dir: Optional[str | os.PathLike] = None, use_cache: bool = True) -> exactness.Check:
    """Probe one kernel in a child process on ``device``, or return a trusted cached pass; never raises.
    ``resolver`` (``module:function``) builds the backend by name in both processes (tests pass another)."""
    shape = (m, n, k)
    try:
        dev = as_device(device)
        backend = probe_child.resolve(resolver)(backend_name)
        cfg = backend.parse(kernel_name)
        tag = backend.source_tag(cfg)
        timeout = float(timeout_s) if timeout_s is not None else _timeout_setting()
    except Exception as e:
        return fail(shape, f"cannot probe {backend_name} kernel {kernel_name!r}: {type(e).__name__}: {e}")
    path: Optional[Path] = None
    fields: dict[str, Any] = {}
    if use_cache:
        try:
            where = cache_dir if cache_dir is not None else settings_mod.probe_cache_dir()
            if verdict_cache.usable(where):
                fields = verdict_cache.key_fields(backend_name, kernel_name, n, k, tag, dev)
                path = verdict_cache.entry_path(where, fields)
                hit = verdict_cache.read(path, fields)
                if hit is not None:
                    return hit
        except Exception as e:  # the cache is an optimisation only
            logger.debug("probe cache unavailable: %s: %s", type(e).__name__, e)
            path = None
    result = run_child(backend_name, kernel_name, dev, m, n, k, timeout, resolver)
    if result.ok and path is not None:
        verdict_cache.write(path, fields, result)
    return result
