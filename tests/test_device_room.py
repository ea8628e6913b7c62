"""scripts/device_room.sh: what a device call does not read moves out of a clone's work tree and comes back whole."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT


def _run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=120)


def test_out_keeps_what_device_scripts_read_and_back_restores_the_tree(tmp_path):
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: the script moves tracked files")
    clone, room = tmp_path / "r", tmp_path / "room"
    assert _run("git", "clone", "-q", str(REPO_ROOT), str(clone), cwd=tmp_path).returncode == 0
    h200 = clone / "docs/benchmarks/h200"
    before = {p.relative_to(clone) for p in h200.rglob("*") if p.is_file()}
    prose = [clone / "docs/benchmarks/README.md", clone / "docs/design.md"]
    assert all(p.exists() for p in prose)
    out = _run("bash", "scripts/device_room.sh", "out", cwd=clone, DEVICE_ROOM=str(room))
    assert out.returncode == 0, out.stderr
    left = {p.relative_to(clone) for p in h200.rglob("*") if p.is_file()}
    moved = before - left
    kept = (".jsonl.gz", ".csv", ".sh", ".py")
    logs = {p for p in moved if p.name.endswith(".jsonl.gz")}
    assert moved and all(not p.name.endswith(kept) for p in moved - logs)
    # The records a test reads stay whole (tests/test_ab_tools.py: run 35's serial tune summaries; a device call
    # running the suite failed on them once, run 37c); every other report goes, the newest runs' too.
    read = {p for p in left if p.parent.name == "s_tune" and p.parent.parent.name.startswith(("35d_", "35e_"))}
    assert {p.name for p in read} >= {"summary.json", "tune.txt"} and len({p.parent for p in read}) == 2, read
    assert all(p.name.endswith(kept) for p in left - read)
    assert (h200 / "tune_log.jsonl.gz").exists() and (h200 / "run18/sm90_run17_rows.csv").exists()
    # A tune log stays where a tracked script names its path under h200 (the device scripts' --tune-log).
    assert (h200 / "run16/tune_log_serial_16b.jsonl.gz").exists() and (h200 / "run17/tune_log_17b.jsonl.gz").exists()
    scripts = "".join(p.read_text() for p in clone.rglob("*") if p.suffix in (".sh", ".py") and ".git" not in p.parts
                      and p.is_file())
    h200_rel = "docs/benchmarks/h200/"
    assert logs and not any(str(p)[len(h200_rel):] in scripts for p in logs)
    assert all(str(p)[len(h200_rel):] in scripts for p in left - read if p.name.endswith(".jsonl.gz"))
    assert not any(p.exists() for p in prose)  # the Markdown under docs/ is out too
    again = _run("bash", "scripts/device_room.sh", "out", cwd=clone, DEVICE_ROOM=str(room))
    assert again.returncode == 1 and "already out" in again.stderr
    back = _run("bash", "scripts/device_room.sh", "back", cwd=clone, DEVICE_ROOM=str(room))
    assert back.returncode == 0, back.stderr
    assert {p.relative_to(clone) for p in h200.rglob("*") if p.is_file()} == before
    assert all(p.exists() for p in prose)
    assert _run("git", "status", "--porcelain", cwd=clone).stdout == ""
