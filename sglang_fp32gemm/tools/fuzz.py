"""GPU fuzz: random shapes through the routed call, each judged by ``exactness`` against float64
(output memory poisoned with NaN first, so an element the kernel never wrote shows).

    python -m sglang_fp32gemm fuzz --cases 300
"""

from __future__ import annotations

import collections
import json
import os
import random
import sys

import torch

from sglang_fp32gemm.tools.cli import Parser, positive_int


def parser() -> Parser:
    ap = Parser("python -m sglang_fp32gemm fuzz", __doc__)
    ap.add_argument("--cases", type=positive_int, default=300, help="random calls (default %(default)s)")
    ap.add_argument("--seed", type=int, default=None, help="repeat a run (default: a fresh seed, printed)")
    ap.add_argument("--out", default="fuzz.json", help="every case and the summary (default %(default)s)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("fuzz needs a CUDA GPU", file=sys.stderr)
        return 2
    os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
    from sglang_fp32gemm import exactness, routing, settings
    from sglang_fp32gemm.tools import common

    settings.reload()
    router = routing.reset_router()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    dev = torch.device("cuda")
    cases, failures = [], 0
    for _ in range(args.cases):
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
        exactness.poison(dev, m * n)
        out = routing.linear_bf16_fp32(x, w)
        got = exactness.measure(out, exactness.reference(x, w))
        ok = out.dtype == torch.float32 and tuple(out.shape) == (m, n) and got.ok
        failures += not ok
        cases.append({"M": m, "N": n, "K": k, "dtype": str(dtype), "wdtype": str(wdtype), "route": route,
                      "rel_err": got.rel_err, "ok": ok})
    routes = dict(collections.Counter(c["route"] for c in cases))
    summary = {"seed": seed, "cases": len(cases), "failures": failures, "routes": routes,
               "max_rel_err": max(c["rel_err"] for c in cases), "counters": {"|".join(key): v for key, v in router.counters().items()}}
    common.write_json(args.out, {"summary": summary, "cases": cases})
    print(json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
