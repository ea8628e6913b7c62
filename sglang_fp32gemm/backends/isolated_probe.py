"""A kernel's first probe, run in a child process on the same device.

For kernels this project has never run on their hardware (the gfx950 FlyDSL
kernels), a GPU fault, a hang or a wrong result in the probe must disable
that kernel, not take SGLang down. ``probe_in_child`` therefore runs the
probe in a fresh interpreter (``sys.executable -m
sglang_fp32gemm.backends.isolated_probe``; never ``fork``, which would copy
the parent's CUDA/HIP state) and waits for it:

* The child constructs the backend by name (``sglang_fp32gemm.backends.by_name``
  unless another ``module:function`` resolver is given), checks
  ``available()``, parses the kernelName, checks ``supports(cfg, m, n, k)``,
  binds it (``bind(cfg, device, n, k)``) and runs it twice on fresh random
  bf16 inputs. Before each call the device's caching allocator is filled
  with NaN (a freed NaN block of the output's size), so an output element the
  kernel never writes reads as NaN, not as a plausible stale value. Each
  output must be fp32 [m, n], finite, and within a relative error of
  ``probe.REL_TOL`` (1e-5) of the float64 product of the same inputs. It
  prints one line ``RESULT_MARKER + json`` and exits without interpreter
  teardown.
* The parent returns a ``ProbeResult``: the child's verdict; or failed with
  "hung for Ns" after ``timeout_s`` (the child's process group is killed);
  or failed with the exit code or signal and the last lines of its stderr.

Passed verdicts (only those) are cached on disk, one small JSON file per
key, in ``SGLANG_FLYDSL_FP32_GEMM_PROBE_CACHE`` or
``~/.cache/sglang_fp32gemm/probes`` (``settings.probe_cache_dir``). The key
is a hash of: backend name, kernelName, N, K, ``backend.source_tag(cfg)``
(the kernel source tag), this package's version, torch's version and its
HIP/CUDA versions, the GPU driver version (read from
``/sys/module/amdgpu/version`` or ``/proc/driver/nvidia/version`` when
present) and the device's name and architecture. A later start with the same
key skips the child. Writes are atomic (temporary file + rename); an
unreadable or corrupt entry is ignored; a directory that cannot be written
means no caching (one debug log per process).

Cost at start-up: one child per kernel not yet cached, each importing torch
and the backend, compiling the kernel and running it twice (a few seconds to
tens of seconds with a cold compiler cache); nothing once cached.

Run by hand::

    python -m sglang_fp32gemm.backends.isolated_probe --backend flydsl \\
        --kernel NAME --device cuda:0 --m 8 --n 1024 --k 7168
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch

from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.backends.probe import REL_TOL, ProbeResult

logger = logging.getLogger(__name__)

RESULT_MARKER = "SGLANG_FP32GEMM_PROBE_RESULT "
DEFAULT_RESOLVER = "sglang_fp32gemm.backends:by_name"
CACHE_FORMAT = 1
STDERR_TAIL_LINES = 6
_MAX_CACHE_ENTRY_BYTES = 64 << 10
_KILL_WAIT_S = 5.0

DeviceLike = Union[int, str, torch.device]

_cache_write_warned = False


# -- helpers shared by parent and child ------------------------------------------
def resolve(resolver: str) -> Callable[[str], Any]:
    """``module:function`` -> the function (a backend constructor by name)."""
    mod, sep, attr = resolver.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"resolver {resolver!r}: expected 'module:function'")
    fn = getattr(importlib.import_module(mod), attr)
    if not callable(fn):
        raise ValueError(f"resolver {resolver!r} is not callable")
    return fn


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


def _fail(shape: tuple[int, int, int], detail: str, rel_err: float = float("nan")) -> ProbeResult:
    return ProbeResult(False, rel_err, shape, detail)


# -- the child ----------------------------------------------------------------------
def _poison(device: torch.device, numel: int) -> None:
    """Leave a freed NaN block of ``numel`` fp32 in the allocator for the next output."""
    t = torch.full((max(numel, 1),), float("nan"), dtype=torch.float32, device=device)
    del t


def run_here(backend: Any, kernel_name: str, device: torch.device, m: int, n: int, k: int,
             trials: int = 2) -> ProbeResult:
    """The probe itself, in this process (the child calls it)."""
    shape = (m, n, k)
    seed = secrets.randbits(62)
    try:
        ok, why = backend.available()
        if not ok:
            return _fail(shape, f"backend {getattr(backend, 'name', '?')} unavailable: {why}")
        cfg = backend.parse(kernel_name)
        ok, why = backend.supports(cfg, m, n, k)
        if not ok:
            return _fail(shape, f"probe shape rejected: {why}")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        fn = backend.bind(cfg, device, n, k)
        worst = 0.0
        for trial in range(trials):
            gen = torch.Generator().manual_seed(seed + trial)
            x = torch.randn(m, k, generator=gen).to(device=device, dtype=torch.bfloat16)
            w = torch.randn(n, k, generator=gen).to(device=device, dtype=torch.bfloat16)
            ref = torch_ref.reference_fp64(x, w)
            _poison(device, m * n)
            out = fn(x, w)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (m, n) or out.dtype != torch.float32:
                got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
                return _fail(shape, f"call {trial + 1} returned {got}, expected ({m}, {n}) torch.float32")
            err = torch_ref.rel_error(out, ref)
            if not err <= REL_TOL:  # also catches nan
                what = ("non-finite or unwritten output" if err == float("inf")
                        else "above fp32 tolerance (bf16 rounding gives ~2e-3)")
                return _fail(shape, f"call {trial + 1} (seed {seed + trial}): {what}", err)
            worst = max(worst, err)
    except Exception as e:  # any Python-level failure: do not trust this kernel
        return _fail(shape, f"raised {type(e).__name__}: {e}")
    return ProbeResult(True, worst, shape, f"fp32-exact in a child process ({trials} calls, seed {seed})")


def _result_json(r: ProbeResult) -> str:
    return json.dumps({"ok": r.ok, "rel_err": r.rel_err, "shape": list(r.shape), "detail": r.detail})


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_fp32gemm.backends.isolated_probe",
                                 description="Probe one kernel in this process; print one JSON line.")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--device", required=True, help="e.g. cuda:0 (or cpu)")
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--resolver", default=DEFAULT_RESOLVER, help="module:function that builds a backend by name")
    a = ap.parse_args(argv)
    shape = (a.m, a.n, a.k)
    try:
        backend = resolve(a.resolver)(a.backend)
        result = run_here(backend, a.kernel, torch.device(a.device), a.m, a.n, a.k)
    except Exception as e:
        result = _fail(shape, f"could not set up the probe: {type(e).__name__}: {e}")
    sys.stdout.write(RESULT_MARKER + _result_json(result) + "\n")
    sys.stdout.flush()
    return 0


# -- the parent -----------------------------------------------------------------
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


def cache_key_fields(backend_name: str, kernel_name: str, n: int, k: int, source_tag: str,
                     device: torch.device, resolver: str = DEFAULT_RESOLVER) -> dict[str, Any]:
    """What a cached verdict is valid for (JSON-native values only)."""
    return {
        "format": CACHE_FORMAT,
        "backend": backend_name,
        "kernel": kernel_name,
        "n": int(n),
        "k": int(k),
        "source_tag": str(source_tag),
        "resolver": resolver,
        "package": _package_version(),
        "torch": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "driver": driver_version(),
        "device": device_facts(device),
    }


def cache_path(cache_dir: str | os.PathLike, fields: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / f"{digest[:40]}.json"


def read_cached(path: Path, fields: dict[str, Any]) -> Optional[ProbeResult]:
    """A cached pass for exactly ``fields``, or None (missing, unreadable, corrupt, other key)."""
    from sglang_fp32gemm.errors import ConfigError, read_config_text

    try:
        if not path.exists():
            return None
        if path.stat().st_size > _MAX_CACHE_ENTRY_BYTES:
            raise ValueError("too large")
        entry = json.loads(read_config_text(path, "probe cache entry"))
        if entry.get("key") != fields:
            raise ValueError("written for another key")
        res = entry["result"]
        rel_err, shape = float(res["rel_err"]), tuple(int(v) for v in res["shape"])
        if res.get("ok") is not True or not rel_err <= REL_TOL or len(shape) != 3:
            raise ValueError("not a pass")
    except (OSError, ConfigError, ValueError, TypeError, KeyError, AttributeError) as e:
        logger.debug("probe cache entry %s ignored: %s", path, e)
        return None
    return ProbeResult(True, rel_err, shape,  # type: ignore[arg-type]
                       f"passed in a child process at {entry.get('written', '?')} (cached in {path})")


def write_cached(path: Path, fields: dict[str, Any], result: ProbeResult) -> bool:
    """Atomically record a pass; False (and one debug log per process) if it cannot."""
    global _cache_write_warned
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
        if not _cache_write_warned:
            _cache_write_warned = True
            logger.debug("probe verdicts are not cached: cannot write %s (%s)", path.parent, e)
        return False


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    kept = [ln.strip()[:300] for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) if kept else "(no stderr)"


def _parse_verdict(stdout: str, shape: tuple[int, int, int]) -> Optional[ProbeResult]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            try:
                d = json.loads(line[len(RESULT_MARKER):])
                ok, detail = d["ok"], str(d["detail"])
                rel = float("nan") if d["rel_err"] is None else float(d["rel_err"])
                if not isinstance(ok, bool):
                    raise TypeError("ok is not a bool")
            except (ValueError, TypeError, KeyError) as e:
                return _fail(shape, f"child printed an unreadable verdict ({e}): {line[:200]!r}")
            if ok and not rel <= REL_TOL:
                return _fail(shape, f"child claimed a pass with rel. error {rel!r}", rel)
            return ProbeResult(ok, rel, shape, detail)
    return None


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
              timeout_s: float, resolver: str = DEFAULT_RESOLVER) -> ProbeResult:
    """Spawn the child and read its verdict (no cache)."""
    shape = (m, n, k)
    cmd = [sys.executable, "-m", "sglang_fp32gemm.backends.isolated_probe",
           "--backend", backend_name, "--kernel", kernel_name, "--device", str(device),
           "--m", str(m), "--n", str(n), "--k", str(k), "--resolver", resolver]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_child_env(), start_new_session=True, text=True, errors="replace")
    except OSError as e:
        return _fail(shape, f"could not start the probe process: {e}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            _, err = proc.communicate(timeout=_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            err = ""
        return _fail(shape, f"hung for {timeout_s:g}s in a child process (killed); stderr: {_tail(err or '')}")
    rc = proc.returncode
    verdict = _parse_verdict(out or "", shape)
    if rc != 0:
        if rc < 0:
            try:
                how = f"killed by {signal.Signals(-rc).name} (signal {-rc})"
            except ValueError:
                how = f"killed by signal {-rc}"
        else:
            how = f"exited with code {rc}"
        return _fail(shape, f"child process {how}; stderr: {_tail(err or '')}")
    if verdict is None:
        return _fail(shape, f"child process printed no verdict; stderr: {_tail(err or '')}")
    return verdict


def probe_in_child(backend_name: str, kernel_name: str, device: DeviceLike, m: int, n: int, k: int,
                   timeout_s: float = 120.0, *, resolver: str = DEFAULT_RESOLVER,
                   cache_dir: Optional[str | os.PathLike] = None, use_cache: bool = True) -> ProbeResult:
    """Probe one kernel in a child process on ``device`` (an int is a CUDA/HIP index).

    Returns a cached pass when there is one for this key (no child);
    otherwise runs the child and caches a pass. Never raises for anything the
    kernel or the child does.
    """
    shape = (m, n, k)
    try:
        dev = as_device(device)
        backend = resolve(resolver)(backend_name)
        cfg = backend.parse(kernel_name)
        tag = backend.source_tag(cfg)
    except Exception as e:
        return _fail(shape, f"cannot probe {backend_name} kernel {kernel_name!r}: {type(e).__name__}: {e}")
    path: Optional[Path] = None
    fields: dict[str, Any] = {}
    if use_cache:
        try:
            from sglang_fp32gemm import settings as settings_mod

            fields = cache_key_fields(backend_name, kernel_name, n, k, tag, dev, resolver)
            path = cache_path(cache_dir if cache_dir is not None else settings_mod.probe_cache_dir(), fields)
        except Exception as e:  # the cache is an optimisation only
            logger.debug("probe cache unavailable: %s: %s", type(e).__name__, e)
            path = None
        if path is not None:
            hit = read_cached(path, fields)
            if hit is not None:
                return hit
    result = run_child(backend_name, kernel_name, dev, m, n, k, float(timeout_s), resolver)
    if result.ok and path is not None:
        write_cached(path, fields, result)
    return result


if __name__ == "__main__":
    code = main()
    # Skip interpreter and driver teardown: the verdict is out, and a GPU
    # runtime that hangs at exit must not turn a pass into a timeout.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
