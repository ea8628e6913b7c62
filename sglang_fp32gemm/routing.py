"""Routes: resolved once per (device, N, K, M), then one lookup per call.

The configuration (settings, tuned tables, layer selection) is loaded and
validated once per process (``config.load``). A call's route is resolved the
first time its (device, N, K, M) is seen, outside graph capture: table row
(aiter's M bucketing) -> the first backend of the row's libtype that parses
the kernelName, is available, takes the shape, allows the mode
(deterministic) and whose bound kernel passed its precision probe -> an
``Entry`` holding the bound kernel, or the fallback and the reason. Every
later call does one dict lookup, one list index and the launch.

Each reason a call is not routed is logged once (INFO; errors at ERROR);
every entry counts its calls, so ``counters()`` says how many calls went to
which kernel and why the rest did not.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm.backends import probe as probe_mod
from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.backends.base import MAX_M, Backend, KernelFn, NotReadyInCapture
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.layers import LayerInfo
from sglang_fp32gemm.table import DeviceKey, TunedRow, device_key

logger = logging.getLogger(__name__)

_BF16 = torch.bfloat16
_CAPTURE_REASON = "not resolved before graph capture"


def _count_of(c: "itertools.count") -> int:
    # itertools.count: next() is atomic under the GIL and cheap; its repr
    # is the only portable way to read it back.
    return int(repr(c)[6:-1])


class Bound:
    """One kernel bound to (device, N, K), probed; ``fn`` is None when it failed."""

    __slots__ = ("backend", "kernel_name", "deterministic", "fn", "error", "probe")

    def __init__(self, backend: str, kernel_name: str, deterministic: bool):
        self.backend = backend
        self.kernel_name = kernel_name
        self.deterministic = deterministic
        self.fn: Optional[KernelFn] = None
        self.error: Optional[str] = None
        self.probe: Optional[probe_mod.ProbeResult] = None


class Entry:
    """What calls of one (device, N, K, M) get: a kernel, or the fallback and why."""

    __slots__ = ("run", "bound", "reason", "calls", "row")

    def __init__(self, run: Optional[Callable], bound: Optional[Bound], reason: str,
                 row: Optional[TunedRow] = None):
        #: fn(x, w) -> out, or None (the caller's fallback). Returns None
        #: itself when the kernel raised (then it is disabled).
        self.run = run
        self.bound = bound
        self.reason = reason
        self.row = row
        self.calls = itertools.count()

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


class Router:
    """One per process (``get_router()``); tests build their own."""

    #: Device types a fast backend may be asked about; tests with fake CPU
    #: backends add "cpu".
    device_types: tuple[str, ...] = ("cuda",)

    def __init__(self, config: Optional[config_mod.Config] = None,
                 backends: Optional[dict[str, list[Backend]]] = None):
        self._lock = threading.RLock()
        self.error: Optional[str] = None
        self.backends: dict[str, list[Backend]] = {}
        self._routes: dict[tuple[int, int, int], list[Optional[Entry]]] = {}
        self._bound: dict[tuple, Bound] = {}
        self._available: dict[str, tuple[bool, str]] = {}
        self._dev_keys: dict[int, Optional[DeviceKey]] = {}
        self._logged: set[str] = set()
        self._other: dict[tuple[str, str], "itertools.count"] = {}
        self._retired: list[tuple[tuple[str, str], int]] = []
        #: The plugin's per-compressor-module cache: key -> (LayerInfo, selected).
        self.layers: dict[Any, tuple[LayerInfo, bool]] = {}
        self.config: Optional[config_mod.Config] = None
        try:
            if backends is None:
                from sglang_fp32gemm.backends import default_backends, parsers

                backends = default_backends()
            else:
                from sglang_fp32gemm.backends import parsers
            self.backends = backends
            self.config = config if config is not None else config_mod.load(parsers=parsers(backends))
        except ConfigError as e:
            # The launcher's flag hook stops a launch on these (one line);
            # a worker logs it once, at its first GEMM call, and keeps
            # serving on the exact fallback. Not logged here: the launcher
            # builds a router at plugin load too, and must print one line.
            self.error = str(e)
        s = self.config.settings if self.config is not None else None
        #: Plain attributes: the hooks read them on every call.
        self.enabled: bool = bool(s is not None and s.enabled and self.error is None)
        self.deterministic: bool = bool(s is not None and s.deterministic)

    # -- bookkeeping -------------------------------------------------------
    def _once(self, level: int, msg: str) -> None:
        if msg in self._logged:
            return
        with self._lock:
            if msg in self._logged:
                return
            self._logged.add(msg)
        logger.log(level, "%s", msg)

    def _count_other(self, route: str, reason: str) -> None:
        c = self._other.get((route, reason))
        if c is None:
            with self._lock:
                c = self._other.setdefault((route, reason), itertools.count())
            self._once(logging.INFO, f"sglang-fp32gemm: calls use torch: {reason}")
        next(c)

    def counters(self) -> dict[tuple[str, str], int]:
        """(route, kernelName or fallback reason) -> calls, over this process."""
        out: dict[tuple[str, str], int] = {}
        with self._lock:
            entries = {id(e): e for route in self._routes.values() for e in route if e is not None}
            for e in entries.values():
                n = _count_of(e.calls)
                if n:
                    key = (e.route, e.detail)
                    out[key] = out.get(key, 0) + n
            counts = [(key, _count_of(c)) for key, c in self._other.items()] + self._retired
            for key, n in counts:
                if n:
                    out[key] = out.get(key, 0) + n
        return out

    def reset_counters(self) -> None:
        with self._lock:
            for route in self._routes.values():
                for e in route:
                    if e is not None:
                        e.calls = itertools.count()
            self._other.clear()
            self._retired.clear()

    def count_unselected(self) -> None:
        self._count_other("torch", "layer not selected")

    def selects(self, layer: Optional[LayerInfo]) -> bool:
        return layer is None or (self.config is not None and self.config.selection.selects(layer))

    # -- the hot path ------------------------------------------------------
    def kernel_for(self, x: torch.Tensor, w: torch.Tensor) -> Optional[Callable]:
        """The bound kernel for this call, or None: take the fallback.

        The returned callable gives the fp32 product, or None if the kernel
        raised (it is then disabled and the caller takes the fallback).
        """
        try:
            if x.dtype is not _BF16 or w.dtype is not _BF16:
                raise ValueError
            m, k = x.shape  # ValueError unless 2-D
            n, kw = w.shape
        except ValueError:
            self._count_other("torch", "not a 2-D bf16 x bf16 call")
            return None
        dev = x.get_device()
        if kw != k or not 0 < m <= MAX_M or not (x.is_contiguous() or x.stride(1) == 1) \
                or not w.is_contiguous() or w.get_device() != dev:
            self._count_other("torch", _shape_reason(x, w))
            return None
        route = self._routes.get((dev, n, k))
        e = route[m] if route is not None else None
        if e is None:
            e = self.resolve(x.device, m, n, k)
        next(e.calls)
        return e.run

    def call(self, x: torch.Tensor, w: torch.Tensor, layer: Optional[LayerInfo] = None,
             fallback: Optional[Callable[[], torch.Tensor]] = None) -> torch.Tensor:
        if self.enabled:
            if layer is not None and not self.selects(layer):
                self.count_unselected()
            else:
                run = self.kernel_for(x, w)
                if run is not None:
                    out = run(x, w)
                    if out is not None:
                        return out
        elif self.error is not None:
            self.bad_configuration()
        return fallback() if fallback is not None else torch_ref.mm_fp32(x, w)

    def bad_configuration(self) -> None:
        """Count a call made under a bad configuration; log the error once."""
        if ("torch", "bad configuration") not in self._other:
            self._once(logging.ERROR, f"sglang-fp32gemm disabled, bad configuration: {self.error}; "
                       "every call runs SGLang's own GEMM")
        self._count_other("torch", "bad configuration")

    # -- resolution, once per (device, N, K, M) -----------------------------
    def resolve(self, device: torch.device, m: int, n: int, k: int) -> Entry:
        """The entry of (device, N, K, M): resolved and cached on first use."""
        idx = device.index if device.index is not None else -1
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # Binding compiles and the probe synchronises: neither may run
            # inside a capture. This call takes torch; an eager call resolves.
            with self._lock:
                route = self._routes.get((idx, n, k))
                if route is not None and route[m] is not None:
                    return route[m]
            self._once(logging.WARNING, f"sglang-fp32gemm: M={m} N={n} K={k} on {device} first seen during "
                       "CUDA-graph capture; the captured call uses torch (run it once eagerly first)")
            return Entry(None, None, _CAPTURE_REASON)
        with self._lock:
            route = self._routes.setdefault((idx, n, k), [None] * (MAX_M + 1))
            e = route[m]
            if e is None:
                e = self._entry(device, m, n, k)
                route[m] = e
                if e.run is None:
                    self._once(logging.INFO, f"sglang-fp32gemm: M={m} N={n} K={k} on {device} uses torch: "
                               f"{e.reason}")
            return e

    def device_key_of(self, device: torch.device) -> Optional[DeviceKey]:
        idx = device.index if device.index is not None else -1
        if idx not in self._dev_keys:
            self._dev_keys[idx] = device_key(device)
        return self._dev_keys[idx]

    def _backend_available(self, b: Backend) -> tuple[bool, str]:
        got = self._available.get(b.name)
        if got is None:
            try:
                got = b.available()
            except Exception as e:
                got = (False, f"availability check raised {type(e).__name__}: {e}")
            self._available[b.name] = got
            if not got[0]:
                self._once(logging.INFO, f"sglang-fp32gemm: backend {b.name} unavailable: {got[1]}")
        return got

    def plan(self, dev: Optional[DeviceKey], m: int, n: int, k: int, check_available: bool = True) -> Plan:
        """Row and backend for a shape on a device key; no binding, no probe."""
        if self.config is None:
            return Plan(None, None, None, "bad configuration")
        if dev is None:
            return Plan(None, None, None, "no device key")
        det = self.deterministic
        row = self.config.det_table.lookup(dev, m, n, k) if det else None
        row = row or self.config.table.lookup(dev, m, n, k)
        if row is None:
            return Plan(None, None, None, f"no tuned row for {dev} N={n} K={k} at this M")
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
                ok, why = self._backend_available(b)
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

    def _entry(self, device: torch.device, m: int, n: int, k: int) -> Entry:
        if device.type not in self.device_types:
            return Entry(None, None, f"{device.type} tensors")
        p = self.plan(self.device_key_of(device), m, n, k)
        if p.backend is None:
            return Entry(None, None, p.reason, p.row)
        bound = self._bind(p.backend, p.cfg, device, n, k, p.row)
        if bound.fn is None:
            return Entry(None, bound, _disabled_reason(bound), p.row)
        return Entry(self._guard(bound), bound, p.reason, p.row)

    def _bind(self, b: Backend, cfg: Any, device: torch.device, n: int, k: int, row: TunedRow) -> Bound:
        name = b.kernel_name(cfg)
        key = (b.name, name, device.type, device.index, n, k)
        bound = self._bound.get(key)
        if bound is not None:
            return bound
        bound = Bound(b.name, name, b.deterministic(cfg))
        try:
            if b.isolated_probe:
                from sglang_fp32gemm.backends import isolated_probe

                r = isolated_probe.probe_in_child(b.name, name, device, row.M, n, k)
                if not r.ok:
                    raise _ProbeFailed(r)
            fn = b.bind(cfg, device, n, k)
            r = probe_mod.run_probe(fn, device, row.M, n, k)
            bound.probe = r
            if not r.ok:
                raise _ProbeFailed(r)
            bound.fn = fn
            logger.info("sglang-fp32gemm: %s %s on %s N=%d K=%d passed its %s", b.name, name, device, n, k,
                        r.describe())
        except _ProbeFailed as e:
            bound.probe = e.result
            bound.error = f"failed its precision probe ({e.result.describe()})"
            logger.warning("sglang-fp32gemm: kernel %s %s disabled on %s: %s", b.name, name, device, bound.error)
        except Exception as e:
            bound.error = f"bind raised {type(e).__name__}: {e}"
            logger.warning("sglang-fp32gemm: kernel %s %s disabled on %s: %s", b.name, name, device, bound.error)
        self._bound[key] = bound
        return bound

    def _guard(self, bound: Bound) -> Callable:
        fn = bound.fn

        def run(x: torch.Tensor, w: torch.Tensor) -> Optional[torch.Tensor]:
            try:
                return fn(x, w)
            except NotReadyInCapture as e:
                # Not a fault: this captured call takes the fallback; the
                # kernel stays enabled for everything it was set up for.
                self._once(logging.WARNING, f"sglang-fp32gemm: {bound.backend} {bound.kernel_name} on "
                           f"{x.device}: {e}; this captured call uses torch")
                return None
            except Exception as e:
                self._kernel_failed(bound, x.device, e)
                return None

        return run

    def _kernel_failed(self, bound: Bound, device: torch.device, exc: Exception) -> None:
        """Disable one kernel (not its backend): its entries turn into fallbacks."""
        why = f"raised at run time ({type(exc).__name__}: {exc})"
        with self._lock:
            if bound.fn is None:
                return
            bound.fn, bound.error = None, why
            for route in self._routes.values():
                for i, e in enumerate(route):
                    if e is not None and e.bound is bound and e.run is not None:
                        # Keep the calls it served in the counters.
                        self._retired.append(((e.route, e.detail), _count_of(e.calls)))
                        route[i] = Entry(None, bound, _disabled_reason(bound), e.row)
        logger.warning("sglang-fp32gemm: kernel %s %s on %s %s; its calls use torch from now on",
                       bound.backend, bound.kernel_name, device, why)

    # -- for explain, demo, bench and tests ---------------------------------
    def describe_call(self, x: torch.Tensor, w: torch.Tensor,
                      layer: Optional[LayerInfo] = None) -> tuple[str, str]:
        """(route, kernelName or reason) a call would take; resolves, counts nothing."""
        if not self.enabled:
            return "torch", "bad configuration" if self.error else "disabled"
        if not self.selects(layer):
            return "torch", "layer not selected"
        if x.dtype is not _BF16 or w.dtype is not _BF16 or x.dim() != 2 or w.dim() != 2:
            return "torch", "not a 2-D bf16 x bf16 call"
        m, k = x.shape
        n, kw = w.shape
        if kw != k or not 0 < m <= MAX_M or not (x.is_contiguous() or x.stride(1) == 1) \
                or not w.is_contiguous() or w.get_device() != x.get_device():
            return "torch", _shape_reason(x, w)
        e = self.resolve(x.device, m, n, k)
        return e.route, (e.detail if e.run is None else f"{e.detail} ({e.reason})")

    def entries(self) -> dict[tuple[int, int, int, int], Entry]:
        with self._lock:
            return {(d, n, k, m): e for (d, n, k), route in self._routes.items()
                    for m, e in enumerate(route) if e is not None}

    def bound_kernels(self) -> list[Bound]:
        with self._lock:
            return list(self._bound.values())

    def available(self) -> dict[str, tuple[bool, str]]:
        out = {}
        for bs in self.backends.values():
            for b in bs:
                out[b.name] = self._backend_available(b)
        return out


class _ProbeFailed(Exception):
    def __init__(self, result: probe_mod.ProbeResult):
        super().__init__(result.describe())
        self.result = result


def _disabled_reason(bound: Bound) -> str:
    return f"{bound.backend} {bound.kernel_name}: {bound.error}"


def _shape_reason(x: torch.Tensor, w: torch.Tensor) -> str:
    m, k = x.shape
    n, kw = w.shape
    if kw != k:
        return "K of x and w differ"
    if not 0 < m <= MAX_M:
        return f"M outside 1..{MAX_M}"
    if x.get_device() != w.get_device():
        return "x and w on different devices"
    return "x not row-major or w not contiguous"


_router: Optional[Router] = None
_router_lock = threading.Lock()


def get_router() -> Router:
    r = _router
    if r is None:
        r = _make_router()
    return r


def _make_router() -> Router:
    global _router
    with _router_lock:
        if _router is None:
            _router = Router()
        return _router


def reset_router(router: Optional[Router] = None) -> Router:
    """Forget cached state (after the environment changed); tests use it."""
    global _router
    with _router_lock:
        _router = router if router is not None else Router()
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

    ``fallback`` (no arguments) gives the exact result when no fast kernel
    takes the call; by default ``torch.mm(x, w.t(), out_dtype=fp32)``.
    """
    if torch.compiler.is_compiling():
        # Traced as one opaque op with a fake implementation; the routing
        # runs when the compiled graph executes.
        return torch.ops.sglang_fp32gemm.linear_fp32(
            x, w, layer.layer_id if layer else -1, layer.kind if layer else "")
    return get_router().call(x, w, layer, fallback)
