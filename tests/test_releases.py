"""The plugin inside every SGLang release with DeepSeek-V4 (0.5.12 to 0.5.23), on CPU.

Each release is the real wheel, installed with ``pip --no-deps --target`` into
``.sglang-releases/<version>`` by ``scripts/setup_releases.sh`` (plus the few
packages its import chain needs on top of .venv); 0.5.23 is the one in .venv.
Each runs in a fresh interpreter (tests/fakes/release_probe.py) with that
folder first on PYTHONPATH, then this worktree, so SGLang's own loader finds
the plugin through its entry point and imports this worktree's package.

By default only 0.5.23 and 0.5.20 run (setup_env.sh installs 0.5.20); the
other releases carry the ``releases`` marker, deselected by default:

    bash scripts/setup_releases.sh && .venv/bin/python -m pytest -q -m releases
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, TESTS_DIR, made_ahead_report, sglang_importable, subprocess_env
from fakes.fake_backends import FAKE_KERNEL, FAKE_KEY
from sglang_fp32gemm.backends.probe import TRIALS as PROBE_RUNS

RELEASES_DIR = Path(os.environ.get("SGLANG_RELEASES_DIR", REPO_ROOT / ".sglang-releases"))
NEWEST = "0.5.23"   # the one in .venv
DEFAULT_OLD = "0.5.20"  # installed by setup_env.sh; the rest are the marked job

JIT_DSV4 = "sglang.jit_kernel.dsv4.gemm"
ATTN_DSV4 = "sglang.kernels.ops.attention.dsv4.gemm"
GEMM = "sglang.kernels.ops.gemm.bf16_fp32"
KV = ["compute_kv_score"]
WKV = ["_compute_wkv_gate"]
# release -> (layout family, module defining linear_bf16_fp32, Compressor methods hooked,
#             does SGLang's own ROCm/aiter path round the compressor GEMM to bf16)
EXPECTED = {
    "0.5.12": ("0.5.12", "sglang.jit_kernel.deepseek_v4", KV, False),
    "0.5.13": ("0.5.13-0.5.14", JIT_DSV4, KV, True),
    "0.5.14": ("0.5.13-0.5.14", JIT_DSV4, KV, True),
    "0.5.15": ("0.5.15-0.5.16", JIT_DSV4, KV, True),
    "0.5.16": ("0.5.15-0.5.16", JIT_DSV4, KV, True),
    "0.5.17": ("0.5.17-0.5.18", ATTN_DSV4, KV, True),
    "0.5.18": ("0.5.17-0.5.18", ATTN_DSV4, KV + ["prelaunch_kv_score"], True),
    "0.5.19": ("0.5.19-0.5.20", ATTN_DSV4, WKV, True),
    "0.5.20": ("0.5.19-0.5.20", ATTN_DSV4, WKV, True),
    "0.5.21": ("0.5.21", GEMM, WKV, False),
    "0.5.22": ("0.5.22-0.5.23", GEMM, WKV, True),
    "0.5.23": ("0.5.22-0.5.23", GEMM, WKV, True),
}
# The releases with DeepSeek-V4.1's compressor (dsv41_sparse), whose project()/project_fused() are hooked
# to name the layer, and MQALayer.__init__ to give it its layer id.
HAS_V41 = ("0.5.21", "0.5.22", "0.5.23")
V41_HOOKS = ("sglang.srt.layers.attention.dsv4.dsv41_sparse.DeepseekV41Compressor.project",
             "sglang.srt.layers.attention.dsv4.dsv41_sparse.DeepseekV41Compressor.project_fused",
             "sglang.srt.models.deepseek_v4.MQALayer.__init__")
# Modules that bind linear_bf16_fp32 with ``from ... import`` at import time (besides the compressor).
LONGCAT = "sglang.srt.models.longcat_flash"
DSV41 = "sglang.srt.layers.attention.dsv4.dsv41_sparse"


def by_name_importers(version: str) -> list[str]:
    family = EXPECTED[version][1]
    return {JIT_DSV4: ["sglang.jit_kernel.dsv4"], ATTN_DSV4: ["sglang.kernels.ops.attention.dsv4", LONGCAT],
            GEMM: [DSV41, LONGCAT]}.get(family, [])


N = {"hca": 1024, "csa": 2048, "indexer": 512}
K = 7168
M = 4
LAYER = {"hca": 2, "csa": 3, "indexer": 3}  # the probe's compressors' layer ids
ROUTED = f"fake|{FAKE_KERNEL}"  # counters key of the fake backend's calls
STOPPED = "sglang-fp32gemm: bad configuration, launch stopped: "


def no_row(kind: str) -> str:
    """The router's reason for a call of this kind with no tuned row (the probe's fake device key)."""
    return f"no tuned row for {FAKE_KEY} N={N[kind]} K={K} at this M"


NO_ROWS = {no_row(k): 1 for k in N}


def _param(v: str, *marks: pytest.MarkDecorator):
    return pytest.param(v, id=v, marks=(*marks, *(() if v in (NEWEST, DEFAULT_OLD) else [pytest.mark.releases])))


RELEASES = [_param(v) for v in EXPECTED]


def releases_reading(script: str, key: str) -> list:
    """RELEASES, each marked to read ``tests/fakes/<script>``'s report for that release (made ahead, once)."""
    path = TESTS_DIR / "fakes" / script
    return [_param(v, pytest.mark.made_ahead(f"{key}-{v}", functools.partial(run_report, path, v))) for v in EXPECTED]


def release_pythonpath(version: str) -> str:
    """That release's folder (and the folders its .pth files name), the worktree, tests/."""
    parts = []
    if version == NEWEST and not sglang_importable():
        # e.g. the device machine: torch and the kernels' compilers, and SGLang's warp split-K file alone
        # (.devsite, a bare `sglang` package), not SGLang
        pytest.skip(f"SGLang {NEWEST} is not installed in this environment (pip install -e '.[sglang]')")
    if version != NEWEST:
        folder = RELEASES_DIR / version
        if not (folder / "sglang").is_dir():
            pytest.skip(f"SGLang {version} not installed in {folder}: run bash scripts/setup_releases.sh {version}")
        parts.append(str(folder))
        for pth in sorted(folder.glob("*.pth")):
            parts += [str(folder / ln.strip()) for ln in pth.read_text().splitlines()
                      if ln.strip() and not ln.startswith(("#", "import"))]
    parts += [str(REPO_ROOT), str(TESTS_DIR)]
    return os.pathsep.join(parts)


def release_env(version: str, **extra: str) -> dict[str, str]:
    env = subprocess_env(**extra)
    env["PYTHONPATH"] = release_pythonpath(version)
    return env


def run_report(script: Path, version: str) -> dict:
    """``script``'s ``REPORT {json}`` line, run in a fresh interpreter inside SGLang ``version``."""
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env=release_env(version), cwd=str(REPO_ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len("REPORT "):])


PROBED = releases_reading("release_probe.py", "release-probe")


@pytest.fixture
def report(request, shared_report):
    """The probe's report for this test's release (one subprocess per release per test run)."""
    rep = made_ahead_report(request.node, shared_report)
    assert "crash" not in rep, rep.get("traceback", rep)
    return rep


# -- routing observations, in one place ------------------------------------------------------------------
def assert_routed(obs: dict, fast: list[str], slow: dict[str, int] | None = None,
                  judged: dict[str, bool] | None = None) -> None:
    """The fake fast backend ran for exactly the kinds in ``fast`` (each kernel bound once: one probe
    at the row's shape, then the call); every other call took the exact fallback for the reasons
    counted in ``slow``; the router judged exactly the layers in ``judged`` (kind -> selected), once each."""
    counters = dict(obs["counters"])
    if fast:
        assert counters.pop(ROUTED) == len(fast), obs
        got = sorted(map(tuple, obs["fake_shapes"]))
        assert got == sorted([(M, N[k], K) for k in fast] * (PROBE_RUNS + 1)), obs  # probe + call per bound (N, K)
    elif obs.get("fake_shapes") is not None:
        assert obs["fake_shapes"] == [], obs
    assert obs.get("violations", []) == [], obs
    assert counters == {f"torch|{reason}": n for reason, n in (slow or {}).items()}, obs
    if judged is not None:
        assert obs["layers"] == sorted([LAYER[k], k, sel] for k, sel in judged.items()), obs


def assert_exact(rel: dict[str, float], tol: float = 1e-5) -> None:
    assert set(rel) == set(N)
    for kind, e in rel.items():
        assert e < tol, f"{kind}: relative error {e:.3e} >= {tol:.0e}"


# -- the tests ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", PROBED)
def test_release_is_loaded_by_sglangs_own_loader(version, report):
    assert report["sglang"][0] == version
    assert not report["plugin_preloaded"]
    assert ["fp32gemm", "sglang_fp32gemm.plugin:register"] in report["eps"]
    assert Path(report["plugin_file"]).resolve().is_relative_to(REPO_ROOT.resolve())


@pytest.mark.parametrize("version", PROBED)
def test_release_layout_and_hooks(version, report):
    family, linear_module, methods, _ = EXPECTED[version]
    lay, st = report["layout"], report["state"]
    assert st["registered"] and st["errors"] == [], st
    assert report["router_at_load"]
    assert lay["releases"] == family and lay["sglang_version"] == version
    assert lay["linear_module"] == linear_module and list(lay["layer_methods"]) == methods
    assert st["linear_target"] == f"{linear_module}.linear_bf16_fp32"
    comp = "sglang.srt.layers.attention.dsv4.compressor.Compressor"
    assert st["layer_targets"] == [f"{comp}.{m}" for m in methods]
    mqa = "sglang.srt.models.deepseek_v4.MQALayer"
    assert st["overlap_targets"][0] == f"{mqa}._forward_prepare_multi_stream"  # every release has it
    assert set(st["hooks"]) == {st["linear_target"], *st["layer_targets"],
                                "sglang.srt.server_args.ServerArgs.add_cli_args",
                                "sglang.srt.server_args.ServerArgs.from_cli_args",
                                *(V41_HOOKS if version in HAS_V41 else ()), *st["overlap_targets"]}
    # The hooked prepare marks the region while it runs, and only then (calls outside take the serial table).
    assert report["overlap_marked"] == {"before": False, "inside": [True], "after": False}
    assert report["linear_hooked"] and all(report["methods_hooked"].values())
    assert report["describe"][0] == f"SGLang {version}: release layout {family}"


@pytest.mark.parametrize("version", PROBED)
def test_release_rebinds_every_by_name_import(version, report):
    h = report["holders"]
    assert h["original"] == [], h  # no module still holds SGLang's unhooked function
    assert "sglang.srt.layers.attention.dsv4.compressor" in h["hooked"]
    assert report["layout"]["linear_module"] in h["hooked"]
    assert all(m.startswith("sglang_fp32gemm") for m in h["other"]), h
    # The package re-exports (imported before the plugin loaded) and the model modules imported after it.
    assert set(by_name_importers(version)) <= set(h["hooked"]), h
    assert report["twice_same"] and set(report["hook_counts"].values()) == {1}, report["hook_counts"]


@pytest.mark.parametrize("version", PROBED)
def test_release_compressor_layers_fp32_through_the_plugin(version, report):
    assert report["shapes"] == {k: [n, K] for k, n in N.items()}
    assert report["disabled"]["equal_original"] and report["disabled"]["counters"] == {}
    assert report["disabled"]["layers"] == []  # off: no layer is even looked at
    assert_exact(report["all_selected"]["rel"])
    assert_routed(report["all_selected"], ["hca", "csa", "indexer"], judged=dict.fromkeys(N, True))
    assert report["enabled_cpu"]["equal_original"]
    assert_exact(report["enabled_cpu"]["rel"])
    assert_routed(report["enabled_cpu"], [], NO_ROWS, judged=dict.fromkeys(N, True))


@pytest.mark.parametrize("version", PROBED)
def test_release_layer_selection_is_honoured(version, report):
    assert_exact(report["kinds_exclude"]["rel"])
    assert_routed(report["kinds_exclude"], ["indexer"], {"layer not selected": 2},
                  judged={"hca": False, "csa": False, "indexer": True})
    assert_exact(report["layer_2_only"]["rel"])
    assert_routed(report["layer_2_only"], ["hca"], {"layer not selected": 2},
                  judged={"hca": True, "csa": False, "indexer": False})
    if "prelaunch" in report:  # 0.5.18-0.5.20: the ROCm prefill-CP prelaunch path names the layer too
        assert_exact(report["prelaunch"]["rel"])
        assert_routed(report["prelaunch"], ["csa"], {"layer not selected": 2},
                      judged={"hca": False, "csa": True, "indexer": False})


@pytest.mark.parametrize("version", PROBED)
def test_release_rocm_aiter_path_gives_fp32_when_enabled(version, report):
    rounds = EXPECTED[version][3]
    cases = {"default": report["aiter"]}
    if "aiter_v2_off" in report:  # 0.5.13-0.5.14: the compressor's own _tgemm (SGLANG_OPT_USE_COMPRESSOR_V2=0)
        cases["v2_off"] = report["aiter_v2_off"]
        assert report["tgemm_untouched_while_off"]
        assert report["tgemm_proxy_after_calls"] == "CompressorTgemm"
    for name, a in cases.items():
        worst = min(a["sglang_rel"].values())
        if rounds:
            assert worst > 1e-4, (name, a["sglang_rel"])  # the simulated SGLang path really rounds
        else:
            assert max(a["sglang_rel"].values()) < 1e-5, (name, a["sglang_rel"])
        assert a["on_dtype"] == "torch.float32"
        assert_exact(a["on_rel"], 1e-6)
        assert_routed(a["on"], [], NO_ROWS, judged=dict.fromkeys(N, True))
        assert_exact(a["selected_rel"], 1e-6)  # deselected layers: the fallback is fp32 too
        assert_routed(a["selected"], ["indexer"], {"layer not selected": 2},
                      judged={"hca": False, "csa": False, "indexer": True})
        assert a["plain_on_rel"] < 1e-6
    if version in ("0.5.13", "0.5.14"):
        # SGLang's compressor asks aiter for bf16 output there; the plugin gives fp32.
        assert cases["v2_off"]["sglang_dtype"] == "torch.bfloat16"
    if report["layout"]["linear_aiter"]:
        assert report["aiter"]["plain_sglang_rel"] > 1e-4  # linear_bf16_fp32 itself rounds there


@pytest.mark.parametrize("version", PROBED)
def test_release_launch_flags_are_exported(version, report):
    f = report["flags"]
    assert f["model_path"] == "dummy"
    assert f["env"] == {"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1", "SGLANG_FLYDSL_FP32_GEMM_SOURCE": "flag",
                        "SGLANG_FLYDSL_FP32_GEMM_LAYERS": f["layers_path"]}
    assert f["enabled"] and f["error"] is None and f["source"] == "flag"
    assert f["selection"] == f"{f['layers_path']}: layers=0-30 kinds=hca,csa"


@pytest.mark.parametrize("version", PROBED)
def test_release_bad_layer_file_stops_argument_preparation_in_one_line(version, report):
    b = report["flags_bad"]
    assert b["raised"] == "SystemExit", b  # the interpreter prints its message, exits 1, no traceback
    assert b["message"].startswith(f"{STOPPED}{b['bad']}:2: ") and "unknown kind(s) mla" in b["message"], b
    assert "\n" not in b["message"] and not b["chained"], b


def assert_help_lists_the_flags(text: str) -> None:
    assert "--enable-flydsl-fp32-gemm" in text and "--flydsl-fp32-gemm-layers" in text
    assert "sglang-fp32gemm plugin" in text


@pytest.mark.parametrize("version", PROBED)
def test_release_argument_help_lists_the_flags(version, report):
    assert report["help"]["exit"] == 0, report["help"]
    assert_help_lists_the_flags(report["help"]["text"])


# The release's own launcher, end to end: it runs test_release_argument_help_lists_the_flags's path
# (load_plugins(), then prepare_server_args(argv)), which the real launches of test_sglang_integration
# show it takes. The slow job (0.5.23, 0.5.20) and the releases job.
@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_release_launch_server_help_lists_the_flags(version):
    proc = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--help"], capture_output=True, text=True,
                          timeout=300, env=release_env(version), cwd=str(REPO_ROOT))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert_help_lists_the_flags(proc.stdout)


# -- errors name the real cause ----------------------------------------------------------------------------
def test_import_helpers_tell_absent_from_failing(tmp_path, monkeypatch):
    from sglang_fp32gemm import releases

    pkg = tmp_path / "relpkg_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.py").write_text("class C:\n    a = 1\n")
    (pkg / "broken.py").write_text("import not_installed_pkg_xyz\nclass C:\n    a = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert releases.import_module("relpkg_probe.absent") == (None, None)
    assert releases.import_module("no_such_top_level_pkg.gemm") == (None, None)
    mod, err = releases.import_module("relpkg_probe.broken")
    assert mod is None
    assert err == ("relpkg_probe.broken failed to import: ModuleNotFoundError: "
                   "No module named 'not_installed_pkg_xyz'")
    assert releases.lookup("relpkg_probe.ok.C.a") == (True, None)
    assert releases.lookup("relpkg_probe.ok.C.b") == (False, None)
    assert releases.lookup("relpkg_probe.absent.C.a") == (False, None)
    assert releases.lookup("relpkg_probe.broken.C.a") == (False, err)
    for name in [n for n in sys.modules if n.startswith("relpkg_probe")]:
        monkeypatch.delitem(sys.modules, name)


def test_an_aiter_branch_not_gated_by_use_aiter_is_a_layout_not_yet_read(tmp_path, monkeypatch, caplog):
    """A linear module like 0.5.22-0.5.23's plus an aiter branch that ROCm alone reaches (a global named for
    aiter, no ``_use_aiter``; SGLang's repository has such a commit, no release up to 0.5.23 has): it is
    reported as unrecognized, and on ROCm its bf16 calls that no kernel takes get the fp32 product, since
    SGLang's own result would depend on the aiter build."""
    import dataclasses
    import logging

    import torch

    from sglang_fp32gemm import releases

    pkg = tmp_path / "relfake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "plain.py").write_text("def linear_bf16_fp32(x, y):\n    return x\n")
    (pkg / "hip.py").write_text("def _aiter_tuned_gemm():\n    return None\n\n\n"
                                "def linear_bf16_fp32(x, y):\n    return x\n")
    (pkg / "compressor.py").write_text("_use_aiter = False\n\n\nclass Compressor:\n"
                                       "    def _compute_wkv_gate(self, x):\n        return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(releases, "COMPRESSOR_MODULE", "relfake.compressor")
    newest = releases.RELEASE_LAYOUTS[0]
    assert newest.releases == "0.5.22-0.5.23"
    layouts = tuple(dataclasses.replace(newest, linear_module=f"relfake.{m}") for m in ("plain", "hip"))
    monkeypatch.setattr(releases, "RELEASE_LAYOUTS", layouts)
    bf16, fp32 = torch.ones(2, 2, dtype=torch.bfloat16), torch.ones(2, 2)
    try:
        monkeypatch.setattr(releases, "LINEAR_MODULES", ("relfake.plain",))
        lay, errors = releases.detect_layout()
        assert errors == [] and lay.releases == "0.5.22-0.5.23" and lay.linear_aiter is None
        assert not releases.linear_rounds(lay, bf16)

        monkeypatch.setattr(releases, "LINEAR_MODULES", ("relfake.hip",))
        with caplog.at_level(logging.WARNING, logger="sglang_fp32gemm"):
            lay, errors = releases.detect_layout()
        assert errors == [] and lay.releases == "unrecognized" and lay.linear_aiter == "hip"
        assert [r.getMessage() for r in caplog.records if "not in the plugin's table" in r.getMessage()]
        monkeypatch.setattr(torch.version, "hip", None)
        assert not releases.linear_rounds(lay, bf16) and not releases.aiter_active(lay)
        monkeypatch.setattr(torch.version, "hip", "6.4")
        assert releases.linear_rounds(lay, bf16) and releases.compressor_rounds(lay, bf16)
        assert not releases.linear_rounds(lay, fp32) and releases.aiter_active(lay)
        from sglang_fp32gemm import plugin

        for key, value in {"registered": True, "off": False, "layout": lay}.items():
            monkeypatch.setitem(plugin.STATE, key, value)
        said = [line for line in plugin.describe() if "aiter" in line]
        assert len(said) == 1 and said[0].startswith("ROCm: SGLang's linear_bf16_fp32 may call aiter"), said
    finally:
        for name in [n for n in sys.modules if n.startswith("relfake")]:
            del sys.modules[name]


_MISSING_PACKAGE = r'''
import json, sys
class Blocker:  # as if the optional package gguf were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "gguf" or name.startswith("gguf."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker())
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_fp32gemm import plugin
print("REPORT " + json.dumps({"errors": plugin.STATE["errors"], "linear": plugin.STATE["linear_target"],
                              "layer": plugin.STATE["compressor_target"], "describe": plugin.describe()}))
'''


def test_an_unrelated_import_failure_is_reported_as_itself():
    proc = subprocess.run([sys.executable, "-c", _MISSING_PACKAGE], capture_output=True, text=True, timeout=300,
                          env=release_env(NEWEST, SGLANG_ENABLE_FLYDSL_FP32_GEMM="1"), cwd=str(REPO_ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, proc.stderr[-4000:]
    rep = json.loads(lines[-1][len("REPORT "):])
    assert rep["errors"] == ["DeepSeek-V4 compressor: SGLang's sglang.srt.layers.attention.dsv4.compressor failed "
                             "to import: ModuleNotFoundError: No module named 'gguf'; compressor calls are left "
                             "unpatched"], rep
    assert rep["linear"] == f"{GEMM}.linear_bf16_fp32" and rep["layer"] is None
    assert not any("not found" in line for line in rep["describe"]), rep["describe"]
