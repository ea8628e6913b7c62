"""Fake backends for the child-process probe tests (CPU only).

The child builds them by name through ``by_name`` (passed as the probe's
resolver ``fakes.probe_fakes:by_name``). The kernelName picks a behaviour.
``bind`` appends one line to the file named by ``FAKE_PROBE_COUNT_FILE``, so
a test can count how many children really ran a kernel; ``source_tag``
returns ``FAKE_PROBE_SOURCE_TAG``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch

from sglang_fp32gemm.backends.base import OK, Backend

COUNT_VAR = "FAKE_PROBE_COUNT_FILE"
TAG_VAR = "FAKE_PROBE_SOURCE_TAG"
#: "grandchild": where the helper process it leaves behind writes its pid.
GRANDCHILD_PID_VAR = "FAKE_PROBE_GRANDCHILD_PID"
#: "flood": how many MiB it writes to stderr (and a quarter of that to stdout).
FLOOD_MB_VAR = "FAKE_PROBE_FLOOD_MB"
FLOOD_END = "FLOOD-END"

BEHAVIOURS = ("pass", "bf16", "exit139", "abort", "sleep", "raise", "wrong_shape", "half_written",
              "partial_line", "grandchild", "flood")


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
        if cfg == "partial_line":  # a library announcing a compile without a newline
            sys.stdout.write("compiling ...")
            sys.stdout.flush()
        if cfg == "grandchild":  # a helper process that inherits and keeps the child's stdout/stderr
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(os.environ[GRANDCHILD_PID_VAR], "w") as f:
                f.write(str(helper.pid))
        if cfg == "flood":  # a runtime logging at its most verbose, then dying
            line = b"x" * 99 + b"\n"
            chunk = line * ((1 << 20) // len(line))
            mb = int(os.environ.get(FLOOD_MB_VAR, "64"))
            for i in range(mb + mb // 4):
                os.write(2 if i < mb else 1, chunk)
            os.write(2, FLOOD_END.encode() + b"\n")
            os._exit(3)

        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            exact = (x.double() @ w.double().t()).float()
            if cfg in ("pass", "partial_line", "grandchild"):
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
