"""The interface every fast backend implements.

A backend serves the table rows of one ``libtype``. The router resolves a
call in three steps and never reaches further into a backend:

1. ``available()`` -> (ok, reason): once per process (imports, hardware).
2. ``parse(kernelName)`` -> a frozen config (raises ``ValueError`` saying
   what is wrong). Pure and import-free: start-up runs it on every row, so a
   bad name is an error naming file:line, not a quiet fallback later.
   ``supports(cfg, m, n, k)`` -> (ok, reason): whether the config takes this
   shape. ``deterministic(cfg)``: whether its result is independent of
   scheduling (no floating-point atomics).
3. ``bind(cfg, device, n, k)`` -> ``fn(x, w) -> out``: compile, allocate and
   look up everything once, outside graph capture. The returned callable is
   the hot path.

What the router guarantees before it calls a bound ``fn``: ``x`` is
[M, K] bf16 with unit stride along K, ``w`` is a contiguous [N, K] bf16 on
the same device, K and N are the bound ones, 1 <= M <= ``MAX_M``. ``fn``
returns a new fp32 [M, N] tensor and may raise; the router then falls back.
Each bound kernel is probed against the float64-exact fallback before its
first use.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    import torch

Verdict = tuple[bool, str]
OK: Verdict = (True, "ok")
KernelFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]

#: Largest M any table row may name; larger calls are never looked up.
MAX_M = 256


class NotReadyInCapture(RuntimeError):
    """A bound kernel met something new inside CUDA-graph capture (a stream
    without its workspace, an M not compiled yet) and cannot set it up there.
    The router takes the fallback for that call, without disabling the kernel.
    """


class Backend(abc.ABC):
    """A fast fp32-output GEMM: out[M, N] fp32 = x[M, K] @ w[N, K]^T."""

    #: Short name used in logs, counters and ``explain``.
    name: str = "?"
    #: The CSV ``libtype`` whose rows this backend serves.
    libtype: str = "?"
    #: True when this project has never run the backend's kernels on their
    #: hardware: the first probe of each kernel runs in a child process, so
    #: a GPU fault or hang there cannot take SGLang down.
    isolated_probe: bool = False
    #: Whether an eager call (not under CUDA-graph capture) costs less host
    #: time than torch.mm. False: eager calls of its rows go to the nearest
    #: row of the shape whose backend is eager_ok (``routes.py``); captured
    #: calls still run it, so the router runs it once at each M as it resolves
    #: that M (outside capture), for whatever it sets up per M.
    eager_ok: bool = True

    @abc.abstractmethod
    def available(self) -> Verdict:
        """Whether the backend can run in this process (imports, hardware)."""

    @abc.abstractmethod
    def parse(self, kernel_name: str) -> Any:
        """The frozen config a kernelName names; ``ValueError`` if it names none."""

    def deterministic(self, cfg: Any) -> bool:
        """Same inputs, same bits, whatever the scheduling. Default: no."""
        return False

    @abc.abstractmethod
    def supports(self, cfg: Any, m: int, n: int, k: int) -> Verdict:
        """Whether ``cfg`` takes an [m, k] x [n, k] call. Cheap, no device work."""

    @abc.abstractmethod
    def bind(self, cfg: Any, device: "torch.device", n: int, k: int) -> KernelFn:
        """A callable ``fn(x, w) -> out`` for this config, device, N and K.

        Runs outside graph capture, once per (config, device, N, K): compile,
        allocate workspaces, resolve launchers here, not in ``fn``.
        """

    def candidates(self, m: int, n: int, k: int) -> list[Any]:
        """Configs the tuner should time for this shape (default: none)."""
        return []

    def kernel_name(self, cfg: Any) -> str:
        """The kernelName that ``parse`` reads back to ``cfg`` (round trip)."""
        return cfg.name

    def source_tag(self, cfg: Any) -> str:
        """What the on-disk probe verdict is keyed by (kernel source, versions)."""
        return ""

    def __repr__(self) -> str:
        return f"<backend {self.name}>"
