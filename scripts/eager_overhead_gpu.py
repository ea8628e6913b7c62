"""Where an eager routed call's host time goes, on a CUDA machine: each layer of the routed path timed
alone, in one process, interleaved, host time per call (us; the minimum over rounds of the mean of
``CALLS`` calls, a synchronize between rounds). The real router with the packaged tables.

    python scripts/eager_overhead_gpu.py [M N K ...]     (default: 1 1024 7168  8 1024 7168  8 2048 7168)

Layers, outermost last: the kernel's bound function alone (for a Triton kernel that calls Triton's C launcher
directly, also the same kernel bound to launch through ``CompiledKernel.run``, as before the direct launch:
the A/B of ``triton_launch.direct_launcher``); ``Entry.run`` (the guard around it);
``Router.call``; ``routing.linear_bf16_fp32`` (what SGLang's hooked call reaches); and, with no GPU
work, the decision alone (``Router.decide``) and its pieces. torch.mm (out_dtype fp32) for scale.
It also runs ``scripts/route_overhead.py``'s CPU measure, so this host's Python speed is on record.
"""
from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CALLS, ROUNDS = 2000, 9


def per_call(fns: dict, calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, float]:
    """{name: min over rounds of mean host us per call}; the variants interleaved round by round."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            got[name].append((time.perf_counter() - t0) * 1e6 / calls)
    torch.cuda.synchronize()
    return {k: round(min(v), 3) for k, v in got.items()}


def via_run_twin(bound, device: torch.device, n: int, k: int):
    """``bound``'s Triton kernel bound again to launch through ``CompiledKernel.run``; None for other kernels
    and where the direct launch is not taken."""
    launcher = getattr(bound.fn, "launcher", None)
    if launcher is None or not getattr(launcher, "direct", False):
        return None
    from sglang_fp32gemm.backends import default_backends, triton_launch

    b = next(b for bs in default_backends().values() for b in bs if b.name == bound.backend)
    direct = triton_launch.direct_launcher
    triton_launch.direct_launcher = lambda *a: (None, "off: the other side of the A/B")
    try:
        return b.bind(b.parse(bound.kernel_name), device, n, k)
    finally:
        triton_launch.direct_launcher = direct


def main(argv: list[str]) -> int:
    from sglang_fp32gemm import routing, settings
    from sglang_fp32gemm.exactness import random_bf16
    from sglang_fp32gemm.tools.timing import torch_mm

    os.environ[settings.ENABLE_VAR] = "1"
    settings.reload()
    router = routing.reset_router()
    torch.set_grad_enabled(False)  # as SGLang serves
    nums = [int(a) for a in argv] or [1, 1024, 7168, 8, 1024, 7168, 8, 2048, 7168]
    dev = torch.device("cuda", torch.cuda.current_device())
    for m, n, k in zip(nums[0::3], nums[1::3], nums[2::3]):
        x, w = random_bf16(m, k, device=dev), random_bf16(n, k, device=dev)
        routing.linear_bf16_fp32(x, w)  # resolve, bind, probe
        e = router.decide(x, w)
        fns = {"torch.mm": lambda: torch_mm(x, w)}
        if e.run is not None:
            kernel = e.bound.fn
            fns.update({"kernel alone": lambda: kernel(x, w), "Entry.run": lambda: e.run(x, w)})
            twin = via_run_twin(e.bound, dev, n, k)
            if twin is not None:
                fns["kernel alone through CompiledKernel.run"] = lambda: twin(x, w)
            launcher = getattr(kernel, "launcher", None)
            if launcher is not None:
                print(f"M={m} N={n} K={k}: Triton launch direct: {launcher.direct} ({launcher.direct_reason})")
        fns.update({"Router.call": lambda: router.call(x, w), "linear_bf16_fp32": lambda: routing.linear_bf16_fp32(x, w)})
        host = per_call(fns)
        parts = per_call({"decide": lambda: router.decide(x, w), "call_shape": lambda: routing.call_shape(x, w),
                          "capturing": lambda: routing.capturing(x),
                          "count": lambda: router.telemetry.count(e.key) if e.key else None,
                          "is_compiling": torch.compiler.is_compiling}, calls=20000, rounds=5)
        route = f"{e.route}:{e.detail}" + (f" (eager: {e.eager.route}:{e.eager.detail})" if e.eager else "")
        print(f"M={m} N={n} K={k} route {route}")
        print("  host us per call: " + ", ".join(f"{k_} {v}" for k_, v in host.items()))
        print("  without GPU work: " + ", ".join(f"{k_} {v}" for k_, v in parts.items()))
    print("scripts/route_overhead.py on this host (CPU tensors, fake kernel):", flush=True)
    sys.argv = [str(ROOT / "scripts" / "route_overhead.py")]
    runpy.run_path(sys.argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
