"""What an adversarial pass found (issue 14): traced hooks, autograd, DeepSeek-V4.1, the cost of an
installed plugin that is off, unusable table rows, unbounded error lines.

Each test here failed on the code before the fix (main at 2d9c301).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from conftest import assert_fp32_close, made_ahead_report, rand_bf16
from fakes.fake_backends import FAKE_KERNEL, ExactFake, make_router
from test_releases import HAS_V41, releases_reading

N, K = 32, 64


def _report(proc: subprocess.CompletedProcess) -> dict:
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len("REPORT "):])


HARDENED = releases_reading("release_hardening_probe.py", "release-hardening")


@pytest.fixture
def release_report(request, shared_report) -> dict:
    """tests/fakes/release_hardening_probe.py's report for this test's release (one interpreter per
    release per test run)."""
    return made_ahead_report(request.node, shared_report)


# -- 1: every hook traces under torch.compile(fullgraph=True), in every state ------------------------
@pytest.mark.parametrize("version", HARDENED)
def test_hooks_trace_under_fullgraph_compile_in_every_state(version, release_report):
    """On, every hooked call compiles and is exact. Off or misconfigured, the hook traces SGLang's own call,
    so it compiles wherever SGLang's own function does (on the CPU 0.5.12-0.5.16's do not: the report says
    why) and fails with the same exception where that does not."""
    states = release_report["states"]
    assert (states["on"]["enabled"], states["bad"]["error"], states["off"]["enabled"]) == (True, True, False)
    for state, got in states.items():
        calls = {k: v for k, v in got.items() if k in ("linear", "wkv")}
        assert "linear" in calls, got
        for name, err in calls.items():
            own = got[f"{name}_sglang"]
            if state == "on" or isinstance(own, float):
                assert isinstance(err, float) and err <= 1e-5, f"{version} {state} {name}: {err}"
            else:
                assert isinstance(err, str) and err.split(":")[0] == own.split(":")[0], (version, state, err, own)
    # Where SGLang's own CPU path compiles (0.5.17 on), nothing is excused.
    if version not in ("0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.16"):
        assert all(isinstance(v, float) for got in states.values() for k, v in got.items()
                   if k.startswith(("linear", "wkv"))), states


# -- 8: a call that autograd must see is never routed --------------------------------------------------
@pytest.mark.parametrize("which", ["x", "w"])
def test_inputs_requiring_grad_take_the_differentiable_fallback(make_bf16, which):
    fake = ExactFake()
    r = make_router([fake], shapes=[(4, N, K)])
    x, w = make_bf16(4, K), make_bf16(N, K)
    (x if which == "x" else w).requires_grad_(True)
    out = r.call(x, w)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    grad = x.grad if which == "x" else w.grad
    assert grad is not None and bool(torch.isfinite(grad).all())
    assert r.counters() == {("torch", "inputs require grad"): 1} and fake.runs == 0
    # Without grad mode (inference), the same inputs are routed.
    with torch.no_grad():
        assert_fp32_close(r.call(x, w), x.detach(), w.detach())
    assert r.counters()[("fake", FAKE_KERNEL)] == 1


# -- 5: an installed plugin that is off costs SGLang's processes nothing ---------------------------------
_OFF_COST = r'''
import json, sys
import sglang.srt.server_args  # every SGLang process has it before its plugins load
from sglang.srt.plugins import load_plugins
before = set(sys.modules)
load_plugins()
from sglang_fp32gemm import plugin
print("REPORT " + json.dumps({"added": sorted(set(sys.modules) - before), "state": {
    k: plugin.STATE[k] for k in ("registered", "off", "linear_target", "compressor_target", "hooks")},
    "describe": plugin.describe()}))
'''


def test_a_plugin_that_is_off_imports_no_model_code_and_hooks_no_gemm(sglang_available):
    from conftest import run_python

    rep = _report(run_python(_OFF_COST, timeout=300))
    # Only the plugin's own small modules: no DeepSeek model code (the old register() imported
    # ~2,300 modules, +2.3 s per process), no torch custom op, no router.
    assert all(m.startswith("sglang_fp32gemm") for m in rep["added"]), rep["added"]
    assert not {"sglang_fp32gemm.routing", "sglang_fp32gemm.hooks"} & set(rep["added"])
    st = rep["state"]
    assert st["registered"] and st["off"] and st["linear_target"] is None and st["compressor_target"] is None
    # The launch flags stay: they are how a launch turns the plugin on.
    assert st["hooks"] == ["sglang.srt.server_args.ServerArgs.add_cli_args",
                           "sglang.srt.server_args.ServerArgs.from_cli_args"]
    assert any("no GEMM hook installed" in line for line in rep["describe"])


# -- 3: DeepSeek-V4.1's compressor GEMMs obey the layer file; calls with no layer under a layer file ------
V41_K, V41_D = 256, 64


@pytest.fixture
def v41(sglang_plugins_loaded, monkeypatch):
    """Two real DeepSeek-V4.1 ratio-2 compressors (separate wkv/wgate, and fused), named as layer 7
    the way the hooked MQALayer.__init__ names them."""
    from sglang.srt.layers.attention.dsv4.dsv41_sparse import DeepseekV41Compressor

    from sglang_fp32gemm import hooks

    comps = {}
    for fused in (False, True):
        c = DeepseekV41Compressor(V41_K, V41_D, 2, 1e-6, fused_compress=fused)
        with torch.no_grad():
            for p in c.parameters():
                p.copy_(rand_bf16(*p.shape))
        owner = torch.nn.Module()
        owner.layer_id = 7
        owner.compressor = c
        hooks.name_v41_layer(None, owner)
        comps[fused] = c
    return comps


def _enable(monkeypatch, router):
    from sglang_fp32gemm import routing
    from sglang_fp32gemm import settings as S

    monkeypatch.setenv(S.ENABLE_VAR, "1")
    S.reload()
    return routing.reset_router(router)


def test_v41_layer_owner_init_is_hooked_to_name_the_layer(sglang_plugins_loaded):
    import sglang.srt.models.deepseek_v4 as M

    from sglang_fp32gemm import plugin

    assert hasattr(M.MQALayer.__init__, "__wrapped__")
    assert plugin.STATE["v41_targets"] == [
        "sglang.srt.layers.attention.dsv4.dsv41_sparse.DeepseekV41Compressor.project",
        "sglang.srt.layers.attention.dsv4.dsv41_sparse.DeepseekV41Compressor.project_fused"]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("selection, routed", [
    (dict(), True), (dict(kinds=frozenset({"v41"})), True), (dict(layers=frozenset({7})), True),
    (dict(layers=frozenset(range(4))), False), (dict(kinds=frozenset({"hca"})), False),
    (dict(exclude=frozenset(range(100001))), False)])
def test_v41_compressor_gemms_obey_the_layer_file(v41, monkeypatch, fused, selection, routed):
    from sglang_fp32gemm.layers import LayerSelection

    n = 2 * V41_D if fused else V41_D
    fake = ExactFake()
    r = _enable(monkeypatch, make_router([fake], shapes=[(4, n, V41_K)], selection=LayerSelection(**selection)))
    c = v41[fused]
    x = rand_bf16(4, V41_K)
    with torch.inference_mode():  # as SGLang serves; its nn.Linear weights require grad
        kv, score = c.project(x)
    weights = [c.wkv_gate.weight] if fused else [c.wkv.weight, c.wgate.weight]
    full = torch.cat([kv, score], dim=-1) if fused else None
    for i, w in enumerate(weights):
        got = full if fused else (kv, score)[i]
        assert_fp32_close(got.contiguous(), x, w)
    calls = len(weights)
    if routed:
        assert r.counters() == {("fake", FAKE_KERNEL): calls}
    else:
        assert r.counters() == {("torch", "layer not selected"): calls} and fake.runs == 0


def test_a_call_with_no_layer_is_not_routed_when_a_layer_file_is_set(sglang_plugins_loaded, monkeypatch, tmp_path):
    import sglang.kernels.ops.gemm.bf16_fp32 as G

    from sglang_fp32gemm.layers import load

    f = tmp_path / "layers.txt"
    f.write_text("kinds = hca, csa, indexer, fused, v41\n")
    fake = ExactFake()
    r = _enable(monkeypatch, make_router([fake], shapes=[(4, N, K)], selection=load(str(f))))
    x, w = rand_bf16(4, K), rand_bf16(N, K)
    assert_fp32_close(G.linear_bf16_fp32(x, w), x, w)  # a MoE gate, say: SGLang's own call
    assert r.counters() == {("torch", "no compressor layer (a layer file is set)"): 1} and fake.runs == 0
    # Without a layer file the table alone decides.
    r = _enable(monkeypatch, make_router([fake], shapes=[(4, N, K)]))
    assert_fp32_close(G.linear_bf16_fp32(x, w), x, w)
    assert r.counters() == {("fake", FAKE_KERNEL): 1}


# -- 11: rows that can never be used are start-up errors naming file:line --------------------------------
HEAD = ("gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,"
        "err_ratio,tflops,bw\n")


def _row(gfx: str = "sm90", m: int = 4, kernel: str = "triton_epoch_fp32_bm16_bn64_bk64_sk16_w4_s4") -> str:
    return (f"{gfx},132,{m},1024,7168,False,torch.bfloat16,torch.float32,False,False,triton,0,0,5.0,{kernel},"
            "0.0,1.0,1.0\n")


@pytest.mark.parametrize("row, what", [
    (_row(m=257), "column 'M' is 257"), (_row(m=100000), "column 'M' is 100000"),
    (_row(gfx="sm_90"), "'sm_90', which no device has"), (_row(gfx="SM90"), "'SM90', which no device has"),
    (_row(gfx="H200"), "'H200', which no device has")])
def test_rows_no_call_can_use_are_rejected_with_file_and_line(tmp_path, row, what):
    from sglang_fp32gemm.errors import ConfigError
    from sglang_fp32gemm.table import read_csv_file

    f = tmp_path / "t.csv"
    f.write_text(HEAD + _row() + row)
    with pytest.raises(ConfigError) as e:
        read_csv_file(f)
    assert str(e.value).startswith(f"{f}:3: ") and what in str(e.value)


# -- 14: a "one line" error stays readable whatever the input -----------------------------------------
def test_a_huge_kernel_name_gives_a_short_one_line_error(tmp_path, monkeypatch):
    from sglang_fp32gemm import config as config_mod
    from sglang_fp32gemm import settings as S
    from sglang_fp32gemm.backends import default_backends, parsers
    from sglang_fp32gemm.errors import ConfigError

    f = tmp_path / "huge.csv"
    f.write_text(HEAD + _row(kernel="triton_epoch_fp32_" + "x" * 100_000))
    env = {S.ENABLE_VAR: "1", S.CONFIG_VAR: str(f)}
    with pytest.raises(ConfigError) as e:
        config_mod.load(env, parsers=parsers(default_backends()))
    msg = str(e.value)
    assert msg.startswith(f"{f}:2: kernelName 'triton_epoch_fp32_xxx") and "\n" not in msg
    assert len(msg) <= 1000 and "chars]..." in msg


def test_a_huge_layer_file_line_gives_a_short_error(tmp_path):
    from sglang_fp32gemm import layers
    from sglang_fp32gemm.errors import ConfigError

    f = tmp_path / "layers.txt"
    f.write_text("layers = 1\n" + "y" * 50_000 + "\n")
    with pytest.raises(ConfigError) as e:
        layers.load(str(f))
    assert str(e.value).startswith(f"{f}:2: expected 'key = value'") and len(str(e.value)) <= 1000


# -- 13: the launch flag's help says what the tables route ----------------------------------------------
def test_launch_flag_help_matches_the_tables():
    import argparse

    from sglang_fp32gemm import plugin
    from sglang_fp32gemm.table import TunedTable

    ap = argparse.ArgumentParser()
    plugin._after_add_cli_args(None, ap)
    text = ap.format_help().replace("\n", " ")
    text = " ".join(text.split())
    top = max(r.M for r in TunedTable.load().rows())
    assert "M<=32" not in text and f"M up to {top}" in text
    assert "CuTe-DSL" in text and "FlyDSL" in text




@pytest.mark.parametrize("version", HARDENED)
def test_v41_compressor_is_named_and_selected_on_every_release_that_has_it(version, release_report):
    from fakes.fake_backends import FAKE_KERNEL as KERNEL

    rep = release_report["v41"]
    assert rep["has_v41"] is (version in HAS_V41), rep
    if not rep["has_v41"]:
        assert rep["v41_targets"] == []
        return
    assert rep["errors"] == [] and rep["owner_init_hooked"], rep
    assert [t.rsplit(".", 1)[1] for t in rep["v41_targets"]] == ["project", "project_fused"]
    runs = rep["runs"]
    assert all(run["rel"] <= 1e-5 for run in runs.values()), runs
    assert runs["all"]["counters"] == runs["layer_7"]["counters"] == {f"fake|{KERNEL}": 2}
    assert runs["layers_0_3"]["counters"] == runs["hca_only"]["counters"] == {"torch|layer not selected": 2}
