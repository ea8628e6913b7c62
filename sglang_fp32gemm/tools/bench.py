"""Benchmark the routed call against torch on the current GPU.

Both are timed in the same run, the same way: CUDA-graph replay of many
back-to-back calls rotating over >= 8 weight sets (>= 4x the L2), median.
The routed call goes through ``sglang_fp32gemm.routing.linear_bf16_fp32``
(table lookup, probe, backend), so every kernel it launches is counted.
Prints a table and writes JSON, Markdown and (with matplotlib) a PNG plot.

    python -m sglang_fp32gemm bench --out-dir docs/benchmarks/h200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import torch

K_DSV4 = 7168
N_DSV4 = (512, 1024, 2048, 2560)


def _versions() -> dict:
    import subprocess

    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
           "python": platform.python_version()}
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:
        out["triton"] = None
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
        try:
            out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:
            out["driver"] = None
    return out


def run(ms: list[int], ns: list[int], k: int, deterministic: bool = False) -> list[dict]:
    os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
    os.environ["SGLANG_FLYDSL_FP32_GEMM_DETERMINISTIC"] = "1" if deterministic else "0"
    from sglang_fp32gemm import routing, settings
    from sglang_fp32gemm.backends import torch_ref
    from sglang_fp32gemm.tools import timing

    settings.reload()
    router = routing.reset_router()
    dev = torch.device("cuda")
    results = []
    for n in ns:
        weights = timing.weight_sets(n, k, dev)
        for m in ms:
            x = torch.randn(m, k, device=dev).bfloat16()
            route = router.decide(x, weights[0]).route  # also runs the probe once
            t_torch = timing.time_per_call_us(timing.torch_mm, x, weights)
            t_routed = timing.time_per_call_us(lambda a, b: routing.linear_bf16_fp32(a, b), x, weights)
            xc, wc = torch.randn(m, k, device=dev).bfloat16(), torch.randn(n, k, device=dev).bfloat16()
            out = routing.linear_bf16_fp32(xc, wc)
            ref = torch_ref.reference_fp64(xc, wc)
            rec = {
                "M": m, "N": n, "K": k, "route": route,
                "torch_us": round(t_torch, 3), "routed_us": round(t_routed, 3),
                "speedup": round(t_torch / t_routed, 3),
                "x_floor": round(t_routed / timing.floor_us(m, n, k), 2),
                "rel_err": torch_ref.rel_error(out, ref),
                "allclose": bool(torch.allclose(out.double(), ref, atol=1e-2, rtol=1e-4)),
            }
            results.append(rec)
            print(f"{m:4d} {n:5d} {rec['route']:>7s} {t_torch:8.2f} {t_routed:8.2f} {rec['speedup']:6.3f}"
                  f" {rec['x_floor']:6.2f} {rec['rel_err']:9.2e}", flush=True)
        del weights
        torch.cuda.empty_cache()
    return results


def markdown(results: list[dict]) -> str:
    lines = ["| M | N | route | torch us | routed us | speedup | x floor | rel. error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['M']} | {r['N']} | {r['route']} | {r['torch_us']:.2f} | {r['routed_us']:.2f} | "
                     f"{r['speedup']:.3f} | {r['x_floor']:.2f} | {r['rel_err']:.1e} |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    ns = sorted({r["N"] for r in results})
    fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns), 3.6), squeeze=False)
    for ax, n in zip(axes[0], ns):
        rs = [r for r in results if r["N"] == n]
        ax.plot([r["M"] for r in rs], [r["torch_us"] for r in rs], label="torch.mm(out_dtype=fp32)")
        ax.plot([r["M"] for r in rs], [r["routed_us"] for r in rs], label="routed (plugin)")
        ax.set_title(f"N={n}, K={rs[0]['K']}")
        ax.set_xlabel("M")
        ax.set_ylabel("us per call")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_fp32gemm bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=str, default="1-32,40,48,56,64,80,96,112,128",
                    help="M values: list and ranges, e.g. 1-32,64 (default %(default)s)")
    ap.add_argument("--n", type=int, nargs="+", default=list(N_DSV4))
    ap.add_argument("--k", type=int, default=K_DSV4)
    ap.add_argument("--deterministic", action="store_true", help="run with the deterministic setting on")
    ap.add_argument("--out-dir", default=".", help="where bench.json, bench.md and bench.png go")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench needs a GPU (CUDA or ROCm)", file=sys.stderr)
        return 2
    ms = []
    for part in args.m.split(","):
        a, _, b = part.partition("-")
        ms.extend(range(int(a), int(b or a) + 1))
    print("   M     N   route torch_us routed_us speedup x_floor  rel_err")
    results = run(ms, args.n, args.k, args.deterministic)
    os.makedirs(args.out_dir, exist_ok=True)
    tag = "bench_det" if args.deterministic else "bench"
    with open(os.path.join(args.out_dir, f"{tag}.json"), "w") as f:
        json.dump({"versions": _versions(), "argv": sys.argv, "results": results}, f, indent=1)
    with open(os.path.join(args.out_dir, f"{tag}.md"), "w") as f:
        f.write(markdown(results))
    plot(results, os.path.join(args.out_dir, f"{tag}.png"))
    bad = [r for r in results if not (r["rel_err"] <= 1e-5 and r["allclose"])]
    print(f"{len(results)} shapes, {len(bad)} outside fp32 tolerance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
