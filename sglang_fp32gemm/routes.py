"""The route table: which kernel serves each (device, N, K, M), resolved once.

``plan`` is the decision before binding, ``Entry`` the bound, probed kernel
(or the fallback and its reason), kept in a list indexed by M; a row the
eager table overrides, or whose backend is not ``eager_ok``, also gets what
eager calls take instead (``Plan.eager``, ``Entry.eager``). The rules:
docs/design.md ("Routing").
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm.backends.base import MAX_M, Backend
from sglang_fp32gemm.kernels import Bound, KernelCache
from sglang_fp32gemm.table import DeviceKey, TunedRow, TunedTable, device_key
from sglang_fp32gemm.telemetry import Key, Telemetry

CAPTURE_REASON = "not resolved before graph capture"


class Entry:
    """What calls of one shape (or one fallback reason) get: a kernel, or the fallback and why."""

    __slots__ = ("run", "bound", "reason", "row", "key", "first_log", "eager", "prepare")

    def __init__(self, run: Optional[Callable], bound: Optional[Bound], reason: str,
                 row: Optional[TunedRow] = None, counted: bool = True,
                 first_log: Optional[tuple[int, str]] = None, eager: Optional["Entry"] = None,
                 prepare: Optional[Callable[[], None]] = None):
        #: run(x, w) -> out, or None when the kernel raised; None: take the fallback.
        self.run = run
        self.bound = bound
        self.reason = reason
        self.row = row
        #: The counter this entry's calls go to; None: not counted (plugin off).
        self.key: Optional[Key] = (self.route, self.detail) if counted else None
        #: (level, message) logged once, at the first counted call.
        self.first_log = first_log
        #: What calls outside graph capture take instead (the eager table's row,
        #: or the row's backend is not eager_ok); None: they take this entry.
        self.eager = eager
        #: With ``eager``: run by each eager call, so that this kernel's per-stream state exists on
        #: the streams a graph is captured on after them (KernelFn.prepare); None: nothing to do.
        self.prepare = prepare

    @property
    def route(self) -> str:
        return self.bound.backend if self.run is not None else "torch"

    @property
    def detail(self) -> str:
        return self.bound.kernel_name if self.run is not None else self.reason


@dataclasses.dataclass(frozen=True)
class Plan:
    """The decision before binding: which backend and config a shape would use."""

    backend: Optional[Backend]
    cfg: Any
    row: Optional[TunedRow]
    reason: str
    #: The plan eager calls take instead: the eager table's, or another row's when ``backend`` is not eager_ok.
    eager: Optional["Plan"] = None


class RouteTable:
    #: Device types a fast backend may be asked about; tests with fake CPU
    #: backends add "cpu".
    device_types: tuple[str, ...] = ("cuda",)

    def __init__(self, config: Optional[config_mod.Config], backends: dict[str, list[Backend]],
                 deterministic: bool, kernels: KernelCache, telemetry: Telemetry,
                 table: Optional[TunedTable] = None, base: Optional[TunedTable] = None):
        self.config = config
        #: The fast table this route table reads (default the config's; the serial routes: the serial table).
        self.table = table if table is not None or config is None else config.table
        #: The table ``table`` was laid over (serial routes): its row serves where the top row's kernel cannot.
        self.base = base
        self.backends = backends
        self.deterministic = deterministic
        self.kernels = kernels
        self._telemetry = telemetry
        self._lock = threading.Lock()
        self._routes: dict[tuple[int, int, int], list[Optional[Entry]]] = {}
        self._available: dict[str, tuple[bool, str]] = {}
        self._dev_keys: dict[int, Optional[DeviceKey]] = {}

    # -- the hot path's lookup ----------------------------------------------
    def get(self, idx: int, m: int, n: int, k: int) -> Optional[Entry]:
        """The resolved entry of (device index, -1 on CPU, as ``Tensor.get_device``; N, K, M), or None."""
        route = self._routes.get((idx, n, k))
        return route[m] if route is not None else None

    # -- resolution, once per (device, N, K, M) -------------------------------
    def resolve(self, device: torch.device, m: int, n: int, k: int) -> Entry:
        idx = device.index if device.index is not None else -1
        route = self._routes.get((idx, n, k))
        if route is not None and route[m] is not None:
            return route[m]
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # Binding compiles and the probe synchronises: neither may run
            # inside a capture. This call takes torch; an eager call resolves.
            self._telemetry.once(logging.WARNING, f"sglang-fp32gemm: M={m} N={n} K={k} on {device} first seen "
                                 "during CUDA-graph capture; the captured call uses torch (run it once eagerly first)")
            return Entry(None, None, CAPTURE_REASON)
        e = self._make_entry(device, m, n, k)  # binds and probes outside the table's lock
        with self._lock:
            route = self._routes.setdefault((idx, n, k), [None] * (MAX_M + 1))
            if route[m] is not None:
                return route[m]  # another thread resolved it first
            route[m] = e
        if e.run is None:
            self._telemetry.once(logging.INFO, f"sglang-fp32gemm: M={m} N={n} K={k} on {device} uses torch: "
                                 f"{e.reason}")
        if e.eager is not None:
            a = e.eager
            what = f"{a.route} {a.detail} ({a.reason})" if a.run is not None else f"torch ({a.reason})"
            self._telemetry.once(logging.INFO, f"sglang-fp32gemm: M={m} N={n} K={k} on {device}: "
                                 f"eager calls use {what}")
        return e

    def _make_entry(self, device: torch.device, m: int, n: int, k: int) -> Entry:
        if device.type not in self.device_types:
            return Entry(None, None, f"{device.type} tensors")
        p = self.plan(self.device_key_of(device), m, n, k)
        eager = self._bind(p.eager, device, m, n, k) if p.eager is not None else None
        if eager is not None and eager.run is None and p.backend is not None and p.backend.eager_ok:
            # The eager table's kernel did not bind or pass its probe: eager calls keep the row's kernel.
            eager = None
        return self._bind(p, device, m, n, k, eager)

    def _bind(self, p: Plan, device: torch.device, m: int, n: int, k: int,
              eager: Optional[Entry] = None) -> Entry:
        if p.backend is None:
            return Entry(None, None, p.reason, p.row, eager=eager)
        bound = self.kernels.get(p.backend, p.cfg, device, n, k, p.row.M)
        if bound.fn is not None and eager is not None:
            # Eager calls of this M go elsewhere, so the first call of this
            # kernel at this M would come inside a capture: run it here.
            self.kernels.warm(bound, device, m, n, k)
        if bound.fn is None:
            return Entry(None, bound, bound.disabled_reason, p.row, eager=eager)
        prepare = self.kernels.preparer(bound, m) if eager is not None else None
        return Entry(self.kernels.guard(bound), bound, p.reason, p.row, eager=eager, prepare=prepare)

    def retire(self, bound: Bound) -> None:
        """A kernel disabled at run time: its entries become fallbacks with its reason."""
        with self._lock:
            for route in self._routes.values():
                for i, e in enumerate(route):
                    if e is not None and e.bound is bound and e.run is not None:
                        route[i] = e = Entry(None, bound, bound.disabled_reason, e.row, eager=e.eager)
                    if e is not None and e.eager is not None and e.eager.bound is bound and e.eager.run is not None:
                        e.eager = Entry(None, bound, bound.disabled_reason, e.eager.row)

    def device_key_of(self, device: torch.device) -> Optional[DeviceKey]:
        idx = device.index if device.index is not None else -1
        if idx not in self._dev_keys:
            self._dev_keys[idx] = device_key(device)
        return self._dev_keys[idx]

    def backend_available(self, b: Backend) -> tuple[bool, str]:
        got = self._available.get(b.name)
        if got is None:
            try:
                got = b.available()
            except Exception as e:
                got = (False, f"availability check raised {type(e).__name__}: {e}")
            self._available[b.name] = got
            if not got[0]:
                self._telemetry.once(logging.INFO, f"sglang-fp32gemm: backend {b.name} unavailable: {got[1]}")
        return got

    def plan(self, dev: Optional[DeviceKey], m: int, n: int, k: int, check_available: bool = True) -> Plan:
        """Row and backend for a shape on a device key; no binding, no probe."""
        if self.config is None:
            return Plan(None, None, None, "bad configuration")
        if dev is None:
            return Plan(None, None, None, "no device key")
        row = self._row(dev, m, n, k)
        if row is None:
            return Plan(None, None, None, f"no tuned row for {dev} N={n} K={k} at this M")
        p = self._plan_row(row, m, n, k, check_available)
        if p.backend is None and row.libtype != "torch" and self.base is not None:
            below = self.base.lookup(dev, m, n, k)
            alt = self._plan_row(below, m, n, k, check_available) if below not in (None, row) else None
            if alt is not None and alt.backend is not None:
                # The serial row's kernel cannot serve here (unavailable, declines): the fast row's can.
                why = f"{alt.reason}; the serial row cannot serve: {p.reason}"
                p, row = dataclasses.replace(alt, reason=why), below
        eager = self._eager_table_plan(dev, row, m, n, k, check_available)
        if eager is None and p.backend is not None and not p.backend.eager_ok:
            eager = self._eager_plan(dev, p, m, n, k, check_available)
        return p if eager is None else dataclasses.replace(p, eager=eager)

    def _eager_table_plan(self, dev: DeviceKey, row: TunedRow, m: int, n: int, k: int,
                          check_available: bool) -> Optional[Plan]:
        """The eager table's plan for this call (fast mode), where it names another kernel than ``row``
        whose backend is available, takes the call and is eager_ok; None: eager calls follow the fast
        table."""
        table = self.config.eager_table
        erow = table.lookup(dev, m, n, k) if table is not None and not self.deterministic else None
        # Only the eager row of the fast row's own M: another M's (reached by rounding up) was made for that row.
        if erow is None or erow.M != row.M or (erow.libtype, erow.kernelName) == (row.libtype, row.kernelName):
            return None
        alt = self._plan_row(erow, m, n, k, check_available)
        if alt.backend is None or not alt.backend.eager_ok:
            return None  # it cannot serve here (unavailable, declines) or launches slowly: the row's rules apply
        return dataclasses.replace(alt, reason=f"{alt.reason}; eager call: the eager table's row")

    def _row(self, dev: DeviceKey, m: int, n: int, k: int) -> Optional[TunedRow]:
        row = self.config.det_table.lookup(dev, m, n, k) if self.deterministic else None
        return row or self.table.lookup(dev, m, n, k)

    def _eager_plan(self, dev: DeviceKey, p: Plan, m: int, n: int, k: int, check_available: bool) -> Plan:
        """What eager calls take instead of ``p``: the row of (dev, N, K) nearest M whose backend is eager_ok."""
        tables = (self.table, self.config.det_table) if self.deterministic else (self.table,)
        ms = sorted({mm for t in tables for mm in t.ms(dev, n, k)})
        why = f"eager call: {p.backend.name} host cost exceeds torch's"
        seen = {p.row}
        for mm in [c for c in ms if c >= m] + [c for c in reversed(ms) if c < m]:
            row = self._row(dev, mm, n, k)
            if row is None or row in seen:
                continue
            seen.add(row)
            alt = self._plan_row(row, m, n, k, check_available)
            if alt.backend is not None and alt.backend.eager_ok:
                return dataclasses.replace(alt, reason=f"{alt.reason}; {why}")
        return Plan(None, None, None, f"{why}; no eager-capable row for this shape")

    def _plan_row(self, row: TunedRow, m: int, n: int, k: int, check_available: bool) -> Plan:
        """The first backend of the row's libtype that parses its kernelName and takes this call."""
        det = self.deterministic
        candidates = self.backends.get(row.libtype)
        if not candidates:
            return Plan(None, None, row, f"row {row.source}: libtype {row.libtype} is served by torch")
        reasons = []
        for b in candidates:
            try:
                cfg = b.parse(row.kernelName)
            except ValueError:
                continue  # another backend of this libtype names it
            if check_available:
                ok, why = self.backend_available(b)
                if not ok:
                    reasons.append(f"{b.name}: {why}")
                    continue
            if det and not b.deterministic(cfg):
                reasons.append(f"{b.name}: {row.kernelName} is not deterministic (deterministic mode is on)")
                continue
            try:
                ok, why = b.supports(cfg, m, n, k)
            except Exception as e:
                ok, why = False, f"supports() raised {type(e).__name__}: {e}"
            if not ok:
                reasons.append(f"{b.name}: {why}")
                continue
            return Plan(b, cfg, row, f"row {row.source}")
        return Plan(None, None, row, f"row {row.source}: " + ("; ".join(reasons) or
                                                              f"no {row.libtype} backend parses {row.kernelName}"))

    def entries(self) -> dict[tuple[int, int, int, int], Entry]:
        with self._lock:
            return {(d, n, k, m): e for (d, n, k), route in self._routes.items()
                    for m, e in enumerate(route) if e is not None}

    def available(self) -> dict[str, tuple[bool, str]]:
        return {b.name: self.backend_available(b) for bs in self.backends.values() for b in bs}
