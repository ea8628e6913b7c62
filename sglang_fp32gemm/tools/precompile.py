"""Compile kernels in parallel worker processes before anything is timed: Triton and the CuTe DSL keep
compiled kernels on disk, so the timing process then only loads them.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import time
from typing import Optional

import torch

from sglang_fp32gemm.backends import by_name
from sglang_fp32gemm.exactness import random_bf16
from sglang_fp32gemm.tools import common

#: (backend name, kernelName, M, N, K)
Job = tuple[str, str, int, int, int]

_worker_binds: Optional[common.BindCache] = None


def _precompile_job(job: Job) -> Optional[str]:
    """In a worker process: bind and run one kernel once (fills Triton's / the DSL's disk cache)."""
    global _worker_binds
    name, kernel, m, n, k = job
    try:
        if _worker_binds is None:
            _worker_binds = common.BindCache()
        b = by_name(name)
        cfg = b.parse(kernel)
        dev = torch.device("cuda")
        fn = _worker_binds.get(b, cfg, kernel, dev, n, k)
        fn(random_bf16(m, k, device=dev), random_bf16(n, k, device=dev))
        torch.cuda.synchronize()
        return None
    except Exception as e:  # it fails again, and is logged, in the timing process
        return f"{name}:{kernel} M={m} N={n} K={k}: {type(e).__name__}: {str(e)[:200]}"


def precompile(jobs: list[Job], workers: int, until: Optional[float] = None,
               log: Optional[common.JsonLog] = None) -> dict:
    """Run ``jobs`` in ``workers`` spawned processes; stop waiting at monotonic time ``until``."""
    jobs = list(dict.fromkeys(jobs))
    if workers <= 1 or not jobs:
        return {"jobs": len(jobs), "done": 0, "failed": 0, "skipped": True}
    t = time.monotonic()
    done = 0
    fails = []
    ex = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
    try:
        futs = [ex.submit(_precompile_job, j) for j in jobs]
        timeout = None if until is None else max(0.0, until - time.monotonic())
        finished, pending = cf.wait(futs, timeout=timeout)
        for f in finished:
            try:
                r = f.result()
            except Exception as e:  # a worker that died
                r = f"worker: {type(e).__name__}: {e}"
            done += 1
            if r is not None:
                fails.append(r)
        for f in pending:
            f.cancel()
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    failed = len(fails)
    out = {"jobs": len(jobs), "done": done, "failed": failed, "s": round(time.monotonic() - t, 1)}
    print(f"precompiled {done}/{len(jobs)} kernel jobs in {out['s']}s with {workers} workers, {failed} failed",
          flush=True)
    for f in fails[:5]:
        print("   ", f, flush=True)
    if log is not None:
        log.write(event="precompile", **out, failures=fails[:50])
    return out
