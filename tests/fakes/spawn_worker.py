"""A worker body for multiprocessing "spawn" tests: what an SGLang scheduler process does first
(load the plugins, then import the model code whose bindings the hooks must have replaced).

It must live in an importable module (spawn pickles the target by name).
"""

import os


def main(queue) -> None:
    try:
        env = {k: os.environ.get(k) for k in ("SGLANG_ENABLE_FLYDSL_FP32_GEMM", "SGLANG_FLYDSL_FP32_GEMM_SOURCE",
                                             "SGLANG_FLYDSL_FP32_GEMM_LAYERS")}
        import sys

        preloaded = "sglang_fp32gemm.plugin" in sys.modules
        from sglang.srt.plugins import load_plugins

        load_plugins()
        # Imported after the plugins loaded: LongCat binds linear_bf16_fp32 by name and is not imported
        # by the plugin (which imports dsv41_sparse and the compressor to hook them).
        longcat_preloaded = "sglang.srt.models.longcat_flash" in sys.modules
        import sglang.kernels.ops.gemm.bf16_fp32 as G
        import sglang.srt.layers.attention.dsv4.compressor as C
        import sglang.srt.layers.attention.dsv4.dsv41_sparse as D
        import sglang.srt.models.longcat_flash as L

        from sglang_fp32gemm import plugin, routing

        built_at_load = routing._router  # register() builds the process router while the plugin loads
        r = routing.get_router()
        queue.put({
            "env": env,
            "preloaded": preloaded,
            "registered": plugin.STATE["registered"],
            "errors": list(plugin.STATE["errors"]),
            "enabled": r.enabled,
            "source": r.config.settings.enabled_source,
            "router_built_at_load": built_at_load is r,
            "router_error": r.error,
            "selection": r.config.selection.describe(),
            "linear_hooked": hasattr(G.linear_bf16_fp32, "__wrapped__"),
            "compressor_bound": C.linear_bf16_fp32 is G.linear_bf16_fp32,
            "longcat_preloaded": longcat_preloaded,
            "longcat_bound": L.linear_bf16_fp32 is G.linear_bf16_fp32,
            "dsv41_bound": D.linear_bf16_fp32 is G.linear_bf16_fp32,
            "wkv_hooked": hasattr(C.Compressor._compute_wkv_gate, "__wrapped__"),
        })
    except BaseException as e:  # report instead of hanging the parent
        queue.put({"error": f"{type(e).__name__}: {e}"})
