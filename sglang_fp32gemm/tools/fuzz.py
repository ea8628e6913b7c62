"""GPU fuzz: random shapes through the routed call against float64.

Before each call the allocator's free memory is filled with NaN, so an
output element the kernel never wrote shows as NaN.

    python -m sglang_fp32gemm.tools.fuzz --cases 300
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default="fuzz.json")
    args = ap.parse_args(argv)
    os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
    from sglang_fp32gemm import routing, settings
    from sglang_fp32gemm.backends import torch_ref
    from sglang_fp32gemm.tools import common

    settings.reload()
    router = routing.reset_router()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    dev = torch.device("cuda")
    cases, failures = [], 0
    for i in range(args.cases):
        kind = rng.random()
        if kind < 0.6:  # the shapes the tables hold (V4-Pro and V4-Flash), any M
            n, k, m = rng.choice((512, 1024, 2048, 2560)), rng.choice((7168, 4096)), rng.randint(0, 300)
        else:           # anything else
            n, k, m = rng.randint(1, 3000), rng.choice((7168, rng.randint(1, 9000))), rng.randint(0, 300)
        dtype = rng.choice((torch.bfloat16,) * 6 + (torch.float16,))
        wdtype = dtype if rng.random() < 0.9 else torch.float32
        x = torch.randn(m, k, device=dev).to(dtype)
        w = torch.randn(n, k, device=dev).to(wdtype)
        if rng.random() < 0.1 and m > 1:
            x = torch.randn(k, m, device=dev).to(dtype).t()  # a transposed view
        route = common.route_of(x, w) if m and n else "empty"
        junk = torch.full((m * n + 4096,), float("nan"), device=dev)
        del junk  # its NaN-filled block is what the next allocation reuses
        out = routing.linear_bf16_fp32(x, w)
        ref = torch_ref.reference_fp64(x, w)
        err = torch_ref.rel_error(out, ref) if m and n else 0.0
        close = bool(torch.allclose(out.double(), ref, atol=1e-2, rtol=1e-4)) if m and n else True
        ok = out.dtype == torch.float32 and tuple(out.shape) == (m, n) and err <= 1e-5 and close
        failures += not ok
        cases.append({"M": m, "N": n, "K": k, "dtype": str(dtype), "wdtype": str(wdtype), "route": route,
                      "rel_err": err, "ok": ok})
    routes = {}
    for c in cases:
        routes[c["route"]] = routes.get(c["route"], 0) + 1
    summary = {"seed": seed, "cases": len(cases), "failures": failures, "routes": routes,
               "max_rel_err": max(c["rel_err"] for c in cases), "counters": _counters(router)}
    with open(args.out, "w") as f:
        json.dump({"summary": summary, "cases": cases}, f, indent=1)
    print(json.dumps(summary))
    return 1 if failures else 0


def _counters(router) -> dict:
    try:
        return {"|".join(map(str, key)) if isinstance(key, tuple) else str(key): v
                for key, v in router.counters().items()}
    except Exception as e:  # the router's counter API is not this tool's business
        return {"error": f"{type(e).__name__}: {e}"}


if __name__ == "__main__":
    sys.exit(main())
