"""Fake fast backends and a router builder for CPU-only routing tests.

The fakes implement the backend interface of ``sglang_fp32gemm.backends.base``
(available / parse / deterministic / supports / bind / kernel_name) and count
every call the router makes to them, so tests can say what the router asked
and when. The router only asks a fast backend about devices in
``RouteTable.device_types`` whose table key it knows; ``make_router`` adds "cpu"
and answers every device with its ``key`` (``FAKE_KEY`` by default), so CPU
tensors take the fast path through the real resolution, binding, probe,
counters and logging code.

A bound fake kernel checks the router's side of the contract on every call
(bf16 [M, K] x with unit stride along K, contiguous [N, K] w on the bound
device, the bound N and K, 1 <= M <= MAX_M); a violation is recorded in
``violations`` and raised.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Collection, Iterable, Optional, Union

import torch

from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.backends.base import MAX_M, OK, Backend
from sglang_fp32gemm.routing import Router
from sglang_fp32gemm.table import DeviceKey, TunedRow, TunedTable, format_rows, parse_csv

# Architectures no real device has (sm1, sm2), written the way a device key is.
FAKE_KEY = DeviceKey("sm1", 4)
OTHER_KEY = DeviceKey("sm2", 8)
FAKE_KERNEL = "fake_splitk_kernel"
OTHER_KERNEL = "fake_other_kernel"

Shape = Union[tuple[int, int, int], tuple[int, int, int, str]]


def rows_csv(shapes: Iterable[Shape], gfx: str = FAKE_KEY.gfx, cu_num: int = FAKE_KEY.cu_num,
             libtype: str = "triton", kernel: str = FAKE_KERNEL, us: float = 1.0) -> str:
    """A tuned CSV with one row per shape; a shape (M, N, K, name) names its own kernel.

    Row i (0-based) is on line i + 2 of the file.
    """
    head = ("gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,"
            "kernelName,err_ratio,tflops,bw")
    lines = [head]
    for s in shapes:
        m, n, k = s[:3]
        name = s[3] if len(s) > 3 else kernel
        lines.append(f"{gfx},{cu_num},{m},{n},{k},False,torch.bfloat16,torch.float32,False,False,"
                     f"{libtype},0,2,{us},{name},0.0,1.0,1.0")
    return "\n".join(lines) + "\n"


def fake_table(shapes: Iterable[Shape], name: str = "fake.csv", **kw) -> TunedTable:
    return TunedTable([(name, parse_csv(rows_csv(shapes, **kw), name))])


def enabled_settings(enabled: bool = True, deterministic: bool = False) -> settings_mod.Settings:
    return settings_mod.Settings(enabled, "env" if enabled else "default", (), None,
                                 deterministic, "env" if deterministic else "default")


def laid_over(top: TunedTable, base: TunedTable) -> TunedTable:
    """``base`` with ``top``'s rows overriding its rows of the same key: ``config.load``'s table outside the
    multi-stream region (``TunedTables.outside``) where the fast and serial files are of one origin."""
    t = TunedTable([("", base.every_row()), ("", top.every_row())])
    t.files = base.files + top.files
    return t


def make_config(table: Optional[TunedTable] = None, enabled: bool = True, deterministic: bool = False,
                det_table: Optional[TunedTable] = None,
                selection: Optional[layers_mod.LayerSelection] = None,
                eager_table: Optional[TunedTable] = None,
                serial_table: Optional[TunedTable] = None,
                pair_table: Optional[TunedTable] = None) -> config_mod.Config:
    """``serial_table``: the serial rows alone (laid over ``table`` here, as ``config.load`` does)."""
    table = table or TunedTable([])
    return config_mod.Config(enabled_settings(enabled, deterministic), table,
                             det_table or TunedTable([]), selection or layers_mod.LayerSelection(),
                             eager_table or TunedTable([]),
                             laid_over(serial_table, table) if serial_table is not None else None, pair_table)


def make_router(backends: Optional[list[Backend]] = None, table: Optional[TunedTable] = None,
                shapes: Iterable[Shape] = (), enabled: bool = True,
                selection: Optional[layers_mod.LayerSelection] = None,
                key: Optional[DeviceKey] = FAKE_KEY, libtype: str = "triton",
                deterministic: bool = False, det_table: Optional[TunedTable] = None,
                eager_table: Optional[TunedTable] = None, serial_table: Optional[TunedTable] = None,
                pair_table: Optional[TunedTable] = None) -> Router:
    """A Router over ``backends`` (grouped by libtype, in order) that routes CPU tensors.

    Every device's table key is ``key`` (None: no key).
    """
    if table is None:
        table = fake_table(shapes, libtype=libtype)
    by_lib: dict[str, list[Backend]] = {}
    for b in backends or []:
        by_lib.setdefault(b.libtype, []).append(b)
    cfg = make_config(table, enabled, deterministic, det_table, selection, eager_table, serial_table, pair_table)
    r = Router(cfg, by_lib)
    for routes in r.route_tables() + ([r.pairs.table] if r.pairs is not None else []):
        routes.device_types = ("cuda", "cpu")
        routes.device_key_of = lambda device: key  # type: ignore[method-assign]
    return r


def splitk_fp32(x: torch.Tensor, w: torch.Tensor, splits: int = 2) -> torch.Tensor:
    """An fp32 product computed differently from torch.mm (two K halves summed)."""
    k = x.shape[1]
    bounds = [k * i // splits for i in range(splits + 1)]
    out = torch.zeros(x.shape[0], w.shape[0], dtype=torch.float32, device=x.device)
    for a, b in zip(bounds, bounds[1:]):
        out += x[:, a:b].float() @ w[:, a:b].float().t()
    return out


@dataclasses.dataclass(frozen=True)
class FakeCfg:
    """What a fake's ``parse`` returns."""

    name: str


class ExactFake(Backend):
    """A correct fast backend that counts every call the router makes to it.

    ``kernels``: the kernelNames ``parse`` accepts (anything else: ValueError).
    ``deterministic``: True/False for every kernel, or the names that are.
    ``devices``: device types ``bind`` accepts (others: RuntimeError).
    ``events``: an optional shared list; "bind" and "run" events are appended.
    """

    name = "fake"
    libtype = "triton"

    def __init__(self, name: str = "fake", devices: tuple[str, ...] = ("cpu",),
                 kernels: Collection[str] = (FAKE_KERNEL,),
                 deterministic: Union[bool, Collection[str]] = True, libtype: str = "triton",
                 events: Optional[list] = None):
        self.name = name
        self.libtype = libtype
        self.devices = tuple(devices)
        self.kernels = tuple(kernels)
        self.det = deterministic
        self.events = events if events is not None else []
        self.lock = threading.Lock()
        #: method name -> calls: available, parse, deterministic, supports, bind, kernel_name
        self.calls: collections.Counter = collections.Counter()
        self.binds: list[tuple[str, str, int, int]] = []      # (kernel, device, N, K)
        self.runs = 0                                           # every run of a bound kernel, probes included
        self.kernel_runs: collections.Counter = collections.Counter()
        self.shapes: list[tuple[int, int, int]] = []           # (M, N, K) of every run
        self.violations: list[str] = []

    def _count(self, what: str) -> None:
        with self.lock:
            self.calls[what] += 1

    @property
    def supports_calls(self) -> int:
        return self.calls["supports"]

    @property
    def setup_calls(self) -> dict[str, int]:
        """Calls of everything but the bound kernels themselves."""
        return {k: v for k, v in self.calls.items() if v}

    # -- the interface ----------------------------------------------------
    def available(self):
        self._count("available")
        return OK

    def parse(self, kernel_name: str) -> FakeCfg:
        self._count("parse")
        if kernel_name not in self.kernels:
            raise ValueError(f"{self.name}: unknown kernelName {kernel_name!r}")
        return FakeCfg(kernel_name)

    def deterministic(self, cfg: FakeCfg) -> bool:
        self._count("deterministic")
        if isinstance(self.det, bool):
            return self.det
        return cfg.name in self.det

    def supports(self, cfg: FakeCfg, m: int, n: int, k: int):
        self._count("supports")
        return OK

    def kernel_name(self, cfg: FakeCfg) -> str:
        self._count("kernel_name")
        return cfg.name

    def bind(self, cfg: FakeCfg, device: torch.device, n: int, k: int):
        self._count("bind")
        with self.lock:
            self.binds.append((cfg.name, str(device), n, k))
            self.events.append(("bind", self.name, cfg.name, n, k))
        if device.type not in self.devices:
            raise RuntimeError(f"{self.name} does not run on {device}")

        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            self._check_contract(cfg, device, n, k, x, w)
            with self.lock:
                self.runs += 1
                self.kernel_runs[cfg.name] += 1
                self.shapes.append((x.shape[0], w.shape[0], x.shape[1]))
                self.events.append(("run", self.name, cfg.name, n, k))
            return self.compute(cfg, x, w)

        fn.fake_kernel = (self.name, cfg.name)  # type: ignore[attr-defined]
        return fn

    # -- what subclasses change ---------------------------------------------
    def compute(self, cfg: FakeCfg, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return splitk_fp32(x, w)

    def _check_contract(self, cfg, device, n, k, x, w) -> None:
        bad = []
        if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
            bad.append(f"dtypes {x.dtype}/{w.dtype}")
        if x.dim() != 2 or w.dim() != 2:
            bad.append(f"dims {x.dim()}/{w.dim()}")
        else:
            if not 1 <= x.shape[0] <= MAX_M:
                bad.append(f"M={x.shape[0]}")
            if x.shape[1] != k or tuple(w.shape) != (n, k):
                bad.append(f"shapes {tuple(x.shape)} x {tuple(w.shape)}, bound N={n} K={k}")
            if x.stride(1) != 1:
                bad.append(f"x strides {x.stride()}")
        if not w.is_contiguous():
            bad.append(f"w strides {w.stride()}")
        if x.device != device or w.device != device:
            bad.append(f"devices {x.device}/{w.device}, bound {device}")
        if bad:
            msg = f"{self.name} {cfg.name}: router broke the kernel contract: {'; '.join(bad)}"
            with self.lock:
                self.violations.append(msg)
            raise AssertionError(msg)


class Bf16RoundingFake(ExactFake):
    """Looks fine but rounds C to bf16 (the bug aiter PR #6005 fixed).

    ``rounding``: the kernelNames that round (None: all).
    """

    def __init__(self, rounding: Optional[Collection[str]] = None, **kw):
        super().__init__(**kw)
        self.rounding = rounding

    def compute(self, cfg, x, w):
        out = splitk_fp32(x, w)
        if self.rounding is None or cfg.name in self.rounding:
            out = out.to(torch.bfloat16).float()
        return out


class RaisingFake(ExactFake):
    """Each kernel passes its probe (its first ``ok_runs`` runs), then raises.

    ``raising``: the kernelNames that raise (None: all).
    """

    def __init__(self, ok_runs: int = 1, raising: Optional[Collection[str]] = None, **kw):
        super().__init__(**kw)
        self.ok_runs = ok_runs
        self.raising = raising

    def compute(self, cfg, x, w):
        with self.lock:
            n = self.kernel_runs[cfg.name]  # already counts this run
        if (self.raising is None or cfg.name in self.raising) and n > self.ok_runs:
            raise RuntimeError("fake kernel launch failed")
        return splitk_fp32(x, w)


class BindRaisingFake(ExactFake):
    """``bind`` raises (a compile or workspace failure)."""

    def bind(self, cfg, device, n, k):
        super().bind(cfg, device, n, k)
        raise RuntimeError("no workspace")


class PairFake(ExactFake):
    """ExactFake with a pair form (``bind_pair``, as ``cutedsl-dot`` and ``triton`` have): ``pair_binds`` its
    binds (N, N2, K), ``pair_runs`` its launches; with ``pair_fault`` set its launches raise."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.pair_binds: list[tuple[int, int, int]] = []
        self.pair_runs = 0
        self.pair_fault = False

    def bind_pair(self, cfg, device, n, n2, k):
        self._count("bind_pair")
        self.pair_binds.append((n, n2, k))
        if torch.device(device).type not in self.devices:
            raise RuntimeError(f"{self.name} does not run on {device}")

        def pair(x, w, w2):
            self._check_contract(cfg, torch.device(device), n, k, x, w)
            self._check_contract(cfg, torch.device(device), n2, k, x, w2)
            if self.pair_fault:
                raise RuntimeError("pair kernel fault")
            with self.lock:
                self.pair_runs += 1
            return self.compute(cfg, x, w), self.compute(cfg, x, w2)

        return pair


class SlowBindFake(ExactFake):
    """Widens the window in which concurrent first calls could bind or probe twice."""

    def bind(self, cfg, device, n, k):
        fn = super().bind(cfg, device, n, k)
        time.sleep(0.05)
        return fn


class UnavailableFake(ExactFake):
    def available(self):
        self._count("available")
        return False, "fake library missing"


class DecliningFake(ExactFake):
    def supports(self, cfg, m, n, k):
        self._count("supports")
        return False, "fake declines every call"


__all__ = [
    "FAKE_KEY", "OTHER_KEY", "FAKE_KERNEL", "OTHER_KERNEL", "rows_csv", "fake_table", "enabled_settings",
    "make_config", "make_router", "splitk_fp32", "FakeCfg", "ExactFake", "Bf16RoundingFake", "RaisingFake",
    "BindRaisingFake", "SlowBindFake", "UnavailableFake", "DecliningFake", "TunedRow", "format_rows",
]
