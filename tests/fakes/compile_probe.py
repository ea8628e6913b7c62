"""torch.compile(fullgraph=True, dynamic=True) of the hooked SGLang calls, in every plugin state.

Run in a fresh interpreter with one SGLang release first on PYTHONPATH
(tests/test_hardening.py). The plugin is loaded by SGLang's own
``load_plugins()`` with the plugin on (so every hook is installed), then for
each state (on with a good configuration, a bad configuration, off) the
router is rebuilt from the environment, Dynamo is reset, a fresh compressor
is built (its layer decision cold) and ``linear_bf16_fp32`` and
``Compressor._compute_wkv_gate`` are compiled and called. Prints one line
``REPORT <json>``: per state, each call's relative error against float64 or
the exception that stopped it.
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
    try:
        f = torch.compile(lambda a, b: G.linear_bf16_fp32(a, b), fullgraph=True, dynamic=True)
        got["linear"] = rel(f(x, w), x, w)
    except Exception as e:  # the report says what stopped it
        got["linear"] = f"{type(e).__name__}: {str(e)[:400]}"
    if hasattr(C.Compressor, "_compute_wkv_gate"):
        comp = C.Compressor(CFG, layer_id=2, is_in_indexer=False, freqs_cis=None, compress_ratio=128, head_dim=64)
        with torch.no_grad():
            comp.wkv_gate.weight.copy_(exactness.random_bf16(*comp.wkv_gate.weight.shape))
        try:
            g = torch.compile(lambda a: comp._compute_wkv_gate(a), fullgraph=True, dynamic=True)
            got["wkv"] = rel(g(x), x, comp.wkv_gate.weight)
        except Exception as e:
            got["wkv"] = f"{type(e).__name__}: {str(e)[:400]}"
    rep["states"][state] = got
print("REPORT " + json.dumps(rep))
