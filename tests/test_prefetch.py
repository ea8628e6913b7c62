"""tests/prefetch.py: a queued subprocess's result is the one the test gets, taken once."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from prefetch import Prefetcher, job_key

ENV = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"}
# Each run prints a fresh value: equal outputs mean the same run.
SCRIPT = "import os, sys; print(os.urandom(8).hex()); print('err', file=sys.stderr); sys.exit(3)"


def _argv(script: str = SCRIPT) -> list[str]:
    return [sys.executable, "-c", script]


@pytest.fixture
def pf():
    p = Prefetcher(workers=2)
    yield p
    p.close()


def test_a_queued_run_is_taken_once_then_the_command_runs_again(pf, tmp_path):
    pf.start(_argv(), env=ENV, cwd=tmp_path, timeout=60)
    first = pf.run(_argv(), env=ENV, cwd=tmp_path, timeout=60)
    assert first.returncode == 3 and first.stderr == "err\n" and len(first.stdout.strip()) == 16
    second = pf.run(_argv(), env=ENV, cwd=tmp_path, timeout=60)
    assert second.returncode == 3 and second.stdout != first.stdout


def _wait_for(path, seconds: float = 60) -> None:
    end = time.time() + seconds
    while not path.exists():
        assert time.time() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_the_queued_run_happens_before_the_test_asks(pf, tmp_path):
    done = tmp_path / "done"
    script = f"import os; print(os.urandom(8).hex()); open({str(done)!r}, 'w').close()"
    pf.start(_argv(script), env=ENV, cwd=tmp_path, timeout=60)
    _wait_for(done)  # it ran with nobody asking
    done.unlink()
    assert len(pf.run(_argv(script), env=ENV, cwd=tmp_path, timeout=60).stdout.strip()) == 16
    assert not done.exists()  # the test got the queued run's result: no second run


def test_another_environment_or_folder_is_another_command(pf, tmp_path):
    pf.start(_argv(), env=ENV, cwd=tmp_path, timeout=60)
    queued_key = job_key(_argv(), ENV, tmp_path)
    assert job_key(_argv(), {**ENV, "X": "1"}, tmp_path) != queued_key
    assert job_key(_argv(), ENV, tmp_path / "sub") != queued_key
    # pytest's per-test variable is not part of a command's identity.
    assert job_key(_argv(), {**ENV, "PYTEST_CURRENT_TEST": "t"}, tmp_path) == queued_key
    other = pf.run(_argv(), env={**ENV, "X": "1"}, cwd=tmp_path, timeout=60)
    queued = pf.run(_argv(), env=ENV, cwd=tmp_path, timeout=60)
    assert other.stdout != queued.stdout


def test_a_timeout_kills_the_run_and_keeps_its_output(pf, tmp_path):
    hang = "import time; print('started', flush=True); time.sleep(60)"
    pf.start(_argv(hang), env=ENV, cwd=tmp_path, timeout=2)
    with pytest.raises(subprocess.TimeoutExpired) as e:
        pf.run(_argv(hang), env=ENV, cwd=tmp_path, timeout=2)
    assert e.value.stdout == "started\n"


def test_close_kills_what_runs_and_drops_what_waits(tmp_path):
    pf = Prefetcher(workers=1)
    started, marker = tmp_path / "started", tmp_path / "ran"
    pf.start(_argv(f"import time; open({str(started)!r}, 'w').close(); time.sleep(60)"), env=ENV, cwd=tmp_path,
             timeout=120)
    pf.start(_argv(f"open({str(marker)!r}, 'w').close()"), env=ENV, cwd=tmp_path, timeout=120)
    _wait_for(started)
    t0 = time.time()
    pf.close()
    assert time.time() - t0 < 30
    assert not marker.exists()
