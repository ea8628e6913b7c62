"""Fake backends for the child-process probe tests (CPU only).

The child builds them by name through ``by_name`` (passed as the probe's
resolver ``fakes.probe_fakes:by_name``). The kernelName picks a behaviour.
``bind`` appends one line to the file named by ``FAKE_PROBE_COUNT_FILE``, so
a test can count how many children really ran a kernel; ``source_tag``
returns ``FAKE_PROBE_SOURCE_TAG``.
"""

from __future__ import annotations

import os
import time

import torch

from sglang_fp32gemm.backends.base import OK, Backend

COUNT_VAR = "FAKE_PROBE_COUNT_FILE"
TAG_VAR = "FAKE_PROBE_SOURCE_TAG"

BEHAVIOURS = ("pass", "bf16", "exit139", "abort", "sleep", "raise", "wrong_shape", "half_written")


class ProbeFake(Backend):
    name = "probefake"
    libtype = "triton"

    def available(self):
        return OK

    def parse(self, kernel_name: str) -> str:
        if kernel_name not in BEHAVIOURS:
            raise ValueError(f"{kernel_name!r} is not one of {', '.join(BEHAVIOURS)}")
        return kernel_name

    def supports(self, cfg, m, n, k):
        return OK

    def source_tag(self, cfg) -> str:
        return os.environ.get(TAG_VAR, "v1")

    def bind(self, cfg, device, n, k):
        path = os.environ.get(COUNT_VAR)
        if path:
            with open(path, "a") as f:
                f.write(f"{cfg} {os.getpid()}\n")

        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            exact = (x.double() @ w.double().t()).float()
            if cfg == "pass":
                return exact
            if cfg == "bf16":
                return exact.to(torch.bfloat16).float()
            if cfg == "exit139":
                os._exit(139)
            if cfg == "abort":
                try:
                    import resource

                    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the test tree
                except Exception:
                    pass
                os.abort()
            if cfg == "sleep":
                time.sleep(3600)
            if cfg == "raise":
                raise RuntimeError("launch failed: invalid device function")
            if cfg == "wrong_shape":
                return exact[:, :-1].contiguous()
            # half_written: the right half of the output is never written
            out = torch.empty_like(exact)
            out[:, : out.shape[1] // 2] = exact[:, : out.shape[1] // 2]
            return out

        return fn


def by_name(name: str) -> Backend:
    if name != ProbeFake.name:
        raise KeyError(f"no backend named {name!r}")
    return ProbeFake()
