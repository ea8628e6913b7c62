"""The interface every fast backend implements; the router reaches no further into a backend.

``parse`` is pure and import-free (start-up runs it on every row, so a bad
name is an error naming file:line); ``bind`` does everything once, outside
graph capture, and returns the hot path. Before it calls a bound ``fn`` the
router guarantees: ``x`` is [M, K] bf16 with unit stride along K, ``w`` a
contiguous [N, K] bf16 on the same device, N and K the bound ones, 1 <= M <=
``MAX_M``. ``fn`` returns a new fp32 [M, N] tensor and may raise (the router
then falls back); each bound kernel is probed before its first use.

A ``fn`` whose captured calls need per-stream state made outside capture
(the Triton kernels' flag buffers) has ``fn.prepare(m)``: make that state for
the current stream at M. The router calls it on the eager calls that the
eager table sends to another kernel, so that the graph captured after them on
the same stream finds it (docs/design.md, "Routing").
"""

from __future__ import annotations

import abc
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:  # pragma: no cover
    import torch

Verdict = tuple[bool, str]
OK: Verdict = (True, "ok")
KernelFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]

#: Largest M any table row may name; larger calls are never looked up.
MAX_M = 256


class NotReadyInCapture(RuntimeError):
    """A bound kernel met something new inside CUDA-graph capture; the router falls back for that call only."""


class Backend(abc.ABC):
    """A fast fp32-output GEMM: out[M, N] fp32 = x[M, K] @ w[N, K]^T."""

    #: Short name used in logs, counters and ``explain``.
    name: str = "?"
    #: The CSV ``libtype`` whose rows this backend serves.
    libtype: str = "?"
    #: Never run by this project on its hardware: the first probe of each kernel runs in a child process.
    isolated_probe: bool = False
    #: Whether an eager call costs less host time than torch.mm; False: eager calls of its rows
    #: take another row's kernel (``routes.py``), captured calls still run it.
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
        """``fn(x, w) -> out`` for this config, device, N and K; compile and allocate here, not in ``fn``."""

    def candidates(self, m: int, n: int, k: int) -> list[Any]:
        """Configs the tuner should time for this shape (default: none)."""
        return []

    def ctas(self, cfg: Any, m: int, n: int, k: int) -> Optional[int]:
        """Thread blocks one [m, k] x [n, k] call launches (how many SMs it can hold), None where not known.
        The region rank offers each backend's lightest forms: beside other streams they can add less."""
        return None

    def kernel_name(self, cfg: Any) -> str:
        """The kernelName that ``parse`` reads back to ``cfg`` (round trip)."""
        return cfg.name

    def source_tag(self, cfg: Any) -> str:
        """What the on-disk probe verdict is keyed by (kernel source, versions)."""
        return ""

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


# -- what several backends ask of the machine ---------------------------------------------------------
def sha12(data: bytes) -> str:
    """The first 12 hex digits of ``data``'s sha256: how the project tags a source (kernel files, kernel
    text, the vLLM peer's split-K file)."""
    return hashlib.sha256(data).hexdigest()[:12]


def dist_version(*names: str) -> Optional[str]:
    """The installed version of the first of ``names`` that has one; else None."""
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except Exception:  # not installed, or broken metadata
            continue
    return None


def file_source_tag(kernel_file: Path, dist: str, label: str) -> str:
    """``<sha256 of kernel_file, 12 hex>-<label><installed version of dist, or none>`` (import-free): what a
    backend's on-disk probe verdicts are keyed by."""
    return f"{sha12(kernel_file.read_bytes())}-{label}{dist_version(dist) or 'none'}"


def nvidia_capability() -> tuple[Optional[tuple[int, int]], str]:
    """(the current CUDA device's compute capability, "") or (None, why a CUDA-only kernel cannot run)."""
    import torch

    if not torch.cuda.is_available():
        return None, "no CUDA device"
    if getattr(torch.version, "hip", None):
        return None, "ROCm build of torch (the kernel is CUDA-only)"
    return torch.cuda.get_device_capability(), ""


def bind_device(cfg: Any, device: Any, k: int, *widths: int, cuda_only: bool = False) -> "torch.device":
    """The device a ``bind`` compiles for, once ``cfg`` takes every width at (M=1, K) (ValueError saying why
    not): a CUDA device without an index gets the current one; ``cuda_only``: another device is a RuntimeError."""
    import torch

    for n in widths:
        ok, why = cfg.check_shape(1, n, k)
        if not ok:
            raise ValueError(why)
    device = torch.device(device)
    if device.type != "cuda":
        if cuda_only:
            raise RuntimeError(f"device {device} is not CUDA")
        return device
    return torch.device("cuda", torch.cuda.current_device()) if device.index is None else device


def sm90_or_later() -> bool:
    """Whether a CUDA device of sm90 or later is present: programmatic dependent launch (PDL) forms are offered."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
