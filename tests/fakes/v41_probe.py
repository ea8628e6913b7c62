"""DeepSeek-V4.1's ratio-2 compressor through the plugin, in one SGLang release (tests/test_hardening.py).

Loaded by SGLang's own ``load_plugins()`` with the plugin on. Reports whether
the release has the compressor, what was hooked, and, with a fake fast
backend, the router's counters for ``project()`` of a compressor named as
layer 7 by the real (hooked) ``MQALayer.__init__`` path's hook, under three
layer selections. Prints one line ``REPORT <json>``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402

load_plugins()

from fakes.fake_backends import ExactFake, make_router  # noqa: E402
from sglang_fp32gemm import exactness, hooks, plugin, routing  # noqa: E402
from sglang_fp32gemm import settings as S  # noqa: E402
from sglang_fp32gemm.layers import LayerSelection  # noqa: E402

rep: dict = {"v41_targets": plugin.STATE["v41_targets"], "errors": plugin.STATE["errors"]}
try:
    D = importlib.import_module("sglang.srt.layers.attention.dsv4.dsv41_sparse")
except ModuleNotFoundError:
    D = None
rep["has_v41"] = D is not None and hasattr(D, "DeepseekV41Compressor")
if rep["has_v41"]:
    M = importlib.import_module("sglang.srt.models.deepseek_v4")
    rep["owner_init_hooked"] = hasattr(M.MQALayer.__init__, "__wrapped__")
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
    rep["runs"] = {}
    for name, sel in {"all": LayerSelection(), "layer_7": LayerSelection(layers=frozenset({7})),
                      "layers_0_3": LayerSelection(layers=frozenset(range(4))),
                      "hca_only": LayerSelection(kinds=frozenset({"hca"}))}.items():
        S.reload()
        r = routing.reset_router(make_router([ExactFake()], shapes=[(4, HD, K)], selection=sel))
        with torch.inference_mode():
            kv, score = comp.project(x)
        rep["runs"][name] = {
            "counters": {f"{a}|{b}": v for (a, b), v in r.counters().items()},
            "rel": max(exactness.rel_error(kv, exactness.reference(x, comp.wkv.weight)),
                       exactness.rel_error(score, exactness.reference(x, comp.wgate.weight)))}
print("REPORT " + json.dumps(rep))
