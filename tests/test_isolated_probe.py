"""A kernel's first probe in a child process: faults, hangs and wrong results disable it; passes are cached.

The fake backends (``fakes/probe_fakes.py``) run on the CPU; the child
finds them through the resolver ``fakes.probe_fakes:by_name`` (a test hook:
it is not part of the verdict key, so every test uses its own cache dir). Each child
that binds a kernel appends a line to a count file, so the tests can tell a
cache hit (no child ran the kernel) from a fresh probe.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from conftest import TESTS_DIR
from fakes import probe_fakes
from sglang_fp32gemm import settings as S
from sglang_fp32gemm.backends import isolated_probe as P
from sglang_fp32gemm.backends import probe_child as C
from sglang_fp32gemm.backends import verdict_cache as V

RESOLVER = "fakes.probe_fakes:by_name"
SHAPE = (4, 32, 64)
OK_TIMEOUT = 120.0   # a child that imports torch on a busy 2-core machine
HANG_TIMEOUT = 4.0


@pytest.fixture
def probe_env(tmp_path, monkeypatch):
    """Child can import the fakes; a fresh cache dir and count file; returns (cache dir, count file)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p))
    cache = tmp_path / "cache"
    count = tmp_path / "count.txt"
    monkeypatch.setenv(S.PROBE_CACHE_VAR, str(cache))
    monkeypatch.setenv(probe_fakes.COUNT_VAR, str(count))
    monkeypatch.setenv(probe_fakes.TAG_VAR, "tag-1")
    return cache, count


@pytest.fixture(scope="session")
def kept_pass(shared_report, tmp_path_factory) -> Path:
    """A cache dir holding one pass of "pass" at SHAPE, tag-1, made by a real child once per test run."""

    def produce() -> str:
        root = tmp_path_factory.mktemp("kept-pass")
        cache, count = root / "cache", root / "count.txt"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p))
            mp.setenv(S.PROBE_CACHE_VAR, str(cache))
            mp.setenv(probe_fakes.COUNT_VAR, str(count))
            mp.setenv(probe_fakes.TAG_VAR, "tag-1")
            r = _probe("pass")
        assert r.ok and "cached" not in r.detail and _children(count) == 1 and len(_cached(cache)) == 1, r
        return str(cache)

    return Path(shared_report("isolated-probe-kept-pass", produce))


@pytest.fixture
def kept_pass_env(probe_env, kept_pass):
    """probe_env whose cache already holds a pass for "pass" (copied, modes kept; no child has run yet)."""
    cache, count = probe_env
    shutil.copytree(kept_pass, cache)
    (entry,) = cache.glob("*.json")
    assert V.read(entry, json.loads(entry.read_bytes())["key"]).ok  # trusted here, as if made here
    return cache, count


def _probe(kernel: str, timeout: float = OK_TIMEOUT, **kw):
    m, n, k = SHAPE
    return P.probe_in_child("probefake", kernel, "cpu", m, n, k, timeout, resolver=RESOLVER, **kw)


def _children(count) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


def _cached(cache) -> list:
    return sorted(p.name for p in cache.glob("*.json")) if cache.exists() else []


def test_a_correct_kernel_passes_and_the_pass_is_cached(probe_env):
    cache, count = probe_env
    r = _probe("pass")
    assert r.ok and r.rel_err <= 1e-5 and r.shape == SHAPE, r
    assert _children(count) == 1 and len(_cached(cache)) == 1
    again = _probe("pass")
    assert again.ok and "cached" in again.detail, again
    assert _children(count) == 1  # no second child


def test_a_changed_source_tag_misses_the_cache(kept_pass_env, monkeypatch):
    cache, count = kept_pass_env
    assert "cached" in _probe("pass").detail and _children(count) == 0  # tag-1: the kept pass
    monkeypatch.setenv(probe_fakes.TAG_VAR, "tag-2")  # the kernel source changed
    r = _probe("pass")
    assert r.ok and "cached" not in r.detail
    assert _children(count) == 1 and len(_cached(cache)) == 2


@pytest.mark.parametrize("kernel, words", [
    ("bf16", "above fp32 tolerance"),
    ("exit139", "child process exited with code 139"),
    ("abort", "child process killed by SIGABRT (signal 6)"),
    ("raise", "raised RuntimeError: launch failed: invalid device function"),
    ("wrong_shape", "returned (4, 31) torch.float32, expected (4, 32) torch.float32"),
    ("half_written", "call 1"),
])
def test_a_faulty_kernel_fails_the_parent_survives_and_nothing_is_cached(probe_env, kernel, words):
    cache, count = probe_env
    r = _probe(kernel)
    assert not r.ok and words in r.detail, r
    assert r.shape == SHAPE
    if kernel == "bf16":
        assert 1e-4 < r.rel_err < 1e-2  # bf16-level, measured against float64
    assert _children(count) == 1 and _cached(cache) == []
    # The parent is alive and its torch still works; a second probe runs a child again.
    assert torch.equal(torch.ones(2) + 1, torch.full((2,), 2.0))
    if kernel == "exit139":  # a failure is never cached: the next start probes again
        assert not _probe(kernel).ok and _children(count) == 2


def test_a_hanging_kernel_is_killed_after_the_timeout(probe_env):
    cache, count = probe_env
    t0 = time.monotonic()
    r = _probe("sleep", timeout=HANG_TIMEOUT)
    elapsed = time.monotonic() - t0
    assert not r.ok and r.detail.startswith(f"hung for {HANG_TIMEOUT:g}s"), r
    assert elapsed < HANG_TIMEOUT + 10, elapsed
    assert _cached(cache) == []


def test_an_unknown_kernel_or_backend_fails_without_a_child(probe_env):
    cache, count = probe_env
    r = _probe("no_such_kernel")
    assert not r.ok and "is not one of" in r.detail
    m, n, k = SHAPE
    r = P.probe_in_child("nobackend", "pass", "cpu", m, n, k, OK_TIMEOUT, resolver=RESOLVER)
    assert not r.ok and "no backend named 'nobackend'" in r.detail
    r = P.probe_in_child("probefake", "pass", "cpu", m, n, k, OK_TIMEOUT, resolver="no.such.module:by_name")
    assert not r.ok and "ModuleNotFoundError" in r.detail
    assert _children(count) == 0 and _cached(cache) == []


def test_corrupt_or_foreign_cache_entries_are_ignored(kept_pass_env):
    cache, count = kept_pass_env
    (entry,) = cache.glob("*.json")
    good = entry.read_bytes()
    fields = json.loads(good)["key"]
    assert V.read(entry, fields).ok

    def edited(**result) -> bytes:
        d = json.loads(good)
        d["result"].update(result)
        return json.dumps(d).encode()

    for data in (b"{not json", b"[1, 2]", json.dumps({"key": {"other": 1}, "result": {"ok": True}}).encode(),
                 b"\xff\xfe\x00", b"", edited(ok=False), edited(ok="yes"), edited(rel_err=0.5),
                 edited(rel_err=None), edited(shape=[4, 32])):
        entry.write_bytes(data)
        assert V.read(entry, fields) is None, data
    entry.unlink()
    entry.mkdir()  # not even a file
    assert V.read(entry, fields) is None
    entry.rmdir()
    elsewhere = entry.parent.parent / "elsewhere.json"
    elsewhere.write_bytes(good)
    entry.symlink_to(elsewhere)  # a link, even to a good pass, is not an entry
    assert V.read(entry, fields) is None
    entry.unlink()
    entry.write_bytes(b"{not json")
    r = _probe("pass")  # end to end: the corrupt entry is ignored and replaced by a fresh pass
    assert r.ok and "cached" not in r.detail and _children(count) == 1
    assert V.read(entry, fields).ok


def test_cache_key_covers_kernel_shape_tag_and_versions():
    dev = torch.device("cpu")
    base = V.key_fields("b", "kern", 1024, 7168, "t1", dev)
    assert base["torch"] == torch.__version__ and base["device"]["type"] == "cpu"
    assert {"package", "hip", "cuda", "driver"} <= set(base)
    assert "resolver" not in base  # a test hook is no part of what a verdict is valid for
    p0 = V.entry_path("/c", base)
    for change in [("b2", "kern", 1024, 7168, "t1"), ("b", "kern2", 1024, 7168, "t1"),
                   ("b", "kern", 2560, 7168, "t1"), ("b", "kern", 1024, 4096, "t1"), ("b", "kern", 1024, 7168, "t2")]:
        assert V.entry_path("/c", V.key_fields(*change, dev)) != p0, change
    assert V.entry_path("/c", V.key_fields("b", "kern", 1024, 7168, "t1", dev)) == p0


def test_the_child_prints_one_verdict_line(probe_env):
    import subprocess
    import sys

    m, n, k = SHAPE
    out = subprocess.run([sys.executable, "-m", "sglang_fp32gemm.backends.probe_child", "--backend", "probefake",
                          "--kernel", "bf16", "--device", "cpu", "--m", str(m), "--n", str(n), "--k", str(k),
                          "--resolver", RESOLVER], capture_output=True, text=True, timeout=OK_TIMEOUT)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(C.RESULT_MARKER)]
    assert len(lines) == 1
    d = json.loads(lines[0][len(C.RESULT_MARKER):])
    assert d["ok"] is False and d["shape"] == [m, n, k] and 1e-4 < d["rel_err"] < 1e-2


# -- issue 14: what the child runs, what the cache trusts, what the parent keeps --------------------
def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_the_child_runs_the_parents_package_not_one_in_the_working_directory(probe_env, tmp_path, monkeypatch):
    cache, count = probe_env
    here = tmp_path / "cwd"
    (here / "sglang_fp32gemm" / "backends").mkdir(parents=True)
    marker = tmp_path / "planted-copy-ran"
    # A planted copy that claims a pass for anything (what an old parent read as a verdict).
    (here / "sglang_fp32gemm" / "__init__.py").write_text(
        "import json, os, sys\n"
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "sys.stdout.write('\\nSGLANG_FP32GEMM_PROBE_RESULT ' + json.dumps("
        "{'ok': True, 'rel_err': 0.0, 'shape': [4, 32, 64], 'detail': 'planted'}) + '\\n')\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n")
    (here / "sglang_fp32gemm" / "backends" / "__init__.py").write_text("")
    monkeypatch.chdir(here)
    r = _probe("bf16")
    assert not r.ok and "above fp32 tolerance" in r.detail, r
    assert not marker.exists() and _cached(cache) == [] and _children(count) == 1


def test_cache_key_holds_the_versions_of_every_compiler(monkeypatch):
    from importlib import metadata

    from sglang_fp32gemm.backends.base import dist_version

    dev = torch.device("cpu")
    base = V.key_fields("b", "kern", 1024, 7168, "t1", dev)
    text = json.dumps(base)
    for dist in ("flydsl", "aiter", "triton", "nvidia-cutlass-dsl"):
        assert json.dumps(dist) in text, dist
    for dist in ("flydsl", "triton"):  # installed here; the device machine has no flydsl (null)
        assert f'"{dist}": {json.dumps(dist_version(dist))}' in text, dist
    assert dist_version("triton") is not None
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda d: "99.0" if d == "flydsl" else real(d))
    assert V.entry_path("/c", V.key_fields("b", "kern", 1024, 7168, "t1", dev)) != V.entry_path("/c", base)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="simulating another user's file needs chown (root)")


@needs_root
@pytest.mark.parametrize("plant", ["entry of another user", "entry writable by others", "dir of another user",
                                   "dir writable by others"])
def test_a_cached_pass_is_trusted_only_in_our_own_private_files(kept_pass_env, plant):
    cache, count = kept_pass_env
    (entry,) = cache.glob("*.json")
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    target = entry if plant.startswith("entry") else cache
    if plant.endswith("another user"):
        os.chown(target, 4242, 4242)
    else:
        os.chmod(target, target.stat().st_mode | 0o022)
    r = _probe("pass")
    assert r.ok and "cached" not in r.detail and _children(count) == 1, r
    if target is entry:  # a private directory: the planted entry is replaced by our own pass
        assert entry.stat().st_uid == os.geteuid() and "cached" in _probe("pass").detail
        assert _children(count) == 1


def test_a_deeply_nested_entry_is_ignored_and_replaced(kept_pass_env):
    cache, count = kept_pass_env
    (entry,) = cache.glob("*.json")
    entry.write_text("[" * 30000 + "]" * 30000)  # json.loads: RecursionError
    r = _probe("pass")
    assert r.ok and "cached" not in r.detail and _children(count) == 1, r
    assert "cached" in _probe("pass").detail and _children(count) == 1


def test_a_partial_line_on_stdout_does_not_hide_the_verdict(probe_env):
    _, count = probe_env
    r = _probe("partial_line")
    assert r.ok, r


def test_a_helper_process_holding_the_pipes_does_not_turn_a_pass_into_a_hang(probe_env, tmp_path, monkeypatch):
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv(probe_fakes.GRANDCHILD_PID_VAR, str(pid_file))
    t0 = time.monotonic()
    r = _probe("grandchild", timeout=45.0)
    assert r.ok and time.monotonic() - t0 < 40, r
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)  # the probe's leftover helpers are killed with its process group


def test_the_parent_keeps_a_short_tail_of_a_flood_of_output(probe_env, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv(probe_fakes.FLOOD_MB_VAR, "64")
    m, n, k = SHAPE
    script = (
        "import json, resource\n"
        "from sglang_fp32gemm.backends import isolated_probe as P\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"r = P.probe_in_child('probefake', 'flood', 'cpu', {m}, {n}, {k}, {OK_TIMEOUT}, resolver={RESOLVER!r})\n"
        "grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
        "print(json.dumps({'grown_kib': grown, 'ok': r.ok, 'detail': r.detail}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=2 * OK_TIMEOUT)
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads(out.stdout.strip().splitlines()[-1])
    assert not d["ok"] and "exited with code 3" in d["detail"], d["detail"][:500]
    assert probe_fakes.FLOOD_END in d["detail"] and len(d["detail"]) < 4000, d["detail"][-500:]
    assert d["grown_kib"] < 32 << 10, d["grown_kib"]  # 80 MiB printed; the parent held at most a tail


def test_the_timeout_is_a_setting(probe_env, monkeypatch):
    monkeypatch.setenv(S.PROBE_TIMEOUT_VAR, " 3 ")
    S.reload()
    m, n, k = SHAPE
    r = P.probe_in_child("probefake", "sleep", "cpu", m, n, k, resolver=RESOLVER)
    assert not r.ok and r.detail.startswith("hung for 3s"), r


@pytest.mark.parametrize("where", ["regular file", "under a regular file", "under /dev/null"])
def test_an_unusable_cache_dir_is_one_warning_and_probes_still_run(probe_env, monkeypatch, tmp_path, caplog, where):
    _, count = probe_env
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = {"regular file": str(blocker), "under a regular file": str(blocker / "sub")}.get(where, "/dev/null/x")
    monkeypatch.setenv(S.PROBE_CACHE_VAR, path)
    monkeypatch.setattr(V, "_warned", set())
    with caplog.at_level("WARNING"):
        assert _probe("pass").ok and _probe("pass").ok
    assert _children(count) == 2
    warns = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert len(warns) == 1 and path in warns[0] and "not a directory" in warns[0], warns


def test_explain_says_where_verdicts_go_and_whether_they_are_kept(monkeypatch, tmp_path):
    from sglang_fp32gemm.explain import explain

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(S.PROBE_CACHE_VAR, str(blocker))
    code, text = explain(max_m=1)
    assert f"probe verdicts: {blocker} (not kept: " in text and "not a directory" in text, text
    good = tmp_path / "cache"
    monkeypatch.setenv(S.PROBE_CACHE_VAR, str(good))
    code, text = explain(max_m=1)
    assert f"probe verdicts: {good} (kept" in text, text
