"""The routing decision and the routed call.

For each call: is the plugin enabled; does the calling layer opt in; does
the tuned table have a row for (device, M, N, K, dtypes); is a backend for
the row's libtype available, willing, probed and healthy. If all hold, the
backend runs; otherwise the caller's fallback (SGLang's original function,
or ``torch.mm(out_dtype=fp32)``) gives the exact fp32 result. Decisions are
cached per call signature, so the hot path is a dictionary lookup; each
rejection reason is logged once, and every outcome is counted.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from typing import Callable, Optional

import torch

from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.backends import probe as probe_mod
from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.backends.base import Backend
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.layers import LayerInfo
from sglang_fp32gemm.table import DeviceKey, TunedRow, TunedTable, device_key

logger = logging.getLogger(__name__)

MAX_M = 256  # beyond the tables' reach: never worth a lookup
_DTYPE_NAMES = {torch.bfloat16: "torch.bfloat16", torch.float16: "torch.float16", torch.float32: "torch.float32"}


@dataclasses.dataclass(frozen=True)
class Decision:
    backend: Optional[Backend]
    row: Optional[TunedRow]
    reason: str

    @property
    def route(self) -> str:
        return self.backend.name if self.backend is not None else "torch"


class Router:
    """One per process (``get_router()``); tests build their own."""

    #: Device types a fast backend may be asked about; tests with fake
    #: CPU backends add "cpu".
    device_types: tuple[str, ...] = ("cuda",)

    def __init__(
        self,
        settings: Optional[settings_mod.Settings] = None,
        table: Optional[TunedTable] = None,
        backends: Optional[dict[str, list[Backend]]] = None,
        selection: Optional[layers_mod.LayerSelection] = None,
    ):
        self._given = (settings, table, backends, selection)
        self._lock = threading.RLock()
        self._ready = False
        self.error: Optional[str] = None
        self.settings: Optional[settings_mod.Settings] = None
        self.table: Optional[TunedTable] = None
        self.backends: dict[str, list[Backend]] = {}
        self.selection = layers_mod.LayerSelection()
        self._decisions: dict[tuple, Decision] = {}
        self._dev_keys: dict[torch.device, Optional[DeviceKey]] = {}
        self._available: dict[int, tuple[bool, str]] = {}
        self._probed: dict[tuple[int, torch.device], probe_mod.ProbeResult] = {}
        self._broken: dict[tuple[int, torch.device], str] = {}
        self._logged: set[str] = set()
        self._counts: collections.Counter = collections.Counter()
        self._count_lock = threading.Lock()

    # -- set-up, once ------------------------------------------------------
    def ensure_ready(self) -> None:
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            settings, table, backends, selection = self._given
            try:
                self.settings = settings or settings_mod.get()
                if self.settings.enabled:
                    self.table = table if table is not None else TunedTable.load(self.settings.config_paths)
                    self.selection = selection or layers_mod.load(self.settings.layers_path)
                    if backends is None:
                        from sglang_fp32gemm.backends import default_backends

                        backends = default_backends()
                    self.backends = backends
            except ConfigError as e:
                # Start-up hooks raise these; at run time the server keeps
                # running on the exact fallback.
                self.error = str(e)
                logger.error("sglang-fp32gemm disabled, bad configuration: %s", e)
            self._ready = True

    @property
    def enabled(self) -> bool:
        self.ensure_ready()
        return self.error is None and self.settings is not None and self.settings.enabled

    # -- bookkeeping -------------------------------------------------------
    def _once(self, level: int, msg: str) -> None:
        if msg in self._logged:
            return
        with self._count_lock:
            if msg in self._logged:
                return
            self._logged.add(msg)
        logger.log(level, "%s", msg)

    def count(self, route: str, reason: str) -> None:
        with self._count_lock:
            self._counts[(route, reason)] += 1

    def counters(self) -> dict[tuple[str, str], int]:
        with self._count_lock:
            return dict(self._counts)

    def reset_counters(self) -> None:
        with self._count_lock:
            self._counts.clear()

    def _device_key(self, device: torch.device) -> Optional[DeviceKey]:
        if device not in self._dev_keys:
            self._dev_keys[device] = device_key(device)
        return self._dev_keys[device]

    def _backend_available(self, b: Backend) -> tuple[bool, str]:
        got = self._available.get(id(b))
        if got is None:
            try:
                got = b.available()
            except Exception as e:
                got = (False, f"availability check raised {type(e).__name__}: {e}")
            self._available[id(b)] = got
            if not got[0]:
                self._once(logging.INFO, f"backend {b.name} unavailable: {got[1]}")
        return got

    # -- the decision ------------------------------------------------------
    def decide(self, x: torch.Tensor, w: torch.Tensor, layer: Optional[LayerInfo] = None) -> Decision:
        self.ensure_ready()
        if not self.enabled:
            return Decision(None, None, self.error and "bad configuration" or "disabled")
        if layer is not None and not self.selection.selects(layer):
            return Decision(None, None, "layer not selected")
        if x.dim() != 2 or w.dim() != 2:
            return Decision(None, None, "not a 2-D call")
        m = x.shape[0]
        if m == 0 or m > MAX_M:
            return Decision(None, None, "M outside the tables")
        key = (x.device, w.device, m, x.shape[1], w.shape[0], x.dtype, w.dtype, x.stride(), w.stride())
        d = self._decisions.get(key)
        if d is None:
            d = self._decide(x, w)
            if d.reason != "not probed before graph capture":
                self._decisions[key] = d
        if d.backend is not None:
            bk = (id(d.backend), x.device)
            if bk in self._broken:
                return Decision(None, d.row, "backend failed at run time")
        return d

    def _decide(self, x: torch.Tensor, w: torch.Tensor) -> Decision:
        if x.device != w.device:
            return Decision(None, None, "x and w on different devices")
        if x.device.type not in self.device_types:
            return Decision(None, None, f"{x.device.type} tensors")
        dtype, wdtype = _DTYPE_NAMES.get(x.dtype), _DTYPE_NAMES.get(w.dtype)
        if dtype != "torch.bfloat16" or wdtype != "torch.bfloat16":
            return Decision(None, None, f"dtypes {x.dtype}/{w.dtype}, tables hold bf16 x bf16")
        dev = self._device_key(x.device)
        if dev is None:
            return Decision(None, None, "no device key")
        m, k = x.shape
        n = w.shape[0]
        row = self.table.lookup(dev, m, n, k) if self.table is not None else None
        if row is None:
            return Decision(None, None, f"no tuned row for {dev} M={m} N={n} K={k}")
        candidates = self.backends.get(row.libtype)
        if not candidates:
            return Decision(None, row, f"row libtype {row.libtype} is served by torch")
        reasons = []
        for b in candidates:
            ok, why = self._backend_available(b)
            if not ok:
                reasons.append(f"{b.name}: {why}")
                continue
            if self.settings.deterministic and not getattr(b, "deterministic", False):
                # fp32 atomics make the sum order depend on scheduling.
                reasons.append(f"{b.name}: not deterministic (deterministic mode is on)")
                continue
            try:
                ok, why = b.supports(x, w, row)
            except Exception as e:
                ok, why = False, f"supports() raised {type(e).__name__}: {e}"
            if not ok:
                self._once(logging.INFO, f"backend {b.name} declines {row.source} (M={m} N={n} K={k}): {why}")
                reasons.append(f"{b.name}: {why}")
                continue
            result = self._probe(b, row, x.device)
            if result is None:
                return Decision(None, row, "not probed before graph capture")
            if not result.ok:
                reasons.append(f"{b.name}: failed its precision probe")
                continue
            return Decision(b, row, f"row {row.source}")
        return Decision(None, row, "; ".join(reasons) or "no backend")

    def _probe(self, b: Backend, row: TunedRow, device: torch.device) -> Optional[probe_mod.ProbeResult]:
        key = (id(b), device)
        got = self._probed.get(key)
        if got is not None:
            return got
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            self._once(logging.WARNING, f"sglang-fp32gemm: {b.name} not yet probed on {device} when CUDA-graph "
                       "capture began; captured calls use torch until an eager call runs the probe")
            return None
        with self._lock:
            got = self._probed.get(key)
            if got is not None:
                return got
            try:
                dev = self._device_key(device)
                rows = [r for r in self.table.rows() if dev and r.gfx == dev.gfx and r.cu_num == dev.cu_num
                        and r.libtype == row.libtype] if self.table else []
                b.prepare(device, rows)
            except Exception as e:
                got = probe_mod.ProbeResult(False, float("nan"), (row.M, row.N, row.K),
                                            f"prepare() raised {type(e).__name__}: {e}")
            else:
                got = probe_mod.run_probe(b, row, device)
            self._probed[key] = got
        if got.ok:
            logger.info("sglang-fp32gemm: backend %s on %s passed: %s", b.name, device, got.describe())
        else:
            logger.warning("sglang-fp32gemm: backend %s disabled on %s for this process: %s",
                           b.name, device, got.describe())
        return got

    # -- the call ----------------------------------------------------------
    def call(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        layer: Optional[LayerInfo] = None,
        fallback: Optional[Callable[[], torch.Tensor]] = None,
    ) -> torch.Tensor:
        d = self.decide(x, w, layer)
        if d.backend is not None:
            try:
                out = d.backend.run(x, w, d.row)
                self.count(d.backend.name, "ok")
                return out
            except Exception as e:
                self._broken[(id(d.backend), x.device)] = f"{type(e).__name__}: {e}"
                self._once(logging.WARNING, f"sglang-fp32gemm: backend {d.backend.name} raised on {x.device} "
                           f"({type(e).__name__}: {e}); this and later calls use torch")
                d = Decision(None, d.row, "backend failed at run time")
        self.count("torch", _short(d.reason))
        return fallback() if fallback is not None else torch_ref.mm_fp32(x, w)

    def probes(self) -> dict[tuple[str, str], probe_mod.ProbeResult]:
        names = {id(b): b.name for bs in self.backends.values() for b in bs}
        return {(names.get(bid, "?"), str(dev)): r for (bid, dev), r in self._probed.items()}

    def broken(self) -> dict[tuple[str, str], str]:
        names = {id(b): b.name for bs in self.backends.values() for b in bs}
        return {(names.get(bid, "?"), str(dev)): r for (bid, dev), r in self._broken.items()}


def _short(reason: str) -> str:
    # Count "no tuned row for sm90:132 M=40 ..." under one key, not per shape.
    return "no tuned row" if reason.startswith("no tuned row") else reason


_router: Optional[Router] = None
_router_lock = threading.Lock()


def get_router() -> Router:
    global _router
    r = _router
    if r is None:
        with _router_lock:
            if _router is None:
                _router = Router()
            r = _router
    return r


def reset_router(router: Optional[Router] = None) -> Router:
    """Forget cached state (after the environment changed); tests use it."""
    global _router
    with _router_lock:
        _router = router or Router()
        return _router


# -- the custom op: what torch.compile and Inductor see -----------------------
@torch.library.custom_op("sglang_fp32gemm::linear_fp32", mutates_args=())
def _linear_fp32_op(x: torch.Tensor, w: torch.Tensor, layer_id: int, kind: str) -> torch.Tensor:
    info = LayerInfo(layer_id, kind) if kind else None
    return get_router().call(x, w, info)


@_linear_fp32_op.register_fake
def _linear_fp32_fake(x: torch.Tensor, w: torch.Tensor, layer_id: int, kind: str) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], w.shape[0]), dtype=torch.float32)


def linear_bf16_fp32(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    layer: Optional[LayerInfo] = None,
    fallback: Optional[Callable[[], torch.Tensor]] = None,
) -> torch.Tensor:
    """out[..., N] fp32 = x[..., K] @ w[N, K]^T through the tuned table.

    ``fallback`` (no arguments) gives the exact result when no fast backend
    takes the call; by default ``torch.mm(x, w.t(), out_dtype=fp32)``.
    """
    if torch.compiler.is_compiling():
        # Traced as one opaque op with a fake implementation; the routing
        # runs when the compiled graph executes.
        return torch.ops.sglang_fp32gemm.linear_fp32(
            x, w, layer.layer_id if layer else -1, layer.kind if layer else "")
    return get_router().call(x, w, layer, fallback)
