"""Bound kernels: bind once, probe before first use (under that kernel's own lock), disable on failure
(docs/design.md, "Probe and faults").
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm.backends import probe as probe_mod
from sglang_fp32gemm.backends.base import Backend, KernelFn, NotReadyInCapture
from sglang_fp32gemm.telemetry import Telemetry

logger = logging.getLogger(__name__)


class Bound:
    """One kernel bound to (device, N, K), probed; ``fn`` is None when it failed."""

    __slots__ = ("backend", "kernel_name", "deterministic", "fn", "error", "probe")

    def __init__(self, backend: str, kernel_name: str, deterministic: bool):
        self.backend = backend
        self.kernel_name = kernel_name
        self.deterministic = deterministic
        self.fn: Optional[KernelFn] = None
        self.error: Optional[str] = None
        self.probe: Optional[probe_mod.ProbeResult] = None

    @property
    def disabled_reason(self) -> str:
        return f"{self.backend} {self.kernel_name}: {self.error}"


class _ProbeFailed(Exception):
    def __init__(self, result: probe_mod.ProbeResult):
        super().__init__(result.describe())
        self.result = result


class KernelCache:
    def __init__(self, telemetry: Telemetry, probe_timeout_s: Optional[float] = None):
        self._telemetry = telemetry
        self._probe_timeout_s = probe_timeout_s
        self._lock = threading.Lock()
        self._bound: dict[tuple, Bound] = {}
        self._binding: dict[tuple, threading.Lock] = {}
        #: Called with a kernel disabled at run time (the route table retires its entries).
        self.on_disable: Callable[[Bound], None] = lambda bound: None

    def get(self, b: Backend, cfg: Any, device: torch.device, n: int, k: int, probe_m: int) -> Bound:
        """The kernel bound to (device, N, K): bound and probed (at ``probe_m``) on first use."""
        name = b.kernel_name(cfg)
        key = (b.name, name, device.type, device.index, n, k)
        bound = self._bound.get(key)
        if bound is not None:
            return bound
        with self._lock:
            gate = self._binding.setdefault(key, threading.Lock())
        with gate:  # one bind and probe per kernel; other kernels go on
            bound = self._bound.get(key)
            if bound is None:
                bound = self._bind(b, cfg, name, device, n, k, probe_m)
                self._bound[key] = bound
        return bound

    def _bind(self, b: Backend, cfg: Any, name: str, device: torch.device, n: int, k: int,
              probe_m: int) -> Bound:
        bound = Bound(b.name, name, b.deterministic(cfg))
        try:
            if b.isolated_probe:
                from sglang_fp32gemm.backends import isolated_probe

                # timeout_s None: the probe-timeout setting.
                r = isolated_probe.probe_in_child(b.name, name, device, probe_m, n, k, self._probe_timeout_s)
                if not r.ok:
                    raise _ProbeFailed(r)
            fn = b.bind(cfg, device, n, k)
            r = probe_mod.run_probe(fn, device, probe_m, n, k)
            bound.probe = r
            if not r.ok:
                raise _ProbeFailed(r)
            bound.fn = fn
            logger.info("sglang-fp32gemm: %s %s on %s N=%d K=%d passed its %s", b.name, name, device, n, k,
                        r.describe())
        except _ProbeFailed as e:
            bound.probe = e.result
            bound.error = f"failed its precision probe ({e.result.describe()})"
            logger.warning("sglang-fp32gemm: kernel %s %s disabled on %s: %s", b.name, name, device, bound.error)
        except Exception as e:
            bound.error = f"bind raised {type(e).__name__}: {e}"
            logger.warning("sglang-fp32gemm: kernel %s %s disabled on %s: %s", b.name, name, device, bound.error)
        return bound

    def guard(self, bound: Bound) -> Callable[[torch.Tensor, torch.Tensor], Optional[torch.Tensor]]:
        """``run(x, w)``: the kernel's result, or None (take the fallback) if it raised."""
        fn = bound.fn
        counted = (bound.backend, bound.kernel_name)  # the key the router counted this call under

        def run(x: torch.Tensor, w: torch.Tensor) -> Optional[torch.Tensor]:
            try:
                return fn(x, w)
            except NotReadyInCapture as e:
                # Not a fault: this captured call takes the fallback; the
                # kernel stays enabled for everything it was set up for.
                self._telemetry.once(logging.WARNING, f"sglang-fp32gemm: {bound.backend} {bound.kernel_name} "
                                     f"on {x.device}: {e}; this captured call uses torch")
                self._telemetry.recount(counted, ("torch", f"{bound.backend} {bound.kernel_name}: {e}"))
                return None
            except Exception as e:
                self.disable(bound, x.device, e)
                self._telemetry.recount(counted, ("torch", bound.disabled_reason))
                return None

        return run

    def warm(self, bound: Bound, device: torch.device, m: int, n: int, k: int) -> None:
        """Run ``bound`` once at M on zeroed inputs, outside capture (a failure disables it): a kernel whose
        eager calls go elsewhere would otherwise first run at this M inside a capture, where per-M setup
        (a compile) cannot."""
        x = torch.zeros((m, k), dtype=torch.bfloat16, device=device)
        w = torch.zeros((n, k), dtype=torch.bfloat16, device=device)
        try:
            bound.fn(x, w)  # not through guard: this run is not a counted call
        except Exception as e:
            self.disable(bound, device, e)

    def preparer(self, bound: Bound, m: int) -> Optional[Callable[[], None]]:
        """``prepare()``: ``bound``'s per-stream state for the current stream at M (``KernelFn.prepare``,
        backends/base.py), or None when the kernel has none. A failure is logged once; the captured
        calls on that stream then take torch, as they would without it."""
        prep = getattr(bound.fn, "prepare", None)
        if prep is None:
            return None

        def prepare() -> None:
            try:
                prep(m)
            except Exception as e:
                self._telemetry.once(logging.WARNING, f"sglang-fp32gemm: {bound.backend} {bound.kernel_name}: "
                                     f"preparing a stream for capture at M={m} raised {type(e).__name__}: {e}; "
                                     "captured calls on that stream use torch")

        return prepare

    def disable(self, bound: Bound, device: torch.device, exc: Exception) -> None:
        """``bound`` raised at run time: its calls take their fallback from now on (one warning)."""
        why = f"raised at run time ({type(exc).__name__}: {exc})"
        with self._lock:
            if bound.fn is None:
                return  # several calls failed at once: one warning
            bound.fn, bound.error = None, why
        self.on_disable(bound)
        logger.warning("sglang-fp32gemm: kernel %s %s on %s %s; its calls use torch from now on",
                       bound.backend, bound.kernel_name, device, why)

    def all(self) -> list[Bound]:
        with self._lock:
            return list(self._bound.values())
