"""One way for a long tool run to stop early and keep what it finished: ``Budget`` knows the deadline
(``--budget-s``) and turns SIGTERM into the same ``Stop``, raised between measurements.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Iterator, Optional


class Stop(BaseException):
    """The budget is spent or SIGTERM arrived: finish writing, measure nothing more.

    A BaseException, so that the ``except Exception`` around one kernel's check or timing lets it through.
    """


class Budget:
    def __init__(self, seconds: Optional[float] = None) -> None:
        self.t0 = time.monotonic()
        self.seconds = seconds or None
        self.deadline = self.t0 + seconds if seconds else None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> Optional[float]:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def at(self, share: float) -> Optional[float]:
        """The monotonic time when ``share`` of the budget is spent (None without a budget)."""
        return None if self.seconds is None else self.t0 + self.seconds * share

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def check(self) -> None:
        """Raise ``Stop`` once the deadline has passed."""
        if self.expired():
            raise Stop(f"budget of {self.seconds:.0f}s reached")

    @contextlib.contextmanager
    def sigterm(self) -> Iterator[None]:
        """While inside, SIGTERM raises ``Stop`` (main thread only: signals cannot be set elsewhere)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def _stop(_sig, _frame):
            raise Stop(f"SIGTERM after {self.elapsed():.0f}s")

        old = signal.signal(signal.SIGTERM, _stop)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, old)
