"""One launch for a DeepSeek-V4 ratio-4 layer's two compressor GEMMs, outside SGLang's multi-stream region.

SGLang's serial ``_forward_prepare`` (above the multi-stream batch limit, and for batches not captured)
computes on a ratio-4 (CSA) layer the indexer's compressor GEMM (N=512) and, a few kernels later, the
layer's (N=2048), both on the layer's input x. Each call pays a launch, its first loads' latency and its
tail. Where the pair table (``*_pair.csv``: rows at the joined width N1 + N2) names a kernel with a pair
form (``bind_pair``) for the call's M, the indexer's call runs both GEMMs in one launch (``call``) and
leaves the second output on the layer's compressor (``joined``); the layer's call takes it where its x is
the same tensor, unchanged since (the same object and, outside inference mode, the same version counter),
on the same stream, and its weight is the one the pair read. Anything else computes as before: a pair
changes where a product is computed, not what a call returns (each output an exact fp32 product; the pair
kernel is probed on both before its first use, as every kernel is).

The two compressors are linked by their calls: a layer compressor's call whose x is the x of the indexer
compressor's call just before it on this thread links them (a weak reference on the indexer's module), and
the next step's indexer call takes the pair. Never in SGLang's multi-stream region (the two run on two
streams there), never when traced by torch.compile, never in deterministic mode (no pair routes).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import routing
from sglang_fp32gemm.backends.base import MAX_M, Backend, NotReadyInCapture
from sglang_fp32gemm.backends.triton_launch import raw_stream_getter
from sglang_fp32gemm.kernels import Bound, KernelCache
from sglang_fp32gemm.routes import CAPTURE_REASON, RouteTable
from sglang_fp32gemm.telemetry import Key, Telemetry

#: On the indexer's compressor module: a weak reference to its layer's compressor.
PARTNER_ATTR = "_sglang_fp32gemm_pair_partner"
#: On the layer's compressor module: the second output of the pair launch, held for its call.
AHEAD_ATTR = "_sglang_fp32gemm_pair_ahead"


class PairBinder:
    """A backend's pair form as the kernel cache binds kernels: ``bind(cfg, device, n1 + n2, k)`` gives
    ``joined(x, w)``, the products of w's first ``n1`` rows and of the rest side by side (what the probe checks
    against x @ w^T), whose ``pair`` attribute is the hot path ``pair(x, w1, w2)``."""

    def __init__(self, backend: Backend, n1: int, n2: int):
        self.backend, self.n1, self.n2 = backend, n1, n2
        self.name = backend.name
        self.isolated_probe = backend.isolated_probe

    def kernel_name(self, cfg: Any) -> str:
        return f"{self.backend.kernel_name(cfg)} pair {self.n1}+{self.n2}"

    def deterministic(self, cfg: Any) -> bool:
        return self.backend.deterministic(cfg)

    def bind(self, cfg: Any, device: torch.device, n: int, k: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        n1 = self.n1
        if n != n1 + self.n2:
            raise ValueError(f"N={n} is not {n1} + {self.n2}")
        return joined_fn(self.backend.bind_pair(cfg, device, n1, self.n2, k), n1)  # type: ignore[attr-defined]


def not_taken(backend: Backend, cfg: Any, m: int, widths: tuple[int, ...], k: int) -> Optional[tuple[int, str]]:
    """The first of ``widths`` that ``backend``'s form ``cfg`` does not take at M, and why; None where it takes them
    all (a pair form is the single form's tiles over each weight, so it needs both). A backend's ``parse_pair``
    (the pair table's rule at start-up) refuses forms its pair kernel does not have."""
    parse_pair = getattr(backend, "parse_pair", None)
    if parse_pair is not None:
        try:
            parse_pair(backend.kernel_name(cfg))
        except ValueError as e:
            return widths[0], str(e)
    for width in widths:
        ok, why = backend.supports(cfg, m, width, k)
        if not ok:
            return width, why
    return None


def on_halves(pair: Callable[..., tuple], n1: int) -> Callable[[torch.Tensor, torch.Tensor], tuple]:
    """``pair(x, w1, w2)`` as ``fn(x, w)`` over one weight of N1 + N2 rows: its first ``n1`` rows and the rest."""
    return lambda x, w: pair(x, w[:n1], w[n1:])


def joined_fn(pair: Callable[..., tuple], n1: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``joined(x, w)``: ``pair``'s two products side by side (what a probe checks against x @ w^T), with
    ``joined.pair`` the pair itself (the hot path)."""
    halves = on_halves(pair, n1)

    def joined(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.cat(halves(x, w), dim=1)

    joined.pair = pair  # type: ignore[attr-defined]
    return joined


class PairEntry:
    """What the pair calls of one (device, N1, N2, K, M) get: ``run(x, w1, w2)`` (None: no pair), why."""

    __slots__ = ("run", "bound", "reason", "key")

    def __init__(self, run: Optional[Callable[..., Optional[tuple]]], bound: Optional[Bound], reason: str):
        self.run = run
        self.bound = bound
        self.reason = reason
        #: Both calls of a pair count here: (backend, "<kernelName> pair N1+N2").
        self.key: Optional[Key] = (bound.backend, bound.kernel_name) if run is not None and bound else None


_NONE = PairEntry(None, None, "no pair")


class PairRoutes:
    """The pair table's routes, resolved once per (device, N1, N2, K, M), outside graph capture."""

    def __init__(self, config: Any, backends: dict[str, list[Backend]], kernels: KernelCache,
                 telemetry: Telemetry):
        #: The table's rows and plans as the other tables' (a row at the joined width N1 + N2).
        self.table = RouteTable(config, backends, False, kernels, telemetry, table=config.pair_table)
        self.kernels = kernels
        self._telemetry = telemetry
        self._lock = threading.Lock()
        self._routes: dict[tuple[int, int, int, int], list[Optional[PairEntry]]] = {}

    def get(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> PairEntry:
        """The hot path: the entry of this pair of calls (resolved on its first eager call)."""
        a, b = routing.call_shape(x, w1), routing.call_shape(x, w2)
        if a.__class__ is str or b.__class__ is str:
            return _NONE
        m, n1, k, idx = a
        n2 = b[1]
        route = self._routes.get((idx, n1, n2, k))
        e = route[m] if route is not None else None
        return e if e is not None else self.resolve(x.device, m, n1, n2, k)

    def resolve(self, device: torch.device, m: int, n1: int, n2: int, k: int) -> PairEntry:
        idx = device.index if device.index is not None else -1
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return PairEntry(None, None, CAPTURE_REASON)  # binding cannot run in a capture: no pair this call
        e = self._make(device, m, n1, n2, k)
        with self._lock:
            route = self._routes.setdefault((idx, n1, n2, k), [None] * (MAX_M + 1))
            if route[m] is None:
                route[m] = e
            e = route[m]
        if e.run is not None:
            self._telemetry.once(logging.INFO, f"sglang-fp32gemm: M={m} N={n1}+{n2} K={k} on {device}: "
                                 f"one launch for both, {e.bound.backend} {e.bound.kernel_name} ({e.reason})")
        return e

    def plan_text(self, dev: Any, m: int, n1: int, n2: int, k: int) -> Optional[str]:
        """The pair route of a shape as ``explain`` prints it (no binding), or None where there is none."""
        p = self.table.plan(dev, m, n1 + n2, k, check_available=False)
        if p.backend is None:
            return None
        return f"{p.backend.name} {p.backend.kernel_name(p.cfg)} pair {n1}+{n2} ({p.reason})"

    def _make(self, device: torch.device, m: int, n1: int, n2: int, k: int) -> PairEntry:
        if device.type not in self.table.device_types:
            return PairEntry(None, None, f"{device.type} tensors")
        p = self.table.plan(self.table.device_key_of(device), m, n1 + n2, k)
        if p.backend is None or not hasattr(p.backend, "bind_pair"):
            return PairEntry(None, None, p.reason)
        miss = not_taken(p.backend, p.cfg, m, (n1, n2), k)
        if miss is not None:
            return PairEntry(None, None, f"{p.backend.name}: {miss[1]}")
        bound = self.kernels.get(PairBinder(p.backend, n1, n2), p.cfg, device, n1 + n2, k, p.row.M)
        if bound.fn is None:
            return PairEntry(None, bound, bound.disabled_reason)
        return PairEntry(self._guard(bound), bound, p.reason)

    def _guard(self, bound: Bound) -> Callable[..., Optional[tuple]]:
        pair = bound.fn.pair  # type: ignore[union-attr]

        def run(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> Optional[tuple]:
            if bound.fn is None:
                return None  # disabled since: both calls take their own routes
            try:
                return pair(x, w1, w2)
            except NotReadyInCapture as e:
                self._telemetry.once(logging.WARNING, f"sglang-fp32gemm: {bound.backend} {bound.kernel_name} on "
                                     f"{x.device}: {e}; these captured calls take their own routes")
                return None
            except Exception as e:
                self.kernels.disable(bound, x.device, e)
                return None

        return run


# -- the pair calls -------------------------------------------------------------------------------------
def call(r: routing.Router, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
         taken: bool = False) -> Optional[tuple[torch.Tensor, torch.Tensor, Key]]:
    """(x @ w1^T, x @ w2^T, the counter key) in one launch where the pair table routes this pair, the first
    call counted (``taken``: the second too, as it is taken now); None: each call takes its own route."""
    e = r.pairs.get(x, w1, w2) if r.pairs is not None else _NONE
    if e.run is None:
        return None
    outs = e.run(x, w1, w2)
    if outs is None:
        return None
    r.telemetry.count(e.key)
    if taken:
        r.telemetry.count(e.key)
    return outs[0], outs[1], e.key


class _Mark:
    """Which x a call had: the object (weakly) and its version counter (None for inference tensors)."""

    __slots__ = ("x", "version")

    def __init__(self, x: torch.Tensor):
        self.x, self.version = weakref.ref(x), _version(x)

    def same(self, x: torch.Tensor) -> bool:
        """Whether ``x`` is that tensor, unchanged since."""
        return self.x() is x and self.version == _version(x)


class _Held(_Mark):
    """The layer compressor's output, computed by its indexer's pair launch on ``x`` with weight ``w``."""

    __slots__ = ("w", "stream", "out", "key")

    def __init__(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, key: Key):
        super().__init__(x)
        self.w, self.stream, self.out, self.key = w, _stream(x), out, key


class _Last(threading.local):
    #: (indexer compressor module, the mark of its x) of this thread's last indexer call without a partner.
    call: Optional[tuple] = None


_last = _Last()


def _version(x: torch.Tensor) -> Optional[int]:
    try:
        return x._version
    except RuntimeError:  # an inference tensor keeps no version counter: the object alone is compared
        return None


def _stream(x: torch.Tensor) -> int:
    """The raw current stream of x's device (0 on CPU): the held output is taken on the stream it was made on."""
    return _raw_stream(x.get_device()) if x.is_cuda else 0


_raw_stream = raw_stream_getter()


def joined(r: routing.Router, module: Any, x: torch.Tensor, w: torch.Tensor,
           partner_selected: Callable[[Any], bool]) -> Optional[torch.Tensor]:
    """A compressor's GEMM output from a pair launch, or None (compute it as usual).

    The indexer's compressor with a linked partner whose layer is selected (``partner_selected``) launches the
    pair and holds the second output on the partner; the partner's call takes it where it matches. Called by
    the compressor hook outside the multi-stream region, not traced, plugin on, with bf16 weights."""
    d = module.__dict__
    held = d.pop(AHEAD_ATTR, None)
    if held is not None:
        if held.same(x) and held.w is w and held.stream == _stream(x):
            r.telemetry.count(held.key)
            return held.out
        return None  # x or w changed since the pair launch: compute it anew
    if getattr(module, "is_in_indexer", False):
        ref = d.get(PARTNER_ATTR)
        partner = ref() if ref is not None else None
        if partner is None:
            _last.call = (weakref.ref(module), _Mark(x))
            return None
        w2 = getattr(getattr(partner, "wkv_gate", None), "weight", None)
        if not isinstance(w2, torch.Tensor) or w2.dtype is not torch.bfloat16 or not partner_selected(partner):
            return None
        outs = call(r, x, w, w2)
        if outs is None:
            return None
        try:
            object.__setattr__(partner, AHEAD_ATTR, _Held(x, w2, outs[1], outs[2]))
        except Exception:  # a module that takes no attribute: its call computes anew (never reached by SGLang's)
            pass
        return outs[0]
    last, _last.call = _last.call, None
    if last is not None and last[1].same(x):
        indexer = last[0]()
        if indexer is not None:
            try:
                object.__setattr__(indexer, PARTNER_ATTR, weakref.ref(module))
            except Exception:  # no link: both compute on their own
                pass
    return None
