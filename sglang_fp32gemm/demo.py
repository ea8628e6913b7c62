"""``python -m sglang_fp32gemm demo``: SGLang's DeepSeek-V4 compressor layers through the plugin.

Real ``Compressor`` modules of the installed SGLang at V4-Pro shapes (HCA, CSA, indexer, fused), loaded
through SGLang's ``load_plugins()``; each ``_compute_wkv_gate`` call prints its route, why, its relative
error against float64 and (on a GPU) its time.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import types


def main(argv: list[str] | None = None) -> int:
    from sglang_fp32gemm.tools.cli import Parser, positive_int

    ap = Parser("python -m sglang_fp32gemm demo", __doc__)
    ap.add_argument("--m", type=positive_int, nargs="+", default=[1, 8, 32, 64], help="rows per call (each >= 1)")
    ap.add_argument("--disable", action="store_true", help="run with the plugin off, for comparison")
    args = ap.parse_args(argv)
    # On while SGLang loads the plugin, so every hook is installed; --disable turns it off after.
    os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import torch

    try:
        from sglang.srt.layers.attention.dsv4.compressor import Compressor
        from sglang.srt.plugins import load_plugins
    except Exception as e:
        print(f"demo needs SGLang (pip install 'sglang-fp32gemm[sglang]'): {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    load_plugins()

    from sglang_fp32gemm import exactness, plugin, routing, settings

    os.environ[settings.ENABLE_VAR] = "0" if args.disable else "1"
    settings.reload()
    router = routing.reset_router()
    if not plugin.STATE["registered"] or plugin.STATE["compressor_target"] is None:
        print("the plugin's compressor hook is not installed: " + "; ".join(plugin.STATE["errors"]), file=sys.stderr)
        return 1
    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    print(f"SGLang Compressor layers, hidden 7168, on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'CPU'}; "
          f"plugin {'enabled' if router.enabled else 'disabled'}")
    cfg = types.SimpleNamespace(hidden_size=7168, rms_norm_eps=1e-6, qk_rope_head_dim=64)  # all Compressor reads
    layers = [
        ("HCA", Compressor(cfg, layer_id=2, is_in_indexer=False, freqs_cis=None, compress_ratio=128, head_dim=512), None),
        ("CSA", Compressor(cfg, layer_id=3, is_in_indexer=False, freqs_cis=None, compress_ratio=4, head_dim=512), None),
        ("indexer", Compressor(cfg, layer_id=3, is_in_indexer=True, freqs_cis=None, compress_ratio=4, head_dim=128), None),
    ]
    for _, c, _ in layers:
        with torch.no_grad():
            c.wkv_gate.weight.copy_(torch.randn_like(c.wkv_gate.weight, dtype=torch.float32).to(torch.bfloat16))
        c.to(dev)
    fused_w = torch.cat([layers[1][1].wkv_gate.weight, layers[2][1].wkv_gate.weight])  # N=2560
    layers.append(("fused", layers[1][1], fused_w))

    print(f"{'layer':8s} {'M':>4s} {'N':>5s}  {'route':7s} {'rel.err':>9s} {'time':>9s}  why")
    worst = 0.0
    for name, comp, w in layers:
        weight = w if w is not None else comp.wkv_gate.weight
        for m in args.m:
            x = torch.randn(m, 7168, device=dev).to(torch.bfloat16)
            info = routing.LayerInfo.of_compressor(comp.layer_id, comp.ratio, comp.is_in_indexer, w is not None)
            route, why = router.describe_call(x, weight, info)
            kw = {"weight": w} if w is not None else {}
            try:
                out = comp._compute_wkv_gate(x, **kw)
            except TypeError:
                # This SGLang's method predates the fused weight= argument and the plugin is off.
                print(f"{name:8s} {m:4d} {weight.shape[0]:5d}  (this SGLang's _compute_wkv_gate takes no weight=)")
                continue
            if dev.type == "cuda":
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(20):
                    comp._compute_wkv_gate(x, **kw)
                torch.cuda.synchronize()
                us = f"{(time.perf_counter() - t) / 20 * 1e6:7.1f}us"
            else:
                us = "      -"
            err = exactness.rel_error(out, exactness.reference(x, weight))
            worst = max(worst, err)
            print(f"{name:8s} {m:4d} {weight.shape[0]:5d}  {route:7s} {err:9.2e} {us:>9s}  {why}")
    exact = worst <= exactness.REL_TOL
    print(f"worst relative error vs float64: {worst:.2e} ({'fp32-level' if exact else 'NOT fp32-level'})")
    if dev.type == "cpu":
        print("(no GPU here: every call runs torch; `python -m sglang_fp32gemm explain --device-key "
              "sm90-h200:132` shows the routes an H200 would take, `sm90-h100:132` an H100's)")
    else:
        print("(times are eager wall-clock, host overhead included; `bench` gives CUDA-graph replay times)")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
