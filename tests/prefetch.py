"""Slow subprocesses started in the background as soon as the session's tests are known.

Most of the suite's time is fresh interpreters importing torch and SGLang
(about 10 s each on two cores) while the test process waits with a core idle.
A test module may define ``prefetch_subprocesses(items)``: conftest calls it
once after collection with that module's selected items, and it queues the
subprocesses those tests will run with ``PREFETCH.start(...)`` (or conftest's
``start_python``). A test then calls ``PREFETCH.run(...)`` (or ``run_python``)
with the same arguments: it takes the queued run's result, waiting for it if
needed, or, where none was queued, runs the command right then. Either way the
test gets the same ``CompletedProcess``. A queued run is taken once: a second
identical call runs again.

Queue only self-contained commands: a queued one runs before the test, so it
must not read anything the test writes first.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Hashable, Sequence

# The cores the test process leaves free: more runners than cores only slow
# each other down (torch's threads spin while they wait for a core).
WORKERS = max(1, min(4, (os.cpu_count() or 2) - 1))
# Set by pytest during each test, absent at collection: not part of a command's identity.
_VOLATILE_ENV = ("PYTEST_CURRENT_TEST",)


def job_key(argv: Sequence[str], env: dict[str, str], cwd: str | os.PathLike) -> Hashable:
    """What identifies a command: its argv, environment and working folder."""
    return (tuple(argv), tuple(sorted((k, v) for k, v in env.items() if k not in _VOLATILE_ENV)), str(cwd))


class Prefetcher:
    """A queue of subprocesses, run ``workers`` at a time in the order they were queued."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prefetch")
        self._futures: dict[Hashable, Future] = {}
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self, argv: Sequence[str], *, env: dict[str, str], cwd: str | os.PathLike, timeout: float,
              key: Hashable | None = None) -> None:
        """Queue ``argv`` (once per ``key``, by default ``job_key(argv, env, cwd)``)."""
        key = job_key(argv, env, cwd) if key is None else key
        with self._lock:
            if self._closed or key in self._futures:
                return
            self._futures[key] = self._pool.submit(self._run, list(argv), env, str(cwd), timeout)

    def run(self, argv: Sequence[str], *, env: dict[str, str], cwd: str | os.PathLike, timeout: float,
            key: Hashable | None = None) -> subprocess.CompletedProcess:
        """The queued run's result for this command (taken once), or the command run now.

        Raises what the run raised: subprocess.TimeoutExpired after ``timeout`` seconds of its own run."""
        key = job_key(argv, env, cwd) if key is None else key
        with self._lock:
            fut = self._futures.pop(key, None)
        if fut is None:
            return self._run(list(argv), env, str(cwd), timeout)
        return fut.result()

    def _run(self, argv: list[str], env: dict[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
        # Files, not pipes: nobody reads a background process's pipes while it runs.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the session is over: subprocess not started")
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                                        env=env, cwd=cwd)
                self._running.add(proc)
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired as e:
                proc.kill()
                proc.wait()
                out.seek(0)
                err.seek(0)
                e.stdout, e.stderr = out.read(), err.read()
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
