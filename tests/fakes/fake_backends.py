"""Fake fast backends and a router builder for CPU-only routing tests.

The router only asks a fast backend about devices in ``Router.device_types``
whose table key it knows; ``make_router`` adds "cpu" and answers every device
with ``FAKE_KEY``, so CPU tensors can take the fast path through the real
decision, probe, counters and logging code.
"""

from __future__ import annotations

import threading
import time
from typing import Iterable, Optional

import torch

from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.backends.base import OK, Backend
from sglang_fp32gemm.routing import Router
from sglang_fp32gemm.table import DeviceKey, TunedTable, format_rows, parse_csv, TunedRow

FAKE_KEY = DeviceKey("fakegpu", 4)
FAKE_KERNEL = "fake_splitk_kernel"


def rows_csv(shapes: Iterable[tuple[int, int, int]], gfx: str = FAKE_KEY.gfx, cu_num: int = FAKE_KEY.cu_num,
             libtype: str = "triton", kernel: str = FAKE_KERNEL, us: float = 1.0) -> str:
    head = ("gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,"
            "kernelName,err_ratio,tflops,bw")
    lines = [head] + [f"{gfx},{cu_num},{m},{n},{k},False,torch.bfloat16,torch.float32,False,False,"
                      f"{libtype},0,2,{us},{kernel},0.0,1.0,1.0" for m, n, k in shapes]
    return "\n".join(lines) + "\n"


def fake_table(shapes: Iterable[tuple[int, int, int]], **kw) -> TunedTable:
    return TunedTable([("fake.csv", parse_csv(rows_csv(shapes, **kw), "fake.csv"))])


def enabled_settings(enabled: bool = True) -> settings_mod.Settings:
    return settings_mod.Settings(enabled, "env" if enabled else "default", (), None, False, "default")


def make_router(backends: Optional[list[Backend]] = None, table: Optional[TunedTable] = None,
                shapes: Iterable[tuple[int, int, int]] = (), enabled: bool = True,
                selection: Optional[layers_mod.LayerSelection] = None,
                key: Optional[DeviceKey] = FAKE_KEY, libtype: str = "triton") -> Router:
    if table is None:
        table = fake_table(shapes, libtype=libtype)
    by_lib: dict[str, list[Backend]] = {}
    for b in backends or []:
        by_lib.setdefault(b.libtype, []).append(b)
    r = Router(enabled_settings(enabled), table, by_lib, selection)
    r.device_types = ("cuda", "cpu")
    r._device_key = lambda device: key  # type: ignore[method-assign]
    return r


def splitk_fp32(x: torch.Tensor, w: torch.Tensor, splits: int = 2) -> torch.Tensor:
    """An fp32 product computed differently from torch.mm (two K halves summed)."""
    k = x.shape[1]
    bounds = [k * i // splits for i in range(splits + 1)]
    out = torch.zeros(x.shape[0], w.shape[0], dtype=torch.float32)
    for a, b in zip(bounds, bounds[1:]):
        out += x[:, a:b].float() @ w[:, a:b].float().t()
    return out


class ExactFake(Backend):
    """A correct fast backend: bf16 2-D contiguous inputs, any device in ``devices``."""

    name = "fake"
    libtype = "triton"

    def __init__(self, name: str = "fake", devices: tuple[str, ...] = ("cpu",)):
        self.name = name
        self.devices = devices
        self.lock = threading.Lock()
        self.runs = 0
        self.prepares = 0
        self.supports_calls = 0
        self.shapes: list[tuple[int, int, int]] = []

    def available(self):
        return OK

    def supports(self, x, w, row):
        with self.lock:
            self.supports_calls += 1
        if x.dim() != 2 or w.dim() != 2:
            return False, "not 2-D"
        if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
            return False, "needs bf16"
        if not (x.is_contiguous() and w.is_contiguous()):
            return False, "needs contiguous x and w"
        if x.device.type not in self.devices:
            return False, f"{x.device} not supported"
        if row.kernelName != FAKE_KERNEL:
            return False, f"unknown kernel {row.kernelName}"
        return OK

    def prepare(self, device, rows):
        with self.lock:
            self.prepares += 1

    def compute(self, x, w):
        return splitk_fp32(x, w)

    def run(self, x, w, row):
        with self.lock:
            self.runs += 1
            self.shapes.append((x.shape[0], w.shape[0], x.shape[1]))
        return self.compute(x, w)


class Bf16RoundingFake(ExactFake):
    """Looks fine but rounds C to bf16 (the bug aiter PR #6005 fixed)."""

    def compute(self, x, w):
        return splitk_fp32(x, w).to(torch.bfloat16).float()


class RaisingFake(ExactFake):
    """Passes the probe (its first ``ok_runs`` runs), then raises."""

    def __init__(self, ok_runs: int = 1, **kw):
        super().__init__(**kw)
        self.ok_runs = ok_runs

    def run(self, x, w, row):
        with self.lock:
            self.runs += 1
            n = self.runs
        if n > self.ok_runs:
            raise RuntimeError("fake kernel launch failed")
        return self.compute(x, w)


class SlowPrepareFake(ExactFake):
    """Widens the window in which concurrent first calls could probe twice."""

    def prepare(self, device, rows):
        with self.lock:
            self.prepares += 1
        time.sleep(0.05)


class UnavailableFake(ExactFake):
    def available(self):
        return False, "fake library missing"


class DecliningFake(ExactFake):
    def supports(self, x, w, row):
        with self.lock:
            self.supports_calls += 1
        return False, "fake declines every call"


__all__ = [
    "FAKE_KEY", "FAKE_KERNEL", "rows_csv", "fake_table", "enabled_settings", "make_router", "splitk_fp32",
    "ExactFake", "Bf16RoundingFake", "RaisingFake", "SlowPrepareFake", "UnavailableFake", "DecliningFake",
    "TunedRow", "format_rows",
]
