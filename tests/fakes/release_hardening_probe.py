"""The plugin in one SGLang release, for tests/test_hardening.py (one interpreter per release).

Loaded by SGLang's own ``load_plugins()`` with the plugin on (every hook
installed). Two parts, one ``REPORT <json>`` line:

* ``states``: for each plugin state (on with a good configuration, a bad
  configuration, off) the router is rebuilt from the environment, Dynamo is
  reset, a fresh compressor is built (its layer decision cold) and
  ``linear_bf16_fp32`` and ``Compressor._compute_wkv_gate`` are compiled with
  ``torch.compile(fullgraph=True, dynamic=True)`` and called: each call's
  relative error against float64, or the exception that stopped it; and the
  same for SGLang's own functions (unhooked), which some releases' CPU paths
  cannot compile (0.5.12 builds a C++ extension per call; 0.5.13-0.5.16 call
  ``torch.mm(out_dtype=)``, which inductor lowers only on CUDA and XPU).
* ``v41``: whether the release has DeepSeek-V4.1's compressor, what was
  hooked, and, with a fake fast backend, the router's counters for
  ``project()`` of a compressor named as layer 7 by the plugin's
  ``MQALayer.__init__`` hook, under several layer selections.
"""

from __future__ import annotations

import importlib
import json
import os
import types

os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"

import torch  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402

load_plugins()

from sglang_fp32gemm import exactness, plugin, routing  # noqa: E402
from sglang_fp32gemm import settings as S  # noqa: E402
from sglang_fp32gemm.errors import ConfigError  # noqa: E402

K = 256
lay = plugin.STATE["layout"]
G = importlib.import_module(lay.linear_module)
C = importlib.import_module("sglang.srt.layers.attention.dsv4.compressor")
CFG = types.SimpleNamespace(hidden_size=K, rms_norm_eps=1e-6, qk_rope_head_dim=64)
rep: dict = {"layout": lay.releases, "states": {}}


def rel(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> float:
    return exactness.rel_error(out, exactness.reference(x, w))


def compiled_error(fn, x: torch.Tensor, w: torch.Tensor):
    """``fn(x, w)`` under ``torch.compile(fullgraph=True, dynamic=True)``: its relative error, or the exception
    that stopped it (type, then message)."""
    try:
        return rel(torch.compile(fn, fullgraph=True, dynamic=True)(x, w), x, w)
    except Exception as e:  # the report says what stopped it
        return f"{type(e).__name__}: {str(e)[:400]}"


for state, value in (("on", "1"), ("bad", "maybe"), ("off", "0")):
    os.environ[S.ENABLE_VAR] = value
    try:
        S.reload()
    except ConfigError:
        pass
    r = routing.reset_router()
    torch._dynamo.reset()
    got: dict = {"enabled": r.enabled, "error": r.error is not None}
    x = exactness.random_bf16(4, K)
    w = exactness.random_bf16(64, K)
    linear = G.linear_bf16_fp32
    got["linear"] = compiled_error(lambda a, b: linear(a, b), x, w)
    got["linear_sglang"] = compiled_error(lambda a, b: linear.__wrapped__(a, b), x, w)
    if hasattr(C.Compressor, "_compute_wkv_gate"):
        comp = C.Compressor(CFG, layer_id=2, is_in_indexer=False, freqs_cis=None, compress_ratio=128, head_dim=64)
        with torch.no_grad():
            comp.wkv_gate.weight.copy_(exactness.random_bf16(*comp.wkv_gate.weight.shape))
        wkv = C.Compressor._compute_wkv_gate
        got["wkv"] = compiled_error(lambda a, b: comp._compute_wkv_gate(a), x, comp.wkv_gate.weight)
        got["wkv_sglang"] = compiled_error(lambda a, b: wkv.__wrapped__(comp, a), x, comp.wkv_gate.weight)
    rep["states"][state] = got

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fakes.fake_backends import ExactFake, make_router  # noqa: E402
from sglang_fp32gemm import hooks  # noqa: E402
from sglang_fp32gemm.layers import LayerSelection  # noqa: E402

v41: dict = {"v41_targets": plugin.STATE["v41_targets"], "errors": plugin.STATE["errors"]}
rep["v41"] = v41
try:
    D = importlib.import_module("sglang.srt.layers.attention.dsv4.dsv41_sparse")
except ModuleNotFoundError:
    D = None
v41["has_v41"] = D is not None and hasattr(D, "DeepseekV41Compressor")
if v41["has_v41"]:
    M = importlib.import_module("sglang.srt.models.deepseek_v4")
    v41["owner_init_hooked"] = hasattr(M.MQALayer.__init__, "__wrapped__")
    K, HD = 256, 64
    comp = D.DeepseekV41Compressor(K, HD, 2, 1e-6, fused_compress=False)
    with torch.no_grad():
        for p in comp.parameters():
            p.copy_(exactness.random_bf16(*p.shape))
    owner = torch.nn.Module()
    owner.layer_id = 7
    owner.compressor = comp
    hooks.name_v41_layer(None, owner)
    x = exactness.random_bf16(4, K)
    v41["runs"] = {}
    for name, sel in {"all": LayerSelection(), "layer_7": LayerSelection(layers=frozenset({7})),
                      "layers_0_3": LayerSelection(layers=frozenset(range(4))),
                      "hca_only": LayerSelection(kinds=frozenset({"hca"}))}.items():
        S.reload()
        r = routing.reset_router(make_router([ExactFake()], shapes=[(4, HD, K)], selection=sel))
        with torch.inference_mode():
            kv, score = comp.project(x)
        v41["runs"][name] = {
            "counters": {f"{a}|{b}": v for (a, b), v in r.counters().items()},
            "rel": max(exactness.rel_error(kv, exactness.reference(x, comp.wkv.weight)),
                       exactness.rel_error(score, exactness.reference(x, comp.wgate.weight)))}
print("REPORT " + json.dumps(rep))
