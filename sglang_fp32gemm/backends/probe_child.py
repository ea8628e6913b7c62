"""The child side of the isolated probe: probe one kernel here, write the verdict (one JSON object) to
``--verdict-file`` (else print it after ``RESULT_MARKER``), exit without interpreter teardown. By hand::

    python -m sglang_fp32gemm.backends.probe_child --backend flydsl \\
        --kernel NAME --device cuda:0 --m 8 --n 1024 --k 7168
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import exactness

RESULT_MARKER = "SGLANG_FP32GEMM_PROBE_RESULT "
DEFAULT_RESOLVER = "sglang_fp32gemm.backends:by_name"


def resolve(resolver: str) -> Callable[[str], Any]:
    """``module:function`` -> the function (a backend constructor by name)."""
    mod, sep, attr = resolver.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"resolver {resolver!r}: expected 'module:function'")
    fn = getattr(importlib.import_module(mod), attr)
    if not callable(fn):
        raise ValueError(f"resolver {resolver!r} is not callable")
    return fn


def fail(shape: tuple[int, int, int], detail: str, rel_err: float = float("nan")) -> exactness.Check:
    return exactness.Check(False, rel_err, shape, detail)


def run_here(backend: Any, kernel_name: str, device: torch.device, m: int, n: int, k: int) -> exactness.Check:
    """The probe itself, in this process: availability, parse, supports, bind, ``exactness.check``."""
    shape = (m, n, k)
    try:
        ok, why = backend.available()
        if not ok:
            return fail(shape, f"backend {getattr(backend, 'name', '?')} unavailable: {why}")
        cfg = backend.parse(kernel_name)
        ok, why = backend.supports(cfg, m, n, k)
        if not ok:
            return fail(shape, f"probe shape rejected: {why}")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        fn = backend.bind(cfg, device, n, k)
    except Exception as e:  # any Python-level failure: do not trust this kernel
        return fail(shape, f"raised {type(e).__name__}: {e}")
    r = exactness.check(fn, device, m, n, k)
    return dataclasses.replace(r, detail=f"{r.detail} in a child process") if r.ok else r


def verdict_json(r: exactness.Check) -> str:
    return json.dumps({"ok": r.ok, "rel_err": r.rel_err, "shape": list(r.shape), "detail": r.detail})


def parse_verdict(text: str, shape: tuple[int, int, int]) -> exactness.Check:
    """The verdict ``verdict_json`` wrote; a failed verdict if it is malformed or claims an impossible pass."""
    try:
        d = json.loads(text)
        ok, detail = d["ok"], str(d["detail"])[:2000]
        rel = float("nan") if d["rel_err"] is None else float(d["rel_err"])
        if not isinstance(ok, bool):
            raise TypeError("ok is not a bool")
    except Exception as e:  # anything unreadable, RecursionError included
        return fail(shape, f"child wrote an unreadable verdict ({type(e).__name__}): {text[:200]!r}")
    if ok and not rel <= exactness.REL_TOL:
        return fail(shape, f"child claimed a pass with rel. error {rel!r}", rel)
    return exactness.Check(ok, rel, shape, detail)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_fp32gemm.backends.probe_child",
                                 description="Probe one kernel in this process; report one verdict.")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--device", required=True, help="e.g. cuda:0 (or cpu)")
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--resolver", default=DEFAULT_RESOLVER, help="module:function that builds a backend by name")
    ap.add_argument("--verdict-file", help="write the verdict (JSON) here instead of printing it")
    a = ap.parse_args(argv)
    shape = (a.m, a.n, a.k)
    try:
        backend = resolve(a.resolver)(a.backend)
        result = run_here(backend, a.kernel, torch.device(a.device), a.m, a.n, a.k)
    except Exception as e:
        result = fail(shape, f"could not set up the probe: {type(e).__name__}: {e}")
    if a.verdict_file:
        with open(a.verdict_file, "w") as f:
            f.write(verdict_json(result))
    else:  # its own line, whatever was printed before without a newline
        sys.stdout.write("\n" + RESULT_MARKER + verdict_json(result) + "\n")
    return 0


def run(argv: Optional[list[str]] = None) -> None:
    """``main``, then exit at once."""
    code = main(argv)
    # Skip interpreter and driver teardown: the verdict is out, and a GPU
    # runtime that hangs at exit must not turn a pass into a timeout.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
