"""Slow subprocesses started in the background as soon as the session's tests are known.

Most of the suite's time is fresh interpreters importing torch and SGLang
(about 10 s each on two cores) while the test process waits with one core
idle. A test module may define ``prefetch_subprocesses(items)``; conftest calls
it once after collection with that module's selected items, and it calls
``PREFETCH.start(key, argv, ...)`` for the subprocesses those tests will read.
The test itself then calls ``PREFETCH.run(key, argv, ...)``: the prefetched
result if one was started (waiting for it if needed), else it runs right then,
so a test gets the same ``CompletedProcess`` either way. Each key runs at most
once per session.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

# One core stays with the test process; at least one background runner.
WORKERS = max(1, min(4, (os.cpu_count() or 2) - 1))


class Prefetcher:
    """A queue of subprocesses, run ``workers`` at a time in the order they were started."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prefetch")
        self._futures: dict[object, Future] = {}
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self, key: object, argv: Sequence[str], *, env: dict[str, str], cwd: str | os.PathLike,
              timeout: float) -> None:
        """Queue ``argv`` under ``key`` (a second start of the same key is ignored)."""
        with self._lock:
            if self._closed or key in self._futures:
                return
            self._futures[key] = self._pool.submit(self._run, list(argv), env, str(cwd), timeout)

    def run(self, key: object, argv: Sequence[str], *, env: dict[str, str], cwd: str | os.PathLike,
            timeout: float) -> subprocess.CompletedProcess:
        """The result for ``key``: the prefetched one, or ``argv`` run now. Raises what the run raised
        (subprocess.TimeoutExpired after ``timeout`` seconds of the process's own run time)."""
        with self._lock:
            fut = self._futures.get(key)
        if fut is None:
            return self._run(list(argv), env, str(cwd), timeout)
        return fut.result()

    def _run(self, argv: list[str], env: dict[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
        # Files, not pipes: nobody reads a background process's pipes while it runs.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            with self._lock:
                if self._closed:
                    raise RuntimeError("prefetcher closed before this subprocess started")
                proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env, cwd=cwd)
                self._running.add(proc)
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            finally:
                with self._lock:
                    self._running.discard(proc)
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(argv, rc, out.read(), err.read())

    def close(self) -> None:
        """Drop what has not started and kill what runs (a session stopped early by -x or Ctrl-C)."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in running:
            proc.kill()
        self._pool.shutdown(wait=True)


PREFETCH = Prefetcher()


def module_items(items: Sequence) -> dict:
    """The session's items grouped by their test module (items without one are left out)."""
    by_module: dict = {}
    for item in items:
        mod = getattr(item, "module", None)
        if mod is not None:
            by_module.setdefault(mod, []).append(item)
    return by_module

