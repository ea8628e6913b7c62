"""What the router tells: each message once, and how many calls went where, keyed by (route,
kernelName or fallback reason); a kernel disabled at run time counts its later calls under the reason.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

logger = logging.getLogger(__name__)

Key = tuple[str, str]


class _ThreadCounts(threading.local):
    #: This thread's counts (a class default: reading it costs no exception before the first count).
    counts: Optional[dict[Key, int]] = None


class Telemetry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        # Each thread counts into its own dict, without a lock (a lock costs the hot path as much as the
        # rest of the count on the H200 machine's CPU); counters() sums them.
        self._local = _ThreadCounts()
        self._all: list[dict[Key, int]] = []

    def once(self, level: int, msg: str) -> None:
        """Log ``msg`` the first time it is said in this process's router."""
        if msg in self._logged:
            return
        with self._lock:
            if msg in self._logged:
                return
            self._logged.add(msg)
        logger.log(level, "%s", msg)

    def _mine(self) -> dict[Key, int]:
        d = self._local.counts
        if d is None:
            d = self._local.counts = {}
            with self._lock:
                self._all.append(d)
        return d

    def count(self, key: Key) -> bool:
        """Count one call under ``key``; True for this thread's first call under it."""
        d = self._local.counts
        if d is None:
            d = self._mine()
        n = d.get(key, 0)
        d[key] = n + 1
        return n == 0

    def recount(self, counted: Key, instead: Key) -> None:
        """One call this thread counted under ``counted`` took ``instead`` (a kernel that fell back after
        it was counted)."""
        d = self._mine()
        n = d.get(counted, 0)
        if n > 1:
            d[counted] = n - 1
        elif n == 1:
            del d[counted]
        d[instead] = d.get(instead, 0) + 1

    def counters(self) -> dict[Key, int]:
        """(route, kernelName or reason) -> calls, over every thread."""
        out: dict[Key, int] = {}
        with self._lock:
            for d in self._all:
                for key, n in dict(d).items():  # a copy: its thread may be counting
                    out[key] = out.get(key, 0) + n
        return out

    def reset(self) -> None:
        with self._lock:
            for d in self._all:
                d.clear()
