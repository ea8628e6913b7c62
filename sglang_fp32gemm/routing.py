"""The decision for one call (``Router.decide``), and the process's router.

Every hook, ``Router.call``, ``describe_call`` and ``explain`` decide through
``Router.decide``: enabled? -> layer selected (``Caller``)? -> ``call_shape(x,
w)`` (or why no kernel may take it)? -> the route table's entry (the serial routes' outside
SGLang's multi-stream region, where a serial table exists) -> its eager alternative when the call is
not being captured; docs/design.md ("The path of one call"). The router
receives a ``Config``; ``get_router()`` loads the process's one once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterator, Optional, Union

import torch

from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.backends.base import MAX_M, Backend
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.kernels import Bound, KernelCache
from sglang_fp32gemm.layers import LayerInfo
from sglang_fp32gemm.routes import Entry, Plan, RouteTable
from sglang_fp32gemm.table import DeviceKey
from sglang_fp32gemm.telemetry import Key, Telemetry

__all__ = ["Router", "Caller", "Entry", "Plan", "call_shape", "get_router", "reset_router", "linear_bf16_fp32",
           "overlapped", "in_overlapped_region"]

_BF16 = torch.bfloat16
NOT_2D_BF16 = "not a 2-D bf16 x bf16 call"
UNSELECTED = "layer not selected"
NO_LAYER = "no compressor layer (a layer file is set)"
BAD_CONFIG = "bad configuration"
GRAD = "inputs require grad"


# The capture state of the current stream, without torch.cuda's Python wrapper.
_stream_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


class _Schedule(threading.local):
    #: SGLang's multi-stream prepare runs on this thread (hooks.around_overlapped): this layer's fp32
    #: GEMMs run on side streams, beside the main stream's GEMMs.
    overlapped = False


_schedule = _Schedule()
#: False where the plugin could not hook SGLang's multi-stream prepares (nothing would mark the region):
#: routers made then ignore the serial table.
serial_routes_allowed = True


@contextlib.contextmanager
def overlapped() -> Iterator[None]:
    """Calls made inside run beside other streams (SGLang's multi-stream decode region): they take the
    fast table's rows, ranked there; calls outside take the serial table's, where it has rows."""
    prev = _schedule.overlapped
    _schedule.overlapped = True
    try:
        yield
    finally:
        _schedule.overlapped = prev


def in_overlapped_region() -> bool:
    return _schedule.overlapped


def capturing(x: torch.Tensor) -> bool:
    """Whether ``x``'s call is being captured into a CUDA graph (CPU tensors: never); tests patch this."""
    return x.is_cuda and _stream_capturing()


def call_shape(x: torch.Tensor, w: torch.Tensor) -> Union[tuple[int, int, int, int], str]:
    """(M, N, K, device index) of a call every bound kernel may take, or why none may (a str): the
    guarantees every bound kernel relies on. The hot path: each shape and stride is read once."""
    try:
        m, k = x.shape
        n, wk = w.shape
    except ValueError:  # not 2-D (cheaper than asking dim() of both on every call)
        return NOT_2D_BF16
    if x.dtype is not _BF16 or w.dtype is not _BF16:
        return NOT_2D_BF16
    if wk != k:
        return "K of x and w differ"
    if not 0 < m <= MAX_M:
        return f"M outside 1..{MAX_M}"
    idx = x.get_device()
    if idx != w.get_device():
        return "x and w on different devices"
    if not (x.is_contiguous() or x.stride()[1] == 1) or not w.is_contiguous():
        return "x not row-major or w not contiguous"
    # Grad mode first: SGLang serves with it off, and then neither tensor is asked.
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        return GRAD  # a kernel's result has no graph: the fallback keeps the gradient
    return m, n, k, idx


class Caller:
    """Who is calling, and whether the layer file selects it; decided once per layer."""

    __slots__ = ("layer", "selected", "reason")

    def __init__(self, layer: Optional[LayerInfo], selected: bool):
        self.layer = layer
        self.selected = selected
        #: Why it is not routed, when not selected.
        self.reason = UNSELECTED if layer is not None else NO_LAYER


class Router:
    """One per process (``get_router()``); tests build their own."""

    def __init__(self, config: Optional[config_mod.Config], backends: dict[str, list[Backend]],
                 error: Optional[str] = None):
        self.config = config
        self.backends = backends
        self.error = error
        s = config.settings if config is not None else None
        #: Plain attributes: the hooks read them on every call.
        self.enabled: bool = bool(s is not None and s.enabled and error is None)
        self.deterministic: bool = bool(s is not None and s.deterministic)
        self.telemetry = Telemetry()
        self.kernels = KernelCache(self.telemetry, getattr(s, "probe_timeout_s", None))
        self.routes = RouteTable(config, backends, self.deterministic, self.kernels, self.telemetry)
        serial = (config.serial_table if config is not None and not self.deterministic and serial_routes_allowed
                  else None)
        #: Calls outside SGLang's multi-stream region (serial steps, eager calls): the serial table laid
        #: over the fast one; None when there is no serial table (every call takes ``routes``).
        self.serial_routes: Optional[RouteTable] = (
            RouteTable(config, backends, False, self.kernels, self.telemetry, table=serial, base=config.table)
            if serial is not None else None)
        pair_table = (config.pair_table if config is not None and not self.deterministic and serial_routes_allowed
                      else None)
        #: The pair table's routes (``pairs.py``): a ratio-4 layer's two compressor GEMMs in one launch outside
        #: the multi-stream region; None without pair rows (every call takes its own route).
        self.pairs: Optional[Any] = None  # a pairs.PairRoutes (imported only where there is a pair table)
        if pair_table is not None:
            from sglang_fp32gemm.pairs import PairRoutes

            self.pairs = PairRoutes(config, backends, self.kernels, self.telemetry)
        self.kernels.on_disable = self._retire
        sel = config.selection if config is not None else None
        self._no_layer = Caller(None, sel is None or sel.selects(None))
        self._off = Entry(None, None, BAD_CONFIG if error else "disabled", counted=error is not None,
                          first_log=(logging.ERROR, f"sglang-fp32gemm disabled, bad configuration: {error}; "
                                     "every call runs SGLang's own GEMM"))
        self._reasons: dict[str, Entry] = {}

    # -- the decision ----------------------------------------------------------
    def caller(self, layer: Optional[LayerInfo]) -> Caller:
        """A call's caller: ``layer`` judged against the layer file (None: a call with no layer)."""
        if layer is None:
            return self._no_layer
        sel = self.config.selection if self.config is not None else None
        return Caller(layer, sel is not None and sel.selects(layer))

    def decide(self, x: torch.Tensor, w: torch.Tensor, caller: Optional[Caller] = None,
               captured: Optional[bool] = None) -> Entry:
        """The entry this call takes, counting nothing; ``captured``: as if under (True) or outside (False)
        CUDA-graph capture, None: as this call is. Taking an entry's eager alternative first runs its
        ``prepare`` (the captured kernel's state for this stream, made outside capture)."""
        if not self.enabled:
            return self._off
        caller = caller or self._no_layer
        if not caller.selected:
            return self._reason(caller.reason)
        shape = call_shape(x, w)
        if shape.__class__ is str:
            return self._reason(shape)
        m, n, k, idx = shape
        routes = self.routes if self.serial_routes is None or _schedule.overlapped else self.serial_routes
        e = routes.get(idx, m, n, k) or routes.resolve(x.device, m, n, k)
        if e.eager is not None and not (capturing(x) if captured is None else captured):
            if e.prepare is not None:
                # The graph captured later on this stream runs e's kernel, not e.eager's.
                e.prepare()
            return e.eager
        return e

    def kernel_for(self, x: torch.Tensor, w: torch.Tensor, caller: Optional[Caller] = None) -> Optional[Callable]:
        """The hot path: decide, count, and return the kernel's ``run`` or None (take the fallback).

        ``run(x, w)`` gives None if the kernel raised (it is then disabled).
        """
        e = self.decide(x, w, caller)
        if e.key is not None and self.telemetry.count(e.key) and e.first_log is not None:
            self.telemetry.once(*e.first_log)
        return e.run

    def route_tables(self) -> list[RouteTable]:
        """The fast routes, then the serial routes where there are any."""
        return [self.routes] if self.serial_routes is None else [self.routes, self.serial_routes]

    def _retire(self, bound: Bound) -> None:
        for routes in self.route_tables():
            routes.retire(bound)

    def _reason(self, reason: str) -> Entry:
        e = self._reasons.get(reason)
        if e is None:
            e = self._reasons.setdefault(reason, Entry(
                None, None, reason, first_log=(logging.INFO, f"sglang-fp32gemm: calls use torch: {reason}")))
        return e

    def call(self, x: torch.Tensor, w: torch.Tensor, layer: Optional[LayerInfo] = None,
             fallback: Optional[Callable[[], torch.Tensor]] = None) -> torch.Tensor:
        run = self.kernel_for(x, w, self.caller(layer))
        if run is not None:
            out = run(x, w)
            if out is not None:
                return out
        return fallback() if fallback is not None else torch_ref.mm_fp32(x, w)

    def describe_call(self, x: torch.Tensor, w: torch.Tensor, layer: Optional[LayerInfo] = None,
                      captured: Optional[bool] = None) -> tuple[str, str]:
        """(route, kernelName or reason) a call would take; resolves, counts nothing (``captured``: as decide)."""
        e = self.decide(x, w, self.caller(layer), captured)
        return e.route, (e.detail if e.run is None else f"{e.detail} ({e.reason})")

    # -- for explain, demo, bench and tests ------------------------------------
    def counters(self) -> dict[Key, int]:
        """(route, kernelName or fallback reason) -> calls, over this process."""
        return self.telemetry.counters()

    def reset_counters(self) -> None:
        self.telemetry.reset()

    def _routes_for(self, serial: bool) -> RouteTable:
        return self.serial_routes if serial and self.serial_routes is not None else self.routes

    def resolve(self, device: torch.device, m: int, n: int, k: int, serial: bool = False) -> Entry:
        """The entry of a shape inside SGLang's multi-stream region, or outside it (``serial``)."""
        return self._routes_for(serial).resolve(device, m, n, k)

    def plan(self, dev: Optional[DeviceKey], m: int, n: int, k: int, check_available: bool = True,
             serial: bool = False) -> Plan:
        return self._routes_for(serial).plan(dev, m, n, k, check_available)

    def entries(self) -> dict[tuple[int, int, int, int], Entry]:
        return self.routes.entries()

    def bound_kernels(self) -> list[Bound]:
        return self.kernels.all()

    def available(self) -> dict[str, tuple[bool, str]]:
        return self.routes.available()


def build_router() -> Router:
    """The process's router from the environment; a bad configuration is kept as ``error`` (the launcher
    stops on it, a worker logs it once and serves every call on the fallback)."""
    from sglang_fp32gemm.backends import default_backends, parsers

    backends = default_backends()
    try:
        return Router(config_mod.load(parsers=parsers(backends), pair_parsers=parsers(backends, pair=True)), backends)
    except ConfigError as e:
        return Router(None, backends, error=str(e))


_router: Optional[Router] = None
_router_lock = threading.Lock()


def get_router() -> Router:
    r = _router
    return r if r is not None else _make_router()


def _make_router() -> Router:
    global _router
    with _router_lock:
        if _router is None:
            _router = build_router()
        return _router


def reset_router(router: Optional[Router] = None) -> Router:
    """Forget cached state (after the environment changed); tests use it."""
    global _router
    with _router_lock:
        _router = router if router is not None else build_router()
        return _router


# -- the custom op: what torch.compile and Inductor see -----------------------
@torch.library.custom_op("sglang_fp32gemm::linear_fp32", mutates_args=())
def _linear_fp32_op(x: torch.Tensor, w: torch.Tensor, layer_id: int, kind: str) -> torch.Tensor:
    info = LayerInfo(layer_id, kind) if kind else None
    return get_router().call(x, w, info)


@_linear_fp32_op.register_fake
def _linear_fp32_fake(x: torch.Tensor, w: torch.Tensor, layer_id: int, kind: str) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], w.shape[0]), dtype=torch.float32)


def traced_call(x: torch.Tensor, w: torch.Tensor, layer: Optional[LayerInfo]) -> torch.Tensor:
    """Under torch.compile: one opaque op; the decision runs when the compiled graph executes."""
    return torch.ops.sglang_fp32gemm.linear_fp32(x, w, layer.layer_id if layer else -1, layer.kind if layer else "")


def linear_bf16_fp32(x: torch.Tensor, w: torch.Tensor, *, layer: Optional[LayerInfo] = None,
                     fallback: Optional[Callable[[], torch.Tensor]] = None) -> torch.Tensor:
    """out[..., N] fp32 = x[..., K] @ w[N, K]^T through the tuned table; ``fallback()`` (default
    ``torch.mm(x, w.t(), out_dtype=fp32)``) gives the exact result when no fast kernel takes the call."""
    if torch.compiler.is_compiling():
        return traced_call(x, w, layer)
    return get_router().call(x, w, layer, fallback)
