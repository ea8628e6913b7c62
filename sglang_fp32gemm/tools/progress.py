"""Progress of tune and the long bench modes on stderr: shapes done, candidates timed, time left.

A tqdm bar on a terminal; otherwise one plain line every few seconds or percent, readable in a log.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO


class Progress:
    def __init__(self, total: int, label: str, *, stream: Optional[TextIO] = None, every_s: float = 5.0,
                 every_pct: float = 10.0, left_s: Optional[Callable[[], Optional[float]]] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.label = max(0, int(total)), label
        self.done = self.timed = 0
        self.stream = stream if stream is not None else sys.stderr
        self.every_s, self.every_pct = every_s, every_pct
        self._budget_left = left_s
        self._clock = clock
        self.t0 = self._last_t = clock()
        self._last_pct = 0.0
        self._bar: Any = None
        try:
            tty = bool(self.stream.isatty())
        except Exception:
            tty = False
        if tty:
            try:
                from tqdm import tqdm  # lazily: only a terminal run needs it
            except Exception:  # not installed: the plain counter
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=self.total, desc=label, unit="shape", file=self.stream, leave=False,
                                 dynamic_ncols=True)

    def left_s(self) -> Optional[float]:
        """Seconds left: the pace so far over the shapes left, capped by the budget's end."""
        est = None
        if self.done:
            est = (self._clock() - self.t0) / self.done * (self.total - self.done)
        cap = self._budget_left() if self._budget_left else None
        if cap is not None:
            est = cap if est is None else min(est, cap)
        return est

    def line(self) -> str:
        left = self.left_s()
        return (f"{self.label}: {self.done}/{self.total} shapes, {self.timed} candidates timed, "
                f"{self._clock() - self.t0:.0f}s elapsed, " + ("time left unknown" if left is None
                                                               else f"~{left:.0f}s left"))

    def update(self, shapes: int = 1, timed: int = 0) -> None:
        self.done += shapes
        self.timed += timed
        if self._bar is not None:
            self._bar.update(shapes)
            self._bar.set_postfix_str(f"{self.timed} timed")
            return
        now = self._clock()
        pct = 100.0 * self.done / self.total if self.total else 100.0
        if self.done >= self.total or now - self._last_t >= self.every_s or pct - self._last_pct >= self.every_pct:
            self._last_t, self._last_pct = now, pct
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
