"""scripts/device_carries.sh: the device carries made from the guide's tools, listed once in .git/info/exclude."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts/device_carries.sh"


def _run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=dict(os.environ, **env), capture_output=True,
                          text=True, timeout=60)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git/info").mkdir(parents=True)
    return repo


def _tools(tmp_path: Path) -> Path:
    """Stand-ins for ../shared/tools: each `pack FOLDER` writes its own text into FOLDER."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("cutedsl_carry.sh", "vllm_ll_carry.sh"):
        (tools / name).write_text('# packs vllm 0.33.0\nmkdir -p "$2"; cat "$0" > "$2/packed_by"\n')
    return tools


def test_makes_the_named_carries_and_lists_each_once_in_the_exclude_file(tmp_path):
    repo, tools = _repo(tmp_path), _tools(tmp_path)
    for _ in range(2):
        r = _run("cutedsl", "vllm_ll", cwd=repo, SHARED_TOOLS=str(tools))
        assert r.returncode == 0, r.stderr
    assert (repo / ".cutedsl/packed_by").read_text().startswith("# packs vllm 0.33.0")
    # vLLM's carry is packed from 0.34.0 (the peer moved), the shared tool naming 0.33.0.
    assert "0.34.0" in (repo / ".vllm_ll/packed_by").read_text()
    assert "0.33.0" not in (repo / ".vllm_ll/packed_by").read_text()
    lines = (repo / ".git/info/exclude").read_text().splitlines()
    assert sorted(lines) == ["/.cutedsl/", "/.vllm_ll/"]


def test_with_no_name_it_makes_only_what_is_missing(tmp_path):
    repo, tools = _repo(tmp_path), _tools(tmp_path)
    (repo / ".devsite").mkdir()  # present: no download is tried
    (repo / ".vllm_ll").mkdir()
    r = _run(cwd=repo, SHARED_TOOLS=str(tools))
    assert r.returncode == 0, r.stderr
    assert (repo / ".cutedsl/packed_by").exists() and not (repo / ".vllm_ll/packed_by").exists()
    r = _run(cwd=repo, SHARED_TOOLS=str(tools))
    assert r.returncode == 0 and "all here" in r.stdout


def test_bad_calls_say_what_is_wrong(tmp_path):
    repo = _repo(tmp_path)
    r = _run("cutedsl", cwd=tmp_path)
    assert r.returncode == 2 and "repository root" in r.stderr
    r = _run("flydsl", cwd=repo)
    assert r.returncode == 2 and "unknown carry 'flydsl'" in r.stderr
    r = _run("cutedsl", cwd=repo, SHARED_TOOLS=str(tmp_path / "nowhere"))
    assert r.returncode == 2 and str(tmp_path / "nowhere/cutedsl_carry.sh") in r.stderr
    assert not (repo / ".cutedsl").exists()
