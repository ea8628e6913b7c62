"""The small interface every fast backend implements.

Routing asks three questions and never reaches further into a backend:
``available()`` (can it run in this process at all), ``supports(x, w, row)``
(does it take this call) and ``run(x, w, row)``. The first two answer
``(ok, reason)`` so that every rejection can be logged once, with its reason.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from sglang_fp32gemm.table import TunedRow

Verdict = tuple[bool, str]
OK: Verdict = (True, "ok")


class Backend(abc.ABC):
    """A fast fp32-output GEMM: out[M, N] fp32 = x[M, K] @ w[N, K]^T."""

    #: Short name used in logs, counters and ``explain``.
    name: str = "?"
    #: The CSV ``libtype`` whose rows this backend serves.
    libtype: str = "?"

    @abc.abstractmethod
    def available(self) -> Verdict:
        """Whether the backend can run in this process (imports, hardware)."""

    @abc.abstractmethod
    def supports(self, x: "torch.Tensor", w: "torch.Tensor", row: "TunedRow") -> Verdict:
        """Whether this call (shapes, dtypes, layout, the row's kernelName) is taken.

        Must be cheap and must not synchronise the device: it runs once per
        distinct call signature and its answer is cached by the router.
        """

    @abc.abstractmethod
    def run(self, x: "torch.Tensor", w: "torch.Tensor", row: "TunedRow") -> "torch.Tensor":
        """Return a new fp32 tensor [M, N]. May raise; the router falls back."""

    def prepare(self, device: "torch.device", rows: "list[TunedRow]") -> None:
        """Optional one-time set-up per device (workspaces), outside graph capture."""

    def __repr__(self) -> str:
        return f"<backend {self.name}>"
