"""What the router tells: each message once, and how many calls went where, keyed by (route,
kernelName or fallback reason); a kernel disabled at run time counts its later calls under the reason.
"""

from __future__ import annotations

import logging
import threading
logger = logging.getLogger(__name__)

Key = tuple[str, str]


class Telemetry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self._counts: dict[Key, int] = {}

    def once(self, level: int, msg: str) -> None:
        """Log ``msg`` the first time it is said in this process's router."""
        if msg in self._logged:
            return
        with self._lock:
            if msg in self._logged:
                return
            self._logged.add(msg)
        logger.log(level, "%s", msg)

    def count(self, key: Key) -> bool:
        """Count one call under ``key``; True for the key's first call."""
        with self._lock:
            n = self._counts.get(key, 0)
            self._counts[key] = n + 1
        return n == 0

    def recount(self, counted: Key, instead: Key) -> None:
        """One call counted under ``counted`` took ``instead`` (a kernel that fell back after it was counted)."""
        with self._lock:
            n = self._counts.get(counted, 0)
            if n > 1:
                self._counts[counted] = n - 1
            elif n == 1:
                del self._counts[counted]
            self._counts[instead] = self._counts.get(instead, 0) + 1

    def counters(self) -> dict[Key, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
