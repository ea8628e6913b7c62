"""Both Triton kernels (ticket ``triton-det`` and epoch ``triton``), with and without PDL, on CPU under TRITON_INTERPRET=1.

The interpreter must be chosen before triton is imported, and this pytest
process may already have imported it (SGLang imports triton), so the kernels
run in one subprocess that reports every case as JSON. Fresh random inputs
each check (the seed is in the report), outputs poisoned with NaN, results
against float64.

The interpreter runs a grid's programs one after the other in program-id
order, so split 0 of every epoch tile runs before the splits that wait for
it: the kernel completes there as on a GPU, minus the concurrency. That the
wait really waits is checked separately: with a split's epoch counter put
out of step, the launch must spin (``test_epoch_wait_spins_on_a_flag_that_never_comes``).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT, made_ahead_report, run_python, subprocess_env

from sglang_fp32gemm.exactness import REL_TOL

# (bm, bn, bk, split_k, warps, stages), (M, N, K)
TICKET_CASES = [
    ((16, 32, 16, 1, 4, 1), (1, 64, 48)),
    ((16, 32, 16, 1, 4, 1), (37, 32, 16)),
    ((16, 16, 16, 2, 4, 1), (5, 48, 64)),
    ((16, 16, 32, 2, 2, 3), (16, 32, 128)),
    ((32, 16, 16, 7, 4, 2), (33, 32, 224)),
    ((16, 64, 16, 7, 8, 1), (2, 64, 112)),
    ((32, 32, 16, 3, 4, 1), (70, 64, 96)),
    ((16, 32, 64, 4, 4, 3), (17, 128, 1024)),
    ((16, 64, 64, 2, 4, 4), (3, 256, 256)),
    ((16, 16, 32, 3, 4, 2, True), (5, 48, 192)),   # PDL: the first W tile before gdc_wait
    ((16, 32, 32, 1, 4, 2, True), (17, 64, 64)),
]
EPOCH_CASES = [
    ((16, 32, 64, 4, 4, 2), (1, 64, 256)),
    ((16, 32, 64, 4, 4, 2), (3, 128, 512)),
    ((16, 64, 64, 8, 4, 3), (16, 128, 1024)),
    ((16, 64, 128, 2, 4, 3), (17, 256, 512)),
    ((32, 32, 64, 1, 4, 2), (33, 64, 256)),
    ((32, 128, 32, 7, 4, 2), (33, 256, 448)),
    ((64, 32, 16, 3, 4, 1), (70, 96, 96)),
    ((64, 64, 128, 2, 4, 3), (48, 128, 512)),    # a sub-wave form (BN 64, 3 stages, under one wave)
    ((16, 16, 16, 5, 4, 1), (5, 48, 80)),
    ((16, 32, 64, 4, 4, 2, True), (3, 64, 512)),   # PDL
    ((16, 32, 32, 1, 4, 2, True), (17, 64, 64)),
]
BIND_MS = [1, 3, 16, 17, 33]
# The pair form (one launch, two GEMMs on one x): config, (M, N, N2, K)
PAIR_CASES = [
    ((16, 32, 64, 4, 4, 2), (3, 64, 128, 512)),
    ((16, 64, 64, 1, 4, 2), (17, 64, 192, 256)),     # split 1, two token tiles
    ((16, 32, 64, 4, 4, 2, True), (1, 32, 96, 512)),  # PDL
    ((32, 64, 32, 7, 4, 2), (33, 128, 64, 448)),      # odd split, N > N2
]

_SCRIPT = r'''
import json, os, sys
assert os.environ.get("TRITON_INTERPRET") == "1"
assert "triton" not in sys.modules
import torch
from sglang_fp32gemm.backends import triton as E, triton_det as T, triton_base as B, triton_launch as L
from sglang_fp32gemm.exactness import measure, reference

args = json.loads(sys.argv[1])
seed = int.from_bytes(os.urandom(7), "little")
g = torch.Generator().manual_seed(seed)
report = {"seed": seed}

def bf16(*shape):
    t = torch.randn(*shape, generator=g)
    return torch.where(t == 0, torch.full_like(t, 0.5), t).to(torch.bfloat16)

def strided(m, k, pad=16):
    """x with row stride k + pad (unit stride along K)."""
    return bf16(m, k + pad)[:, :k]

def check(out, x, w):
    r = measure(out, reference(x, w))
    return {"dtype": str(out.dtype), "shape": list(out.shape), "nan": int(torch.isnan(out).sum()),
            "rel": r.rel_err, "close": r.allclose, "ok": r.ok}

# -- raw launches with explicit buffers ------------------------------------------------------------
ticket = []
for cfg_t, (m, n, k) in args["ticket"]:
    cfg = T.SplitKConfig(*cfg_t)
    ws = torch.full((max(1, cfg.workspace_floats(m, n)),), float("nan"))
    cnt = torch.zeros(max(1, cfg.counters(m, n)), dtype=torch.int32)
    x, w = bf16(m, k), bf16(n, k)
    out = torch.full((m, n), float("nan"))
    T.launch(x, w, cfg, out, ws, cnt)
    r = check(out, x, w)
    again = torch.full((m, n), float("nan"))
    T.launch(x, w, cfg, again, ws, cnt)   # reuses the counters the first launch left
    r["repeat_equal"] = bool(torch.equal(out, again))
    xs, w2 = strided(m, k), bf16(n, k)   # fresh inputs, x row stride != K
    out3 = torch.full((m, n), float("nan"))
    T.launch(xs, w2, cfg, out3, ws, cnt)
    r["strided"] = check(out3, xs, w2)
    r["counters_zero"] = int(cnt.abs().sum()) == 0
    r["name"], r["mnk"] = cfg.name, [m, n, k]
    ticket.append(r)
report["ticket"] = ticket

def epoch_runs(cases, cls):
    results = []
    for cfg_t, (m, n, k) in cases:
        cfg = cls(*cfg_t)
        flags, cnt = E.new_sync_buffers(cfg, n, torch.device("cpu"))
        runs = []
        for i in range(3):  # epochs advance from call to call; fresh inputs each time
            x = strided(m, k) if i == 1 else bf16(m, k)
            w = bf16(n, k)
            out = torch.full((m, n), float("nan"))
            E.launch(x, w, cfg, out, flags, cnt)
            runs.append(check(out, x, w))
        tiles = cfg.tiles(m, n)
        r = {"name": cfg.name, "mnk": [m, n, k], "runs": runs}
        if cfg.split_k > 1:
            r["flags_used"] = flags[:tiles].tolist()
            r["flags_rest"] = int(flags[tiles:].abs().sum())
            r["counters_used"] = cnt[:tiles * cfg.split_k].tolist()
            r["counters_rest"] = int(cnt[tiles * cfg.split_k:].abs().sum())
        else:
            r["flags_rest"] = int(flags.abs().sum())
            r["counters_rest"] = int(cnt.abs().sum())
        results.append(r)
    return results
report["epoch"] = epoch_runs(args["epoch"], E.EpochConfig)

# Epochs that wrap around int32: every counter just below the wrap.
cfg = E.EpochConfig(16, 32, 32, 4, 4, 1)
flags, cnt = E.new_sync_buffers(cfg, 64, torch.device("cpu"))
cnt.fill_(2**31 - 1)
flags.fill_(2**31 - 1)
wrap = []
for i in range(2):
    x, w = bf16(5, 256), bf16(64, 256)
    out = torch.full((5, 64), float("nan"))
    E.launch(x, w, cfg, out, flags, cnt)
    wrap.append(check(out, x, w))
report["wrap"] = {"runs": wrap, "flags": flags[:cfg.tiles(5, 64)].tolist(), "counters": cnt[:8].tolist()}

# -- through bind() on the CPU device (ordinary launches) -----------------------------------------
def bound_runs(backend, cfg, n, k, ms):
    fn = backend.bind(cfg, torch.device("cpu"), n, k)
    res = []
    for m in ms:
        x, w = (strided(m, k) if m % 2 else bf16(m, k)), bf16(n, k)
        out = fn(x, w)
        r = check(out, x, w)
        r["m"] = m
        r["repeat_equal"] = bool(torch.equal(out, fn(x, w)))
        res.append(r)
    return fn, res

tb = T.TritonSplitKBackend()
fn, res = bound_runs(tb, T.SplitKConfig(16, 32, 64, 4, 4, 2), 128, 512, args["ms"])
report["bind_ticket"] = {"runs": res, "fast": fn.launcher.fast, "reason": fn.launcher.reason,
                         "counters_zero": all(int(b.counters.abs().sum()) == 0 for b in fn.buffers.by_stream.values())}
eb = E.TritonEpochBackend()
ecfg = E.EpochConfig(16, 64, 64, 4, 4, 2)
fn, res = bound_runs(eb, ecfg, 128, 512, args["ms"])
s = fn.buffers.by_stream[0]
# every call covered tile-row 0; calls with M > 16 covered tile-row 1 too, M > 32 tile-row 2
n_tiles = 128 // 64
report["bind_epoch"] = {"runs": res, "fast": fn.launcher.fast, "reason": fn.launcher.reason,
                        "flags": s.scratch[:3 * n_tiles].tolist(),
                        "counters": s.counters[:3 * n_tiles * 4].tolist()}

# -- the pair form: bind_pair on the CPU device -------------------------------------------------------
pairs = []
for cfg_t, (m, n, n2, k) in args["pair"]:
    cfg = E.EpochConfig(*cfg_t)
    fn = eb.bind_pair(cfg, torch.device("cpu"), n, n2, k)
    runs = []
    for i in range(3):  # epochs advance from call to call; fresh inputs each time
        x = strided(m, k) if i == 1 else bf16(m, k)
        w, w2 = bf16(n, k), bf16(n2, k)
        out, out2 = fn(x, w, w2)
        runs.append({"a": check(out, x, w), "b": check(out2, x, w2)})
    s = fn.buffers.by_stream[0]
    tiles = cfg.tiles(m, n + n2)
    pairs.append({"name": cfg.name, "mnnk": [m, n, n2, k], "runs": runs,
                  "flags": s.scratch[:tiles].tolist() if cfg.split_k > 1 else [],
                  "rest": int(s.scratch[tiles:].abs().sum()) + int(s.counters[tiles * cfg.split_k:].abs().sum())})
report["pair"] = pairs

# -- the fast path's argument marshalling, executed through the interpreter ------------------------
def from_ptr(ptr, dtype, numel):
    """A CPU tensor over ``numel`` elements at a raw address (shares the memory)."""
    import ctypes
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=dtype, count=numel)

class Recorder:
    """A BoundKernel whose fast launch goes to a stand-in for CompiledKernel.run.

    The stand-in records the call, checks the fixed arguments, rebuilds every
    tensor from the raw pointers it was given and runs the kernel with all the
    remaining arguments positionally (so the constexpr tail must be in
    parameter order).
    """
    def __init__(self, jit_fn, device, specimen, constexprs, options, try_fast=True):
        self.real = L.BoundKernel(jit_fn, device, specimen, constexprs, options, try_fast=False)
        self.jit_fn = jit_fn
        self.fast, self.reason, self.slow = True, "recording", self.real.slow
        self.calls, self.convention_ok = [], []
        self.buffers = {}   # data_ptr -> tensor, filled by the test before calls
        self.launch = L._fast_launcher(self._run, "FUNCTION", "META", self.real._tail)
    def _run(self, *a):
        self.calls.append(a)
        (gx, gy, gz, stream, function, meta, lmeta, enter, exit_), rest = a[:9], list(a[9:])
        self.convention_ok.append((function, meta, lmeta, enter, exit_) == ("FUNCTION", "META", None, None, None))
        xp, wp, op, b1, b2, m, n, k, sxm, swn, som = rest[:11]
        x = from_ptr(xp, torch.bfloat16, (m - 1) * sxm + k).as_strided((m, k), (sxm, 1))
        w = from_ptr(wp, torch.bfloat16, n * swn).view(n, swn)
        out = from_ptr(op, torch.float32, m * som).view(m, som)
        bufs = self.buffers_now()
        self.jit_fn[(gx, gy, gz)](x, w, out, bufs[b1], bufs[b2], *rest[5:])

fastpath = {}
for be, cfg, key in ((T.TritonSplitKBackend(), T.SplitKConfig(16, 32, 64, 4, 4, 2), "ticket"),
                     (E.TritonEpochBackend(), E.EpochConfig(16, 64, 64, 4, 4, 2), "epoch")):
    real = B.BoundKernel
    B.BoundKernel = Recorder
    try:
        fn = be.bind(cfg, torch.device("cpu"), 128, 512)
    finally:
        B.BoundKernel = real
    kern = fn.launcher
    kern.buffers_now = lambda fn=fn: {t.data_ptr(): t for b in fn.buffers.by_stream.values() for t in (b.scratch, b.counters)}
    rep = {}
    routes = []
    w = bf16(128, 512)
    # contiguous and x row stride K + 16: inside the specialization; K + 8, an odd
    # offset: outside it (ordinary launch); M = 1 with an odd stride: inside (normalised)
    for label, xx in (("contiguous", bf16(3, 512)), ("stride+16", strided(3, 512, 16)),
                      ("stride+8", strided(3, 512, 8)), ("offset1", bf16(3, 513)[:, 1:]),
                      ("m1-any-stride", strided(1, 512, 3))):
        before = len(kern.calls)
        o = fn(xx, w)
        r = check(o, xx, w)
        r["label"], r["fast"] = label, len(kern.calls) > before
        if r["fast"]:
            call = kern.calls[-1]
            r["grid"], r["stream"], r["ints"] = list(call[:3]), call[3], list(call[9 + 5:9 + 11])
        routes.append(r)
    rep["routes"] = routes
    rep["convention"] = kern.convention_ok
    fastpath[key] = rep
report["fastpath"] = fastpath
print("REPORT " + json.dumps(report))
'''


def _run_script() -> dict:
    payload = json.dumps({"ticket": TICKET_CASES, "epoch": EPOCH_CASES, "ms": BIND_MS, "pair": PAIR_CASES})
    proc = run_python(_SCRIPT, payload, env=subprocess_env(TRITON_INTERPRET="1"), timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("REPORT "):])


# The tests that read the script's report (made once per test run, in the background from the start).
reads_report = pytest.mark.made_ahead("triton-kernels-interpret", _run_script)


@pytest.fixture
def report(request, shared_report):
    return made_ahead_report(request.node, shared_report)


def _exact(r, what=""):
    """One ``check`` of the script: fp32, every element written, exact by ``exactness.measure``."""
    assert r["dtype"] == "torch.float32", (what, r)
    assert r["nan"] == 0, (what, r)  # the output was poisoned (or is fresh): every element written
    assert r["rel"] <= REL_TOL and r["close"] and r["ok"], (what, r)


# -- ticket (triton-det) -----------------------------------------------------------------------------
@pytest.mark.parametrize("i", range(len(TICKET_CASES)),
                         ids=[f"bm{c[0]}bn{c[1]}bk{c[2]}sk{c[3]}-M{s[0]}N{s[1]}K{s[2]}" for c, s in TICKET_CASES])
@reads_report
def test_ticket_kernel_is_fp32_exact_deterministic_and_leaves_counters_zero(report, i):
    r = report["ticket"][i]
    assert r["mnk"] == list(TICKET_CASES[i][1]), r
    _exact(r)
    _exact(r["strided"], "strided x")
    assert r["repeat_equal"], r
    assert r["counters_zero"], r


def test_ticket_cases_cover_split_1_2_7_and_partial_m_tiles():
    assert {1, 2, 7} <= {c[3] for c, _ in TICKET_CASES}
    assert any(s[0] % c[0] for c, s in TICKET_CASES)


# -- epoch (triton) ------------------------------------------------------------------------------------
@pytest.mark.parametrize("i", range(len(EPOCH_CASES)),
                         ids=[f"bm{c[0]}bn{c[1]}bk{c[2]}sk{c[3]}-M{s[0]}N{s[1]}K{s[2]}" for c, s in EPOCH_CASES])
@reads_report
def test_epoch_kernel_is_fp32_exact_over_three_calls(report, i):
    r = report["epoch"][i]
    assert r["mnk"] == list(EPOCH_CASES[i][1]), r
    for j, run in enumerate(r["runs"]):
        _exact(run, f"call {j}")


@pytest.mark.parametrize("i", range(len(EPOCH_CASES)))
@reads_report
def test_epoch_counters_advance_once_per_call_for_the_tiles_used(report, i):
    c, (m, n, _) = EPOCH_CASES[i]
    bm, bn, sk = c[0], c[1], c[3]
    r = report["epoch"][i]
    # nothing outside the tiles of this M is touched
    assert r["flags_rest"] == 0 and r["counters_rest"] == 0, r
    if sk > 1:
        tiles = (n // bn) * -(-m // bm)
        assert r["flags_used"] == [3] * tiles, r
        assert r["counters_used"] == [3] * (tiles * sk), r


def test_pdl_cases_are_run_by_every_triton_kernel():
    for cases in (TICKET_CASES, EPOCH_CASES):
        assert any(c[6:] == (True,) for c, _ in cases)
        assert any(c[6:] == (True,) and c[3] > 1 for c, _ in cases)


def test_epoch_cases_cover_split_1_odd_splits_and_partial_m_tiles():
    assert {1, 2, 3, 5, 7, 8} <= {c[3] for c, _ in EPOCH_CASES}
    assert any(s[0] % c[0] for c, s in EPOCH_CASES)
    assert any(-(-s[0] // c[0]) > 1 for c, s in EPOCH_CASES)  # several token tiles


@reads_report
def test_epoch_wraps_around_int32(report):
    w = report["wrap"]
    for run in w["runs"]:
        _exact(run)
    assert w["flags"] == [-(2**31) + 1] * len(w["flags"]), w
    assert w["counters"] == [-(2**31) + 1] * 8, w


_HANG = r'''
import os, sys, torch
assert os.environ.get("TRITON_INTERPRET") == "1"
from sglang_fp32gemm.backends import triton as E
cfg = E.EpochConfig(16, 32, 32, 2, 4, 1)
flags, cnt = E.new_sync_buffers(cfg, 32, torch.device("cpu"))
cnt[1] = 1   # split 1 of tile 0 is one epoch ahead of split 0: it must wait for epoch 2
x = torch.randn(1, 64).bfloat16(); w = torch.randn(32, 64).bfloat16()
E.launch(x, w, cfg, torch.empty(1, 32), flags, E.new_sync_buffers(cfg, 32, torch.device("cpu"))[1])  # compiles/warms
print("STARTED", flush=True)
E.launch(x, w, cfg, torch.empty(1, 32), flags, cnt)
print("FINISHED", flush=True)
'''


def test_epoch_wait_spins_on_a_flag_that_never_comes():
    """Only a test of the wait itself: the interpreter never needs to wait otherwise."""
    env = subprocess_env(TRITON_INTERPRET="1")
    proc = subprocess.Popen([sys.executable, "-c", _HANG], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=str(REPO_ROOT))
    try:
        deadline = time.monotonic() + 240
        line = ""
        while time.monotonic() < deadline and "STARTED" not in line:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
        assert "STARTED" in line, f"rc={proc.poll()} {proc.stderr.read()[-3000:] if proc.poll() is not None else ''}"
        time.sleep(3.0)
        assert proc.poll() is None, f"the launch finished although its flag never came: {proc.stdout.read()}"
    finally:
        proc.kill()
        proc.wait()


# -- bind() on the CPU device ---------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["bind_ticket", "bind_epoch"])
@reads_report
def test_bound_fn_on_cpu_is_fp32_exact_for_every_m(report, which):
    b = report[which]
    assert [r["m"] for r in b["runs"]] == BIND_MS
    for r in b["runs"]:
        _exact(r, f"M={r['m']}")
        assert r["shape"] == [r["m"], 128], r
    # on a CPU device nothing is compiled: the ordinary launch is used, and says why
    assert b["fast"] is False and b["reason"] == "not tried", b


@reads_report
def test_bound_ticket_fn_repeats_bitwise_and_leaves_counters_zero(report):
    b = report["bind_ticket"]
    assert all(r["repeat_equal"] for r in b["runs"]), b
    assert b["counters_zero"], b


@reads_report
def test_bound_epoch_fn_advances_epochs_per_tile_row(report):
    b = report["bind_epoch"]
    # each M was called twice (the repeat check); tile rows of 16 tokens, 2 tiles a row
    rows = [sum(2 for m in BIND_MS if m > 16 * r) for r in range(3)]
    assert b["flags"] == [rows[0]] * 2 + [rows[1]] * 2 + [rows[2]] * 2, b
    assert b["counters"] == [rows[0]] * 8 + [rows[1]] * 8 + [rows[2]] * 8, b


# -- the pair form ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("i", range(len(PAIR_CASES)),
                         ids=[f"bm{c[0]}bn{c[1]}sk{c[3]}{'pdl' if c[6:] else ''}-M{s[0]}N{s[1]}+{s[2]}K{s[3]}"
                              for c, s in PAIR_CASES])
@reads_report
def test_the_pair_form_gives_both_products_exact_over_three_calls(report, i):
    """One launch, two GEMMs on one x (DeepSeek-V4's ratio-4 pair): each output fp32-exact on every call, the
    tiles of both on one set of flags, each tile's epoch advanced once a call, nothing past them touched."""
    c, (m, n, n2, k) = PAIR_CASES[i]
    r = report["pair"][i]
    assert r["mnnk"] == [m, n, n2, k], r
    for j, run in enumerate(r["runs"]):
        _exact(run["a"], f"call {j}, out")
        _exact(run["b"], f"call {j}, out2")
        assert run["a"]["shape"] == [m, n] and run["b"]["shape"] == [m, n2], run
    if c[3] > 1:
        assert r["flags"] == [3] * ((n + n2) // c[1] * -(-m // c[0])), r
    assert r["rest"] == 0, r


def test_pair_cases_cover_n_above_and_below_n2_pdl_split_1_and_token_tiles():
    assert any(s[1] > s[2] for _, s in PAIR_CASES) and any(s[1] < s[2] for _, s in PAIR_CASES)
    assert any(c[6:] == (True,) for c, _ in PAIR_CASES) and any(c[3] == 1 for c, _ in PAIR_CASES)
    assert any(-(-s[0] // c[0]) > 1 for c, s in PAIR_CASES)


# -- the fast path's marshalling -------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["ticket", "epoch"])
@reads_report
def test_fast_path_arguments_run_the_right_product(report, key):
    """What the bound fn hands CompiledKernel.run, rebuilt from raw pointers and run positionally."""
    f = report["fastpath"][key]
    routes = {r["label"]: r for r in f["routes"]}
    assert f["convention"] and all(f["convention"]), f  # function, packed metadata, None x3
    assert len(f["convention"]) == sum(r["fast"] for r in routes.values())
    c = routes["contiguous"]
    _exact(c)
    assert c["ints"] == [3, 128, 512, 512, 512, 128], c  # M, N, K, stride_xm, stride_wn, stride_om
    assert c["stream"] == 0
    assert routes["stride+16"]["ints"][3] == 528
    assert routes["m1-any-stride"]["ints"][:4] == [1, 128, 512, 512]
    if key == "ticket":
        assert c["grid"] == [128 // 32, 4, 1], c
    else:
        assert c["grid"] == [(128 // 64) * 4, 1, 1], c


@pytest.mark.parametrize("key", ["ticket", "epoch"])
@reads_report
def test_fast_path_only_for_calls_inside_the_compiled_specialization(report, key):
    routes = {r["label"]: r for r in report["fastpath"][key]["routes"]}
    for r in routes.values():
        _exact(r, r["label"])
    assert routes["contiguous"]["fast"] is True
    assert routes["stride+16"]["fast"] is True
    assert routes["stride+8"]["fast"] is False      # row stride not a multiple of 16
    assert routes["offset1"]["fast"] is False       # x pointer not 16-byte aligned
    assert routes["m1-any-stride"]["fast"] is True  # one row: its stride never matters


def test_interpreter_environment_was_the_subprocess_only():
    assert os.environ.get("TRITON_INTERPRET") != "1"
