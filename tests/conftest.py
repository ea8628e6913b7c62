"""Shared fixtures for the sglang-fp32gemm test suite.

Every test starts and ends with a clean plugin environment: no
``SGLANG_ENABLE_FLYDSL_FP32_GEMM`` / ``SGLANG_FLYDSL_FP32_GEMM_*`` variables,
re-read settings and a fresh process router.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from filelock import FileLock  # a dependency of torch

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # for ``fakes.*``

from sglang_fp32gemm import routing  # noqa: E402
from sglang_fp32gemm import settings as settings_mod  # noqa: E402
from sglang_fp32gemm.errors import ConfigError  # noqa: E402

_PLUGIN_VAR_PREFIXES = ("SGLANG_FLYDSL_FP32_GEMM_",)
_PLUGIN_VARS = (settings_mod.ENABLE_VAR, settings_mod.SGLANG_DETERMINISTIC_VAR)


def _is_plugin_var(name: str) -> bool:
    return name in _PLUGIN_VARS or name.startswith(_PLUGIN_VAR_PREFIXES)


def _reset_plugin_state() -> None:
    try:
        settings_mod.reload()
    except ConfigError:
        pass  # a test left a bad value; it is removed before the next reload
    routing.reset_router()


@pytest.fixture(autouse=True)
def clean_plugin_env():
    """Strip the plugin's variables for the test; restore the outside values after."""
    saved = {k: v for k, v in os.environ.items() if _is_plugin_var(k)}
    for k in saved:
        del os.environ[k]
    _reset_plugin_state()
    yield
    # Code under test (the launch-flag hook) writes os.environ directly, so
    # monkeypatch alone would not undo it.
    for k in [k for k in os.environ if _is_plugin_var(k)]:
        del os.environ[k]
    _reset_plugin_state()
    os.environ.update(saved)


def fresh_generator() -> torch.Generator:
    """A CPU generator with a fresh seed each call (printed on failure via repr)."""
    return torch.Generator().manual_seed(secrets.randbits(63))


def rand_bf16(*shape: int, dtype: torch.dtype = torch.bfloat16, gen: torch.Generator | None = None) -> torch.Tensor:
    """Fresh standard-normal values rounded to ``dtype`` (bf16 by default); never zeros."""
    g = gen or fresh_generator()
    t = torch.randn(*shape, generator=g)
    # randn is never exactly 0 in practice; make it certain.
    t = torch.where(t == 0, torch.full_like(t, 0.5), t)
    return t.to(dtype)


@pytest.fixture
def make_bf16() -> Callable[..., torch.Tensor]:
    return rand_bf16


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm())


def assert_fp32_close(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rel: float = 1e-5) -> None:
    """``out`` is the fp32 product x @ w^T: dtype, shape, atol 1e-2/rtol 1e-4 and rel. error vs float64."""
    ref = x.double() @ w.double().t()
    assert out.dtype == torch.float32
    assert tuple(out.shape) == tuple(ref.shape)
    if ref.numel() == 0:
        return
    torch.testing.assert_close(out.double(), ref, atol=1e-2, rtol=1e-4)
    if float(ref.norm()) > 0:
        e = rel_err(out, ref)
        # A product that cancels to nearly zero (tiny N, fp32 inputs) is
        # judged by fp32 summation's own bound, K * 2^-24 * || |x| |w|^T ||;
        # a 16-bit rounding (2^-8 relative) fails both.
        scale = float((x.double().abs() @ w.double().abs().t()).norm())
        bound = max(rel * float(ref.norm()), 2.0 * x.shape[-1] * 2.0**-24 * scale)
        assert e * float(ref.norm()) <= bound, f"relative error {e:.3e} > {rel:.0e} (and over the fp32 bound)"


def sglang_importable() -> bool:
    try:
        import sglang.srt.plugins  # noqa: F401
        import sglang.srt.plugins.hook_registry  # noqa: F401
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def sglang_available() -> None:
    """Skip only when SGLang itself cannot be imported (it is installed here and in CI)."""
    if not sglang_importable():
        pytest.skip("sglang is not importable")


@pytest.fixture(scope="session")
def sglang_plugins_loaded(sglang_available):
    """This process, with SGLang's own load_plugins() run once, the plugin on (every hook applied).

    The tests then switch the router on and off themselves: a plugin that is
    off when SGLang loads it installs no GEMM hook at all.
    """
    from sglang.srt.plugins import load_plugins

    from sglang_fp32gemm import settings

    old = os.environ.get(settings.ENABLE_VAR)
    os.environ[settings.ENABLE_VAR] = "1"
    try:
        load_plugins()
    finally:
        if old is None:
            os.environ.pop(settings.ENABLE_VAR, None)
        else:
            os.environ[settings.ENABLE_VAR] = old
        settings.reload()
    from sglang_fp32gemm import plugin, routing

    routing.reset_router()

    assert plugin.STATE["registered"], plugin.STATE
    return plugin


@pytest.fixture(scope="session")
def gfx950_isa(tmp_path_factory) -> Callable[..., str]:
    """``isa(kernel_name, n=1024, k=7168)``: the ISA text FlyDSL dumps for that config compiled for
    gfx950 on this CPU, compiled once per session (the compile tests share compiles)."""
    from sglang_fp32gemm.backends import flydsl_gfx950 as F

    root = tmp_path_factory.mktemp("gfx950_isa")
    texts: dict[tuple[str, int, int], str] = {}

    def isa(name: str, n: int = 1024, k: int = 7168) -> str:
        if (name, n, k) not in texts:
            paths = F.compile_for_gfx950(F.FlyDSLConfig.parse(name), root / str(len(texts)), n=n, k=k)
            texts[name, n, k] = paths[-1].read_text()
        return texts[name, n, k]

    return isa


class SharedReports:
    """The JSON reports of the interpreters the tests start (release probes, launches), each made once
    per test run.

    pytest-xdist hands the tests that read one report to either worker: a report is kept in the run's
    shared temp folder (``root``; None in a run of one process), so the second worker reads it, or
    waits while the first makes it, instead of starting the same interpreter again. A failed
    ``produce()`` keeps nothing: the next test that asks tries again, and fails the same way.
    """

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.memo: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def get(self, key: str, produce: Callable[[], Any]) -> Any:
        if key not in self.memo:
            if self.root is None:
                self.memo[key] = json.loads(json.dumps(produce()))  # as a worker reads it back
            else:
                path = self.root / f"{key}.json"
                with FileLock(f"{path}.lock"):
                    if not path.is_file():
                        path.write_text(json.dumps(produce()))
                    self.memo[key] = json.loads(path.read_text())
        return self.memo[key]

    def make_ahead(self, reports: list[tuple[str, Callable[[], Any]]]) -> None:
        """Make ``reports`` in a background thread, in order, while the tests run: each one that no
        worker has made or is making (then it goes on to the next). A failure is left to the test."""
        if self.root is None or not reports:
            return

        def run() -> None:
            for key, produce in reports:
                if self._stop.is_set():
                    return
                path = self.root / f"{key}.json"
                try:
                    with FileLock(f"{path}.lock", timeout=0):
                        if not path.is_file():
                            path.write_text(json.dumps(produce()))
                except BaseException:  # noqa: BLE001 - being made elsewhere, failed or skipped: the test meets it
                    continue

        self._thread = threading.Thread(target=run, name="reports-made-ahead", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Start nothing more; wait for the report being made (the other worker may be waiting for it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@pytest.fixture(scope="session")
def shared_reports(tmp_path_factory) -> SharedReports:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return SharedReports(None)
    # Each worker's basetemp is <run folder>/popen-gwN: the run folder is shared, and new each run.
    root = tmp_path_factory.getbasetemp().parent / "shared-reports"
    root.mkdir(exist_ok=True)
    return SharedReports(root)


@pytest.fixture(scope="session")
def shared_report(shared_reports) -> Callable[[str, Callable[[], Any]], Any]:
    """``shared_report(key, produce)``: ``produce()``'s JSON value, made once per test run (SharedReports)."""
    return shared_reports.get


@pytest.fixture(scope="session", autouse=True)
def reports_made_ahead(request, shared_reports):
    """The reports the selected tests mark ``made_ahead(key, produce)``, made in the background from the
    start, soonest needed first, so that no worker waits idle for one another worker is making."""
    wanted: dict[str, Callable[[], Any]] = {}
    for item in request.session.items:
        for mark in item.iter_markers("made_ahead"):
            wanted.setdefault(*mark.args)
    shared_reports.make_ahead(list(wanted.items()))
    yield
    shared_reports.close()


def made_ahead_report(node: pytest.Item, shared_report: Callable[[str, Callable[[], Any]], Any]) -> Any:
    """The report the test's ``made_ahead(key, produce)`` mark names."""
    mark = node.get_closest_marker("made_ahead")
    assert mark is not None, f"{node.nodeid} has no made_ahead mark"
    return shared_report(*mark.args)


def pythonpath_with(first: Path) -> str:
    """``first``, then this process's PYTHONPATH, kept: the device machine's carries (the CuTe DSL) come from it."""
    return os.pathsep.join(p for p in (str(first), os.environ.get("PYTHONPATH", "")) if p)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _is_plugin_var(k) and k != "TRITON_INTERPRET"}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONPATH"] = pythonpath_with(TESTS_DIR)
    env.update(extra)
    return env


def run_python(script: str, *args: str, timeout: float = 240, env: dict | None = None,
               cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` (source text) in a fresh interpreter of this venv."""
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, env=env or subprocess_env(), cwd=cwd or str(REPO_ROOT))


def cutedsl_child(code: str, **env: str) -> str:
    """Run ``code`` in a child process (the CuTe DSL's MLIR libraries must stay out of the pytest worker:
    FlyDSL's compile tests load their own there) and return its stdout; skips where the CuTe DSL or TVM-FFI
    is not installed (looked up, not imported)."""
    for mod, dist in (("cutlass", "nvidia-cutlass-dsl"), ("tvm_ffi", "apache-tvm-ffi")):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{dist} is not installed: the kernel cannot be compiled here")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=pythonpath_with(REPO_ROOT), **env),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def cutedsl_ptx(tmp_path: Path, module: str, config_class: str, kernel_name: str, n: int, k: int) -> str:
    """The PTX of ``module.compile_kernel(config_class.parse(kernel_name), n, k)``, compiled for sm_90a on this
    CPU in a child process (``cutedsl_child``)."""
    cutedsl_child(f"from {module} import {config_class}, compile_kernel\n"
                  f"compile_kernel({config_class}.parse({kernel_name!r}), {n}, {k})\n",
                  CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path))
    (ptx,) = tmp_path.glob("*.ptx")
    return ptx.read_text()


def poisoned_call(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor,
                  w: torch.Tensor) -> torch.Tensor:
    """``fn(x, w)`` right after a NaN block of the output's exact size is freed: the caching allocator hands it
    to the output, so elements the kernel does not write stay NaN."""
    p = torch.full((x.shape[0], w.shape[0]), float("nan"), device=x.device)
    del p
    return fn(x, w)


_CUTEDSL_BOUND: dict = {}


def cutedsl_bound(backend: Any, cfg: Any, n: int, k: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``backend.bind(cfg, cuda, n, k)``, once per test process (compiling takes a while); skips, saying why,
    where the backend is not available."""
    ok, why = backend.available()
    if not ok:
        pytest.skip(f"{backend.name}: {why}")
    key = (backend.name, cfg, n, k)
    if key not in _CUTEDSL_BOUND:
        _CUTEDSL_BOUND[key] = backend.bind(cfg, torch.device("cuda"), n, k)
    return _CUTEDSL_BOUND[key]


def replays_after_the_writer(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], w: torch.Tensor, m: int,
                             replays: int = 5):
    """Yields (out, x) after each replay of one CUDA graph captured on a side stream: x = 2 x src, then
    out = fn(x, w), so the kernel starts right after the kernel that writes its x (a PDL launch must wait
    for it); src is fresh random before each replay."""
    k = w.shape[1]
    src = torch.randn(m, k, device="cuda").bfloat16()
    x = torch.empty_like(src)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            torch.mul(src, 2.0, out=x)
            fn(x, w)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        torch.mul(src, 2.0, out=x)
        out = fn(x, w)
    for _ in range(replays):
        src.copy_(torch.randn(m, k, device="cuda").bfloat16())
        g.replay()
        torch.cuda.synchronize()
        yield out, (src.float() * 2).bfloat16()
