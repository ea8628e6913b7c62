"""The plugin inside the real, installed SGLang (CPU only).

Start-up behaviour (entry point, hook binding, launch flags, worker
processes, a bad configuration at launch and in a worker) is checked in
fresh interpreters, several checks per process (and each interpreter once
per test run, whichever xdist worker asks first: ``shared_report``); the
DeepSeek-V4 Compressor hook and SGLang's argument preparation with a bad
configuration are exercised in this process after SGLang's own
load_plugins(), the real launcher in two launches (three more, and
``--help``: ``-m slow``, test_releases.py).

What a hook routes is observed where the hooks hand it over: the calls of
``Router.kernel_for`` (x and w, as given), the per-module layer
decisions the hook keeps on each compressor (``hooks.CALLER_ATTR``: LayerInfo
and whether the layer file selects it), the fake backend's bound kernel (every shape it ran) and the router's
counters ((backend, kernelName) for routed calls, ("torch", reason) for the
rest).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import types

import pytest
import torch

from conftest import TESTS_DIR, assert_fp32_close, made_ahead_report, rand_bf16, rel_err, run_python, subprocess_env
from fakes.fake_aiter import install_fake_aiter
from fakes.fake_backends import FAKE_KERNEL, ExactFake, make_router, rows_csv
from sglang_fp32gemm import hooks, routing
from sglang_fp32gemm import settings as S
from sglang_fp32gemm.backends.probe import TRIALS as PROBE_RUNS
from sglang_fp32gemm.layers import LayerInfo, LayerSelection

pytestmark = pytest.mark.usefixtures("sglang_available")

LINEAR = "sglang.kernels.ops.gemm.bf16_fp32.linear_bf16_fp32"
WKV = "sglang.srt.layers.attention.dsv4.compressor.Compressor._compute_wkv_gate"
K = 7168


def _report(proc, tag="REPORT "):
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(tag)]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len(tag):])


# -- process 1: modules imported BEFORE load_plugins; flags; spawn worker ----------------------------
_BEFORE = r'''
import json, os, sys, tempfile, multiprocessing as mp
import torch
assert "sglang_fp32gemm.plugin" not in sys.modules
import sglang.kernels.ops.gemm.bf16_fp32 as G
import sglang.srt.layers.attention.dsv4.compressor as C
import sglang.srt.layers.attention.dsv4.dsv41_sparse as D
from sglang.srt.server_args import ServerArgs
# In a dict: SGLang's registry rebinds every module global that holds a patched original.
O = {"linear": G.linear_bf16_fp32, "wkv": C.Compressor._compute_wkv_gate,
     "add": ServerArgs.add_cli_args, "from": ServerArgs.__dict__["from_cli_args"].__func__}
from importlib.metadata import entry_points
rep = {"eps": sorted((e.name, e.value) for e in entry_points(group="sglang.srt.plugins"))}
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang_fp32gemm import plugin, routing, settings
# register() builds (and validates the configuration of) the process router while the plugin loads.
rep["router_at_load"] = routing._router is not None and routing._router.error is None
rep["state"] = {k: plugin.STATE[k] for k in ("registered", "linear_target", "compressor_target", "errors")}
rep["linear_hooked"] = G.linear_bf16_fp32 is not O["linear"] and G.linear_bf16_fp32.__wrapped__ is O["linear"]
rep["compressor_bound"] = C.linear_bf16_fp32 is G.linear_bf16_fp32
rep["dsv41_bound"] = D.linear_bf16_fp32 is G.linear_bf16_fp32
rep["wkv_hooked"] = C.Compressor._compute_wkv_gate.__wrapped__ is O["wkv"]
rep["add_cli_hooked"] = ServerArgs.add_cli_args.__wrapped__ is O["add"]
rep["from_cli_hooked"] = ServerArgs.__dict__["from_cli_args"].__func__.__wrapped__ is O["from"]
rep["from_cli_classmethod"] = isinstance(ServerArgs.__dict__["from_cli_args"], classmethod)

# Registering twice (the entry point, SGLang's loader, install()) changes nothing.
snap = (G.linear_bf16_fp32, C.linear_bf16_fp32, D.linear_bf16_fp32, C.Compressor._compute_wkv_gate,
        ServerArgs.add_cli_args, ServerArgs.__dict__["from_cli_args"])
plugin.register(); load_plugins(); plugin.install(); HookRegistry.apply_hooks()
rep["twice_same"] = snap == (G.linear_bf16_fp32, C.linear_bf16_fp32, D.linear_bf16_fp32,
                             C.Compressor._compute_wkv_gate, ServerArgs.add_cli_args,
                             ServerArgs.__dict__["from_cli_args"])
rep["hook_counts"] = {t: len(HookRegistry._hooks[t]) for t in (
    plugin.STATE["linear_target"], plugin.STATE["compressor_target"],
    "sglang.srt.server_args.ServerArgs.add_cli_args", "sglang.srt.server_args.ServerArgs.from_cli_args")}
rep["single_wrapper"] = not hasattr(G.linear_bf16_fp32.__wrapped__, "__wrapped__")

g = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
x = torch.randn(4, 256, generator=g).bfloat16(); w = torch.randn(64, 256, generator=g).bfloat16()
rep["env_before"] = {k: os.environ.get(k) for k in (settings.ENABLE_VAR, settings.SOURCE_VAR)}
# Switched off after loading (hooks installed): SGLang's own result, bit for bit.
os.environ[settings.ENABLE_VAR] = "0"; settings.reload(); routing.reset_router()
rep["disabled_exact"] = torch.equal(G.linear_bf16_fp32(x, w), O["linear"](x, w))

# The launch flags, through SGLang's own argument preparation.
from sglang.srt.server_args import prepare_server_args
d = tempfile.mkdtemp()
layers = os.path.join(d, "sel.txt")
open(layers, "w").write("layers = 0-30\nkinds = hca, csa\n")
os.chdir(d)
sa = prepare_server_args(["--model-path", "dummy", "--enable-flydsl-fp32-gemm",
                          "--flydsl-fp32-gemm-layers", "sel.txt"])
rep["model_path"] = sa.model_path
rep["env"] = {k: os.environ.get(k) for k in (settings.ENABLE_VAR, settings.SOURCE_VAR, settings.LAYERS_VAR)}
rep["layers_abs"] = layers
r = routing.get_router()
rep["router_enabled"] = r.enabled
rep["router_selection"] = r.config.selection.describe()
rep["router_source"] = r.config.settings.enabled_source
rep["enabled_exact"] = torch.equal(G.linear_bf16_fp32(x, w), O["linear"](x, w))
rep["counters"] = {f"{a}|{b}": v for (a, b), v in r.counters().items()}

# A worker started with spawn inherits the exported environment and loads the plugin itself.
sys.path.insert(0, os.environ["TESTS_DIR"])
from fakes import spawn_worker
ctx = mp.get_context("spawn")
q = ctx.Queue()
p = ctx.Process(target=spawn_worker.main, args=(q,))
p.start()
rep["worker"] = q.get(timeout=400)
p.join(60)
rep["worker_exit"] = p.exitcode
print("REPORT " + json.dumps(rep))
'''


def _run_before() -> dict:
    # On when SGLang loads it, as in a worker of a launch with the flag: every hook is installed.
    env = subprocess_env(TESTS_DIR=str(TESTS_DIR), SGLANG_ENABLE_FLYDSL_FP32_GEMM="1")
    return _report(run_python(_BEFORE, env=env, timeout=500))


# The tests that read process 1's report (made once per test run, in the background from the start).
reads_before = pytest.mark.made_ahead("integration-before", _run_before)


@pytest.fixture
def before(request, shared_report):
    return made_ahead_report(request.node, shared_report)


@reads_before
def test_entry_point_is_registered_in_sglangs_group(before):
    assert ["fp32gemm", "sglang_fp32gemm.plugin:register"] in before["eps"]


@reads_before
def test_sglang_load_plugins_registers_the_plugin(before):
    st = before["state"]
    assert st["registered"] is True and st["errors"] == []
    assert before["router_at_load"]
    assert st["linear_target"] == LINEAR and st["compressor_target"] == WKV


@reads_before
def test_bindings_imported_before_load_plugins_are_rebound(before):
    assert before["linear_hooked"] and before["wkv_hooked"]
    assert before["compressor_bound"] and before["dsv41_bound"]
    assert before["add_cli_hooked"] and before["from_cli_hooked"] and before["from_cli_classmethod"]


@reads_before
def test_registering_twice_applies_each_hook_once(before):
    assert before["twice_same"]
    assert set(before["hook_counts"].values()) == {1}, before["hook_counts"]
    assert before["single_wrapper"]


@reads_before
def test_hooked_linear_returns_the_original_result_when_disabled_and_on_cpu(before):
    assert before["env_before"] == {"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1", "SGLANG_FLYDSL_FP32_GEMM_SOURCE": None}
    assert before["disabled_exact"]
    assert before["enabled_exact"]
    # The flag's layer file selects compressor layers: a plain call, with no layer, is on none of them.
    assert before["counters"] == {"torch|no compressor layer (a layer file is set)": 1}


@reads_before
def test_launch_flag_exports_the_environment(before):
    assert before["model_path"] == "dummy"
    assert before["env"] == {"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1", "SGLANG_FLYDSL_FP32_GEMM_SOURCE": "flag",
                             "SGLANG_FLYDSL_FP32_GEMM_LAYERS": before["layers_abs"]}
    assert before["router_enabled"] and before["router_source"] == "flag"
    assert before["router_selection"] == f"{before['layers_abs']}: layers=0-30 kinds=hca,csa"


@reads_before
def test_spawned_worker_inherits_the_flag_and_loads_the_plugin(before):
    wk = before["worker"]
    assert "error" not in wk, wk
    assert before["worker_exit"] == 0
    assert wk["env"] == before["env"]
    assert not wk["preloaded"]  # it came in through SGLang's loader, not the parent's memory
    assert wk["registered"] and wk["errors"] == []
    assert wk["router_built_at_load"] and wk["router_error"] is None
    assert wk["enabled"] and wk["source"] == "flag"
    assert wk["selection"] == f"{before['layers_abs']}: layers=0-30 kinds=hca,csa"
    assert wk["linear_hooked"] and wk["compressor_bound"] and wk["wkv_hooked"]


@reads_before
def test_bindings_imported_after_load_plugins_are_the_hooked_ones(before):
    # The spawned worker loads the plugins first, then imports the modules (fakes/spawn_worker.py).
    wk = before["worker"]
    assert not wk["longcat_preloaded"]  # really imported afterwards
    assert wk["linear_hooked"] and wk["longcat_bound"] and wk["dsv41_bound"] and wk["compressor_bound"]
    assert wk["wkv_hooked"]


# -- the real launcher -----------------------------------------------------------------------------------
STOPPED = "sglang-fp32gemm: bad configuration, launch stopped: "


def _launch(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", "dummy", *args],
                          capture_output=True, text=True, timeout=300, env=subprocess_env(**env))


def _bad_configuration(tmp_path, case: str) -> tuple[list[str], dict[str, str], str]:
    """A launch's bad configuration: (launch arguments, environment, what its one line names)."""
    bad = tmp_path / "layers.txt"
    bad.write_text("# ok\nlayers = 9-3\n")
    table = tmp_path / "tuned.csv"
    table.write_text(rows_csv([(4, 512, K)], gfx="gfx950", cu_num=256, kernel="nonsense"))
    flag = "--enable-flydsl-fp32-gemm"
    return {
        "layer-file-flag": ([flag, "--flydsl-fp32-gemm-layers", str(bad)], {},
                            f"{bad}:2: bad range '9-3'"),
        "table-env-flag": ([flag], {S.CONFIG_VAR: str(table)},
                           f"{table}:2: kernelName 'nonsense' is not a triton kernel"),
        "layer-file-env": ([], {S.ENABLE_VAR: "1", S.LAYERS_VAR: str(bad)}, f"{bad}:2: bad range '9-3'"),
        "enable-var": ([], {S.ENABLE_VAR: "maybe"}, f"{S.ENABLE_VAR}='maybe'"),
        "deterministic-var-flag": ([flag], {S.DETERMINISTIC_VAR: "maybe"}, f"{S.DETERMINISTIC_VAR}='maybe'"),
    }[case]


BAD_CASES = ["layer-file-flag", "table-env-flag", "layer-file-env", "enable-var", "deterministic-var-flag"]
# Every case stops in the same place (the plugin's ServerArgs.from_cli_args hook raises SystemExit),
# checked for all five in this process below; two real launches (a flag, a variable the plugin reads
# while it loads) show the launcher's side by default, the other three run in the slow job.
REAL_LAUNCHES = ("layer-file-flag", "enable-var")


@pytest.mark.parametrize("case", BAD_CASES)
def test_a_bad_configuration_stops_sglangs_argument_preparation_with_one_line(
        sglang_plugins_loaded, tmp_path, monkeypatch, case):
    """SGLang's own prepare_server_args, as the launcher calls it: SystemExit(one line), nothing chained."""
    from sglang.srt.server_args import prepare_server_args

    args, env, where = _bad_configuration(tmp_path, case)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as e:
        prepare_server_args(["--model-path", "dummy", *args])
    msg = e.value.code
    assert isinstance(msg, str) and msg.startswith(STOPPED + where) and "\n" not in msg, msg
    # Raised "from None": the interpreter prints the one line, exits 1, no chained ConfigError.
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_without_the_flag_the_plugin_stays_off_and_a_bad_layer_file_is_not_read(
        sglang_plugins_loaded, tmp_path, monkeypatch):
    from sglang.srt.server_args import prepare_server_args

    from sglang_fp32gemm import plugin

    _, env, _ = _bad_configuration(tmp_path, "layer-file-env")
    monkeypatch.setenv(S.LAYERS_VAR, env[S.LAYERS_VAR])
    assert "sglang.srt.server_args.ServerArgs.from_cli_args" in plugin.STATE["hooks"]
    sa = prepare_server_args(["--model-path", "dummy"])  # does not stop
    assert sa.model_path == "dummy"
    r = routing.get_router()
    assert not r.enabled and r.error is None


@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c in REAL_LAUNCHES else pytest.mark.slow)
                                  for c in BAD_CASES])
def test_launch_server_with_a_bad_configuration_stops_with_one_line(tmp_path, case):
    """Exit code 1, one stderr line naming the file:line or the variable, printed once, no traceback."""
    args, env, where = _bad_configuration(tmp_path, case)
    proc = _launch(*args, **env)
    err = proc.stderr
    assert proc.returncode == 1, (proc.returncode, err[-4000:])
    assert "Traceback" not in err and "ConfigError" not in err, err[-4000:]
    hits = [ln for ln in err.splitlines() if where in ln]
    assert len(hits) == 1, err[-4000:]  # printed once
    assert hits[0].startswith(STOPPED + where), hits


# -- process 2: SGLang's layout not found ------------------------------------------------------------------
_NOT_FOUND = r'''
import json, logging
records = []
class H(logging.Handler):
    def emit(self, rec):
        records.append([rec.levelname, rec.getMessage()])
logging.getLogger("sglang_fp32gemm").addHandler(H(level=logging.ERROR))
import sglang_fp32gemm.plugin as plugin
import sglang_fp32gemm.releases as releases
releases.LINEAR_MODULES = ("nowhere.gemm", "sglang.not_a_module.gemm", "sglang.kernels.ops.gemm.bf16_fp32_gone")
from sglang.srt.plugins import load_plugins
load_plugins()   # raising here would also be only logged by SGLang: check STATE too
rep = {"records": records, "state": {k: plugin.STATE[k] for k in ("registered", "linear_target",
                                                                  "compressor_target", "errors")},
       "paths": [m + ".linear_bf16_fp32" for m in releases.LINEAR_MODULES]}
import sglang.kernels.ops.gemm.bf16_fp32 as G
rep["linear_untouched"] = not hasattr(G.linear_bf16_fp32, "__wrapped__")
print("REPORT " + json.dumps(rep))
'''


def test_missing_sglang_layout_is_one_error_line_naming_every_path():
    rep = _report(run_python(_NOT_FOUND, timeout=300, env=subprocess_env(SGLANG_ENABLE_FLYDSL_FP32_GEMM="1")))
    errs = [m for lvl, m in rep["records"] if lvl == "ERROR"]
    assert len(errs) == 1, errs
    for p in rep["paths"]:
        assert p in errs[0], (p, errs[0])
    st = rep["state"]
    assert st["registered"] and st["linear_target"] is None and st["compressor_target"] == WKV
    assert len(st["errors"]) == 1 and rep["linear_untouched"]


# -- process 3: a worker started with a bad configuration keeps serving, exactly -----------------------------
_BAD_WORKER = r'''
import json, logging, os, tempfile
records = []
class H(logging.Handler):
    def emit(self, rec):
        records.append([rec.levelname, rec.getMessage()])
logging.getLogger("sglang_fp32gemm").addHandler(H(level=logging.DEBUG))
bad = os.path.join(tempfile.mkdtemp(), "bad.txt")
open(bad, "w").write("layers = 1\nkinds = hca, mla\n")
os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
os.environ["SGLANG_FLYDSL_FP32_GEMM_LAYERS"] = bad
import torch
from sglang.srt.plugins import load_plugins
load_plugins()   # register(): loads the configuration once, must not raise
from sglang_fp32gemm import plugin, routing
r = routing.get_router()
rep = {"bad": bad, "errors": list(plugin.STATE["errors"]), "describe": plugin.describe(),
       "router_error": r.error, "enabled": r.enabled, "registered": plugin.STATE["registered"]}
import sglang.kernels.ops.gemm.bf16_fp32 as G
g = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
x = torch.randn(4, 256, generator=g).bfloat16(); w = torch.randn(64, 256, generator=g).bfloat16()
rep["exact"] = torch.equal(G.linear_bf16_fp32(x, w), G.linear_bf16_fp32.__wrapped__(x, w))
load_plugins(); plugin.register(); routing.get_router()  # again: nothing re-read, nothing re-logged
rep["same_router"] = routing.get_router() is r
rep["routed"] = routing.linear_bf16_fp32(x, w).dtype == torch.float32
rep["counters"] = {f"{a}|{b}": v for (a, b), v in r.counters().items()}
rep["records"] = records
print("REPORT " + json.dumps(rep))
'''


def test_a_worker_with_a_bad_configuration_logs_it_once_and_serves_the_exact_result():
    rep = _report(run_python(_BAD_WORKER, timeout=300))
    where = f"{rep['bad']}:2: "
    assert rep["registered"] and not rep["enabled"]
    assert rep["router_error"].startswith(where) and "unknown kind(s) mla" in rep["router_error"]
    assert rep["errors"] == [f"bad configuration: {rep['router_error']}"]
    assert f"error: bad configuration: {rep['router_error']}" in rep["describe"]
    mentions = [(lvl, m) for lvl, m in rep["records"] if where in m]
    assert mentions == [("ERROR", f"sglang-fp32gemm disabled, bad configuration: {rep['router_error']}; "
                                  "every call runs SGLang's own GEMM")], rep["records"]
    assert rep["exact"] and rep["same_router"] and rep["routed"]
    assert rep["counters"] == {"torch|bad configuration": 2}  # the hooked call and the public function


# -- in this process: the DeepSeek-V4 Compressor hook ------------------------------------------------------
CFG = types.SimpleNamespace(hidden_size=K, rms_norm_eps=1e-6, qk_rope_head_dim=64)
# DeepSeek-V4-Pro: (layer_id, is_in_indexer, ratio, head_dim) -> wkv_gate N
KINDS = {"hca": (2, False, 128, 512, 1024), "csa": (3, False, 4, 512, 2048), "indexer": (3, True, 4, 128, 512)}


@pytest.fixture(scope="module")
def compressors(sglang_plugins_loaded):
    from sglang.srt.layers.attention.dsv4.compressor import Compressor

    out = {}
    for kind, (lid, indexer, ratio, hd, n) in KINDS.items():
        c = Compressor(CFG, layer_id=lid, is_in_indexer=indexer, freqs_cis=None, compress_ratio=ratio, head_dim=hd)
        assert tuple(c.wkv_gate.weight.shape) == (n, K)
        with torch.no_grad():
            c.wkv_gate.weight.copy_(rand_bf16(n, K) * 0.02)
        out[kind] = c
    return out


class KernelForSpy(list):
    """Every ``Router.kernel_for(x, w)`` call the hooks make: (x shape, w shape, w dtype), in order;
    ``weights`` holds the w tensors themselves."""

    def __init__(self):
        super().__init__()
        self.weights: list[torch.Tensor] = []


@pytest.fixture
def spy(monkeypatch):
    seen = KernelForSpy()
    orig = routing.Router.kernel_for

    def kernel_for(self, x, w, caller=None):
        if caller is None or caller.selected:  # what the hook hands over to be routed
            seen.append((tuple(x.shape), tuple(w.shape), w.dtype))
            seen.weights.append(w)
        return orig(self, x, w, caller)

    monkeypatch.setattr(routing.Router, "kernel_for", kernel_for)
    return seen


@pytest.fixture
def selects_calls(monkeypatch):
    """Every layer the router is asked to judge against the layer file (``Router.caller``)."""
    seen = []
    orig = routing.Router.caller

    def caller(self, layer):
        if layer is not None:
            seen.append(layer)
        return orig(self, layer)

    monkeypatch.setattr(routing.Router, "caller", caller)
    return seen


def _decisions(compressors, router) -> dict:
    """The layer decisions the hook kept on the compressor modules for ``router``: LayerInfo -> selected."""
    out = {}
    for c in compressors.values():
        got = c.__dict__.get(hooks.CALLER_ATTR)
        if got is not None and got[0] is router:
            out.update({caller.layer: caller.selected for caller in got[1].values()})
    return out


def _enable(monkeypatch, router=None):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    S.reload()
    return routing.reset_router(router)


def _original(comp, x, **kw):
    from sglang.srt.layers.attention.dsv4.compressor import Compressor

    return Compressor._compute_wkv_gate.__wrapped__(comp, x, **kw)


def _fused_weight(compressors):
    return torch.cat([compressors["csa"].wkv_gate.weight, compressors["indexer"].wkv_gate.weight]).contiguous()


BF16 = torch.bfloat16


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_compressor_calls_route_through_the_hook_with_their_layer(compressors, spy, monkeypatch, kind):
    lid, _, _, _, n = KINDS[kind]
    fake = ExactFake()
    r = _enable(monkeypatch, make_router([fake], shapes=[(4, n, K)]))
    c = compressors[kind]
    x = rand_bf16(4, K)
    out = c._compute_wkv_gate(x)
    assert_fp32_close(out, x, c.wkv_gate.weight)
    # One routed call, with the layer's own weight; the layer was named and judged once.
    assert spy == [((4, K), (n, K), BF16)] and spy.weights[0] is c.wkv_gate.weight
    assert _decisions(compressors, r) == {LayerInfo(lid, kind): True}
    assert fake.shapes == [(4, n, K)] * (PROBE_RUNS + 1)  # its precision probe, then the call
    assert not fake.violations
    assert r.counters() == {("fake", FAKE_KERNEL): 1}


def test_fused_weight_routes_as_the_fused_kind(compressors, spy, monkeypatch):
    fused = _fused_weight(compressors)
    assert tuple(fused.shape) == (2560, K)
    fake = ExactFake()
    r = _enable(monkeypatch, make_router([fake], shapes=[(8, 2560, K)]))
    x = rand_bf16(8, K)
    out = compressors["csa"]._compute_wkv_gate(x, weight=fused)
    assert_fp32_close(out, x, fused)
    assert spy == [((8, K), (2560, K), BF16)] and spy.weights[0] is fused
    assert _decisions(compressors, r) == {LayerInfo(3, "fused"): True}
    assert fake.shapes == [(8, 2560, K)] * (PROBE_RUNS + 1)
    assert r.counters() == {("fake", FAKE_KERNEL): 1}


def test_fused_weight_without_fast_backend_gives_the_fp32_product(compressors, monkeypatch):
    import inspect

    fused = _fused_weight(compressors)
    _enable(monkeypatch)
    x = rand_bf16(8, K)
    out = compressors["csa"]._compute_wkv_gate(x, weight=fused)
    assert torch.equal(out, torch.mm(x.float(), fused.float().t()))
    assert_fp32_close(out, x, fused)
    from sglang.srt.layers.attention.dsv4.compressor import Compressor

    if "weight" not in inspect.signature(Compressor._compute_wkv_gate.__wrapped__).parameters:
        # 0.5.23 has no weight=: disabled, SGLang's own method rejects it, untouched by the plugin.
        monkeypatch.delenv(S.ENABLE_VAR)
        S.reload()
        routing.reset_router()
        with pytest.raises(TypeError):
            compressors["csa"]._compute_wkv_gate(x, weight=fused)


def test_per_layer_selection_excludes_compressor_layers(compressors, spy, monkeypatch):
    fake = ExactFake()
    sel = LayerSelection(kinds=frozenset({"hca", "indexer"}), exclude=frozenset({2}))
    r = _enable(monkeypatch, make_router([fake], shapes=[(4, n, K) for *_, n in KINDS.values()], selection=sel))
    x = rand_bf16(4, K)
    outs = {k: compressors[k]._compute_wkv_gate(x) for k in ("hca", "csa", "indexer")}
    for k, out in outs.items():
        w = compressors[k].wkv_gate.weight
        assert_fp32_close(out, x, w)
    # hca is layer 2 (excluded), csa is not a selected kind: both take SGLang's exact path, whose own
    # linear_bf16_fp32 call is not routed (nor counted) a second time.
    assert torch.equal(outs["hca"], torch.mm(x.float(), compressors["hca"].wkv_gate.weight.float().t()))
    assert torch.equal(outs["csa"], torch.mm(x.float(), compressors["csa"].wkv_gate.weight.float().t()))
    assert spy == [((4, K), (512, K), BF16)] and spy.weights[0] is compressors["indexer"].wkv_gate.weight
    assert _decisions(compressors, r) == {LayerInfo(2, "hca"): False, LayerInfo(3, "csa"): False,
                                          LayerInfo(3, "indexer"): True}
    assert fake.shapes == [(4, 512, K)] * (PROBE_RUNS + 1)  # probe + the indexer call
    assert r.counters() == {("torch", "layer not selected"): 2, ("fake", FAKE_KERNEL): 1}


def test_layer_decision_is_made_once_per_compressor_module(compressors, spy, selects_calls, monkeypatch):
    fake = ExactFake()
    sel = LayerSelection(kinds=frozenset({"indexer", "fused"}))
    shapes = [(4, n, K) for *_, n in KINDS.values()] + [(4, 2560, K)]
    r = _enable(monkeypatch, make_router([fake], shapes=shapes, selection=sel))
    fused = _fused_weight(compressors)
    x = rand_bf16(4, K)
    for _ in range(3):
        for k in ("hca", "csa", "indexer"):
            assert_fp32_close(compressors[k]._compute_wkv_gate(x), x, compressors[k].wkv_gate.weight)
        assert_fp32_close(compressors["csa"]._compute_wkv_gate(x, weight=fused), x, fused)
    # One decision per (module, fused or not), however many calls.
    assert selects_calls == [LayerInfo(2, "hca"), LayerInfo(3, "csa"), LayerInfo(3, "indexer"),
                             LayerInfo(3, "fused")]
    assert _decisions(compressors, r) == {
        LayerInfo(2, "hca"): False, LayerInfo(3, "csa"): False, LayerInfo(3, "indexer"): True,
        LayerInfo(3, "fused"): True}
    assert [s[:2] for s in spy] == [((4, K), (512, K)), ((4, K), (2560, K))] * 3
    assert r.counters() == {("torch", "layer not selected"): 6, ("fake", FAKE_KERNEL): 6}
    # A new router (a new configuration) decides again, by its own layer file.
    selects_calls.clear()
    r2 = _enable(monkeypatch, make_router([ExactFake()], shapes=shapes, selection=LayerSelection(
        layers=frozenset({2}))))
    assert _decisions(compressors, r2) == {}
    compressors["hca"]._compute_wkv_gate(x)
    compressors["hca"]._compute_wkv_gate(x)
    assert selects_calls == [LayerInfo(2, "hca")]
    assert r2.counters() == {("fake", FAKE_KERNEL): 2}


@pytest.mark.parametrize("m", [1, 8, 40])
def test_enabled_fallback_equals_sglangs_cpu_path_exactly(compressors, monkeypatch, m):
    r = _enable(monkeypatch)
    x = rand_bf16(m, K)
    outs = {k: c._compute_wkv_gate(x) for k, c in compressors.items()}
    # One count per call: SGLang's inner linear_bf16_fp32 is not routed a second time.
    assert r.counters() == {("torch", "cpu tensors"): 3}
    assert _decisions(compressors, r) == {LayerInfo(lid, kind): True for kind, (lid, *_) in KINDS.items()}
    for k, c in compressors.items():
        w = c.wkv_gate.weight
        assert torch.equal(outs[k], torch.mm(x.float(), w.float().t()))
        assert torch.equal(outs[k], _original(c, x))
        assert_fp32_close(outs[k], x, w)


def test_disabled_compressor_equals_the_original_exactly(compressors, spy):
    assert not routing.get_router().enabled
    x = rand_bf16(16, K)
    for c in compressors.values():
        out = c._compute_wkv_gate(x)
        assert torch.equal(out, _original(c, x))
        assert torch.equal(out, torch.mm(x.float(), c.wkv_gate.weight.float().t()))
    r = routing.get_router()
    assert spy == [] and r.counters() == {} and _decisions(compressors, r) == {}


def test_non_bf16_weight_takes_sglangs_own_path(compressors, spy, monkeypatch):
    fake = ExactFake()
    r = _enable(monkeypatch, make_router([fake], shapes=[(4, 1024, K)]))
    c = compressors["hca"]
    bf16_weight = c.wkv_gate.weight
    w32 = bf16_weight.float()
    x = rand_bf16(4, K)
    # Not monkeypatch: its undo deletes a module parameter instead of restoring it.
    c.wkv_gate.weight = torch.nn.Parameter(w32, requires_grad=False)
    try:
        out = c._compute_wkv_gate(x)
    finally:
        c.wkv_gate.weight = bf16_weight
    assert torch.equal(out, torch.mm(x.float(), w32.t()))
    # The compressor hook named no layer and routed nothing; only the plain linear hook saw the
    # (fp32-weight) call inside SGLang's method, and the router turned it away.
    assert _decisions(compressors, r) == {}
    assert spy == [((4, K), (1024, K), torch.float32)]
    assert r.counters() == {("torch", "not a 2-D bf16 x bf16 call"): 1}
    assert fake.runs == 0


def test_plain_linear_callers_route_without_layer_and_keep_their_kwargs(sglang_plugins_loaded, spy, monkeypatch):
    import sglang.kernels.ops.gemm.bf16_fp32 as G

    fake = ExactFake()
    r = _enable(monkeypatch, make_router([fake], shapes=[(4, 512, K)]))
    x, w = rand_bf16(4, K), rand_bf16(512, K)
    out = G.linear_bf16_fp32(x, w)
    assert_fp32_close(out, x, w)
    assert spy == [((4, K), (512, K), BF16)] and spy.weights[0] is w and fake.runs == PROBE_RUNS + 1
    assert r.counters() == {("fake", FAKE_KERNEL): 1}
    x2 = rand_bf16(5, K)
    out2 = G.linear_bf16_fp32(x2, w, hpc_kernel_min_m=8)  # no row for M=5: SGLang's own call
    assert torch.equal(out2, G.linear_bf16_fp32.__wrapped__(x2, w, hpc_kernel_min_m=8))
    assert len(spy) == 2 and fake.runs == PROBE_RUNS + 1
    got = r.counters()
    assert got.pop(("fake", FAKE_KERNEL)) == 1
    assert list(got.values()) == [1] and next(iter(got))[0] == "torch"
    assert next(iter(got))[1].startswith("no tuned row"), got


@pytest.fixture
def aiter_branch(compressors, tmp_path, monkeypatch):
    import sglang.srt.layers.attention.dsv4.compressor as C

    install_fake_aiter(tmp_path, monkeypatch, mode="bf16", rocm=False)
    from aiter.tuned_gemm import tgemm

    monkeypatch.setattr(C, "_use_aiter", True)
    monkeypatch.setattr(C, "tgemm", tgemm, raising=False)
    return tgemm


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_rocm_aiter_branch_gives_fp32_when_enabled(compressors, aiter_branch, monkeypatch, kind):
    c = compressors[kind]
    w = c.wkv_gate.weight
    x = rand_bf16(8, K)
    ref = x.double() @ w.double().t()
    rounded = aiter_branch.mm(x, w, otype=torch.bfloat16).float()
    assert rel_err(rounded, ref) > 1e-4  # the stand-in really rounds

    disabled = c._compute_wkv_gate(x)
    assert torch.equal(disabled, rounded)  # SGLang's own (bf16-rounded) result, untouched

    _enable(monkeypatch)
    enabled = c._compute_wkv_gate(x)
    assert enabled.dtype == torch.float32
    assert rel_err(enabled, ref) < 1e-6
    assert_fp32_close(enabled, x, w)


def test_rocm_aiter_branch_fused_weight_gives_fp32_when_enabled(compressors, aiter_branch, monkeypatch):
    fused = _fused_weight(compressors)
    _enable(monkeypatch)
    x = rand_bf16(4, K)
    out = compressors["csa"]._compute_wkv_gate(x, weight=fused)
    assert rel_err(out, x.double() @ fused.double().t()) < 1e-6


def test_hook_logs_nothing_on_the_normal_path(compressors, monkeypatch, caplog):
    _enable(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sglang_fp32gemm"):
        for _ in range(3):
            compressors["hca"]._compute_wkv_gate(rand_bf16(2, K))
    assert [r for r in caplog.records if r.name.startswith("sglang_fp32gemm")] == []


# -- one launch for a ratio-4 layer's two compressor GEMMs (pairs.py) -------------------------------------
@pytest.fixture
def unlinked(compressors):
    """The compressor modules without a pair link or a held output (the fixture is per module)."""
    from sglang_fp32gemm import pairs

    def clear():
        for c in compressors.values():
            c.__dict__.pop(pairs.PARTNER_ATTR, None)
            c.__dict__.pop(pairs.AHEAD_ATTR, None)
        pairs._last.call = None

    clear()
    yield compressors
    clear()


def _pair_router(fake, m=4, **kw):
    from fakes.fake_backends import fake_table

    shapes = [(m, n, K) for *_, n in KINDS.values()]
    return make_router([fake], shapes=shapes, pair_table=fake_table([(m, 2560, K)], name="sm90_pair.csv"), **kw)


def _serial_step(compressors, x):
    """A serial ratio-4 layer's two compressor calls, in SGLang's order: the indexer's, then the layer's."""
    return compressors["indexer"]._compute_wkv_gate(x), compressors["csa"]._compute_wkv_gate(x)


PAIR_KEY = ("fake", f"{FAKE_KERNEL} pair 512+2048")


def test_a_serial_ratio4_layer_takes_one_launch_for_both_gemms_from_its_second_step(unlinked, monkeypatch):
    from fakes.fake_backends import PairFake

    fake = PairFake()
    r = _enable(monkeypatch, _pair_router(fake))
    idx, csa = unlinked["indexer"], unlinked["csa"]
    x = rand_bf16(4, K)
    a, b = _serial_step(unlinked, x)  # the first step links the two
    assert fake.pair_runs == 0 and fake.pair_binds == []
    for _ in range(3):
        x = rand_bf16(4, K)
        runs = fake.runs
        a, b = _serial_step(unlinked, x)
        assert_fp32_close(a, x, idx.wkv_gate.weight)
        assert_fp32_close(b, x, csa.wkv_gate.weight)
        assert fake.runs == runs  # no single-GEMM launch: the pair computed both
    assert fake.pair_binds == [(512, 2048, K)] and fake.pair_runs == PROBE_RUNS + 3
    assert r.counters() == {("fake", FAKE_KERNEL): 2, PAIR_KEY: 6}
    assert not fake.violations


def test_the_layers_call_computes_anew_where_its_x_is_not_the_pairs(unlinked, monkeypatch):
    from fakes.fake_backends import PairFake

    fake = PairFake()
    r = _enable(monkeypatch, _pair_router(fake))
    idx, csa = unlinked["indexer"], unlinked["csa"]
    x = rand_bf16(4, K)
    _serial_step(unlinked, x)
    # Another tensor with the same values, and x written in place between the two calls.
    x = rand_bf16(4, K)
    idx._compute_wkv_gate(x)
    other = x.clone()
    assert_fp32_close(csa._compute_wkv_gate(other), other, csa.wkv_gate.weight)
    x = rand_bf16(4, K)
    idx._compute_wkv_gate(x)
    x.mul_(2)
    assert_fp32_close(csa._compute_wkv_gate(x), x, csa.wkv_gate.weight)
    assert fake.pair_runs == PROBE_RUNS + 2
    # The two pair launches counted their indexer calls; the layer's calls ran its own route.
    assert r.counters()[PAIR_KEY] == 2 and r.counters()[("fake", FAKE_KERNEL)] == 4


def test_no_pair_in_the_multi_stream_region_in_deterministic_mode_or_for_an_unselected_layer(unlinked, monkeypatch):
    from fakes.fake_backends import PairFake

    fake = PairFake()
    r = _enable(monkeypatch, _pair_router(fake))
    x = rand_bf16(4, K)
    _serial_step(unlinked, x)
    with routing.overlapped():
        x = rand_bf16(4, K)
        a, b = _serial_step(unlinked, x)
    assert fake.pair_runs == 0 and r.counters() == {("fake", FAKE_KERNEL): 4}
    assert_fp32_close(b, x, unlinked["csa"].wkv_gate.weight)
    det = _enable(monkeypatch, _pair_router(PairFake(), deterministic=True))
    assert det.pairs is None
    sel = LayerSelection(kinds=frozenset({"indexer", "hca"}))
    fake = PairFake()
    _enable(monkeypatch, _pair_router(fake, selection=sel))
    for _ in range(2):
        x = rand_bf16(4, K)
        _serial_step(unlinked, x)
    assert fake.pair_runs == 0  # the layer's compressor is not selected: its call stays SGLang's


def test_a_pair_kernel_that_faults_leaves_both_calls_to_their_own_routes(unlinked, monkeypatch, caplog):
    from fakes.fake_backends import PairFake

    fake = PairFake()
    r = _enable(monkeypatch, _pair_router(fake))
    x = rand_bf16(4, K)
    _serial_step(unlinked, x)
    _serial_step(unlinked, rand_bf16(4, K))  # bound and probed: the pair serves
    fake.pair_fault = True
    for _ in range(3):
        x = rand_bf16(4, K)
        a, b = _serial_step(unlinked, x)
        assert_fp32_close(a, x, unlinked["indexer"].wkv_gate.weight)
        assert_fp32_close(b, x, unlinked["csa"].wkv_gate.weight)
    assert sum("pair 512+2048" in rec.getMessage() and "torch from now on" in rec.getMessage()
               for rec in caplog.records) == 1
    assert r.counters()[PAIR_KEY] == 2 and r.counters()[("fake", FAKE_KERNEL)] == 2 + 6


def test_a_pair_row_whose_kernel_has_no_pair_form_is_a_startup_error(tmp_path, monkeypatch):
    from sglang_fp32gemm import config as config_mod
    from sglang_fp32gemm.backends import parsers
    from sglang_fp32gemm.errors import ConfigError

    path = tmp_path / "mine_pair.csv"
    path.write_text(rows_csv([(1, 2560, K, "cutedsl_warpsplitk_o16_t8_k256_s16_b2")], libtype="cutedsl"))
    from sglang_fp32gemm.backends import default_backends

    backends = default_backends()
    env = {S.ENABLE_VAR: "1", "SGLANG_FLYDSL_FP32_GEMM_CONFIG": str(path)}
    with pytest.raises(ConfigError, match=rf"{path}:2: kernelName .* is not a cutedsl kernel with a pair form"):
        config_mod.load(env, parsers=parsers(backends), pair_parsers=parsers(backends, pair=True))
    path.write_text(rows_csv([(1, 2560, K, "cutedsl_dot_m1_t448_r1_pdl")], libtype="cutedsl"))
    cfg = config_mod.load(env, parsers=parsers(backends), pair_parsers=parsers(backends, pair=True))
    packaged = config_mod.load({S.ENABLE_VAR: "1"}, parsers=parsers(backends),
                               pair_parsers=parsers(backends, pair=True)).pair_table
    packaged_rows = len(packaged) if packaged is not None else 0
    assert len(cfg.pair_table) == packaged_rows + 1 and cfg.pair_table.files[-1] == str(path)
    # A libtype no backend with a pair form serves (a ROCm row): an error too; torch rows are not.
    path.write_text(rows_csv([(1, 2560, K)], libtype="hipblaslt") + rows_csv([(2, 2560, K, "")], libtype="torch")
                    .split("\n", 1)[1])
    with pytest.raises(ConfigError, match=rf"{path}:2: libtype 'hipblaslt' has no kernel with a pair form"):
        config_mod.load(env, parsers=parsers(backends), pair_parsers=parsers(backends, pair=True))
    path.write_text(rows_csv([(2, 2560, K, "")], libtype="torch"))
    cfg = config_mod.load(env, parsers=parsers(backends), pair_parsers=parsers(backends, pair=True))
    assert len(cfg.pair_table) == packaged_rows + 1


def test_pairs_link_and_serve_inference_tensors(unlinked, monkeypatch):
    """SGLang runs the model under torch.inference_mode, whose tensors keep no version counter: the pair is
    matched by the tensor object alone there."""
    from fakes.fake_backends import PairFake

    fake = PairFake()
    _enable(monkeypatch, _pair_router(fake))
    with torch.inference_mode():
        for _ in range(2):
            x = rand_bf16(4, K)
            a, b = _serial_step(unlinked, x)
    assert fake.pair_runs == PROBE_RUNS + 1
    assert_fp32_close(b, x, unlinked["csa"].wkv_gate.weight)
