"""The AROUND hooks on SGLang's GEMM and compressor methods: name the caller, ask the router
(``Router.kernel_for``), run the kernel or take the fallback (docs/design.md). Hooks use the registry's
``original_fn``: the registry rebinds any module global holding the original.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import pairs, releases, routing
from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.layers import LayerInfo
from sglang_fp32gemm.releases import ReleaseLayout

#: The release layout ``plugin.register()`` found (set there).
layout: Optional[ReleaseLayout] = None
#: Attribute the plugin owns on each compressor module: (router, {fused: Caller}).
CALLER_ATTR = "_sglang_fp32gemm_caller"
#: DeepSeek-V4.1's compressor does not know its layer: the attention layer that builds it names it here.
LAYER_ID_ATTR = "_sglang_fp32gemm_layer_id"
V41_CLASS = "DeepseekV41Compressor"
#: The weights of a compressor's GEMMs: V4's wkv_gate; V4.1's wkv and wgate, or its fused wkv_gate.
GEMM_WEIGHTS = ("wkv_gate", "wkv", "wgate")

_BF16 = torch.bfloat16


class _ThreadState(threading.local):
    # Class defaults: reading an unset thread-local through getattr(..., default)
    # costs an exception per call on the hot path.
    #: A compressor hook decided this call: its inner linear_bf16_fp32 call is not decided again.
    bypass = False
    #: The Compressor whose compute_kv_score / prelaunch_kv_score runs on this thread (releases
    #: without _compute_wkv_gate).
    layer: Any = None


_thread = _ThreadState()
_tgemm_lock = threading.Lock()


def layer_of(module: Any, fused: bool) -> LayerInfo:
    """The compressor layer a module is (pure attribute reads: traceable)."""
    if type(module).__name__ == V41_CLASS:
        return LayerInfo(int(getattr(module, LAYER_ID_ATTR, -1)), "v41")
    return LayerInfo.of_compressor(getattr(module, "layer_id", -1), getattr(module, "ratio", 0),
                                   bool(getattr(module, "is_in_indexer", False)), fused)


def caller_of(module: Any, fused: bool, r: routing.Router) -> routing.Caller:
    """The module's layer and whether the layer file selects it: decided once per router and kept on
    the module (a freed module takes its decision with it; a new router decides again)."""
    got = module.__dict__.get(CALLER_ATTR)
    if got is None or got[0] is not r:
        got = (r, {})
        try:
            object.__setattr__(module, CALLER_ATTR, got)
        except Exception:  # a module that takes no attributes: decide per call
            pass
    caller = got[1].get(fused)
    if caller is None:
        caller = got[1][fused] = r.caller(layer_of(module, fused))
    return caller


def _calling_caller(w: torch.Tensor, r: routing.Router) -> Optional[routing.Caller]:
    """The compressor whose GEMM-calling method is running here, if ``w`` is one of its GEMM weights."""
    comp = _thread.layer
    if comp is None or not any(w is getattr(getattr(comp, name, None), "weight", None) for name in GEMM_WEIGHTS):
        return None
    return caller_of(comp, False, r)


def _untraced(r: routing.Router, x: torch.Tensor, w: torch.Tensor) -> bool:
    """Under torch.compile: trace SGLang's own call (off, a bad configuration, or autograd needs a graph)."""
    return not r.enabled or ((x.requires_grad or w.requires_grad) and torch.is_grad_enabled())


def _run(r: routing.Router, x: torch.Tensor, w: torch.Tensor,
         caller: Optional[routing.Caller]) -> Optional[torch.Tensor]:
    run = r.kernel_for(x, w, caller)
    return run(x, w) if run is not None else None


# -- linear_bf16_fp32 ----------------------------------------------------------------
def around_linear(original_fn: Callable, x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    # The hot path: every compressor call of every eager decode step comes
    # through here; keep it to attribute reads, the decision and the launch.
    r = routing.get_router()
    if _thread.bypass or (not r.enabled and r.error is None):
        return original_fn(x, y, *args, **kwargs)
    caller = _calling_caller(y, r) if _thread.layer is not None else None
    if torch.compiler.is_compiling():
        if _untraced(r, x, y):
            return original_fn(x, y, *args, **kwargs)
        return routing.traced_call(x, y, caller.layer if caller else None)
    out = _run(r, x, y, caller)
    if out is not None:
        return out
    if releases.linear_rounds(layout, y):
        return torch_ref.mm_fp32(x, y)  # SGLang's aiter branch would round to bf16
    return original_fn(x, y, *args, **kwargs)


# -- Compressor._compute_wkv_gate (0.5.19 on) --------------------------------------------
def around_wkv_gate(original_fn: Callable, self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    r = routing.get_router()
    if not r.enabled and r.error is None:
        return original_fn(self, x, *args, **kwargs)
    fused = kwargs.get("weight", args[0] if args else None)
    weight = fused if fused is not None else getattr(getattr(self, "wkv_gate", None), "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dtype != _BF16:
        return original_fn(self, x, *args, **kwargs)  # quantized (GGUF) weights: SGLang's own path
    if torch.compiler.is_compiling():
        if _untraced(r, x, weight):
            return original_fn(self, x, *args, **kwargs)
        return routing.traced_call(x, weight, layer_of(self, fused is not None))
    caller = caller_of(self, fused is not None, r)
    if r.pairs is not None and fused is None and caller.selected and not routing.in_overlapped_region():
        out = pairs.joined(r, self, x, weight, lambda partner: caller_of(partner, False, r).selected)
        if out is not None:
            return out
    out = _run(r, x, weight, caller)
    if out is not None:
        return out
    if fused is not None or releases.compressor_rounds(layout, weight):
        # SGLang's aiter branch (in the compressor, or inside linear_bf16_fp32
        # on 0.5.19-0.5.20) rounds kv_score to bf16, and releases before the
        # fused GEMM take no weight=: give the fp32 product.
        return torch_ref.mm_fp32(x, weight)
    _thread.bypass = True  # decided and counted here: its linear_bf16_fp32 call must not be again
    try:
        return original_fn(self, x, *args, **kwargs)
    finally:
        _thread.bypass = False


# -- methods that call linear_bf16_fp32 themselves: name the calling layer ------------------
def around_naming(original_fn: Callable, self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``Compressor.compute_kv_score`` / ``prelaunch_kv_score`` (0.5.12-0.5.18) and DeepSeek-V4.1's
    ``DeepseekV41Compressor.project`` / ``project_fused``: they call ``linear_bf16_fp32`` themselves
    (and do more around it), so this hook only names the calling layer for the linear hook."""
    if torch.compiler.is_compiling() or not routing.get_router().enabled:
        # Traced: no thread-local state in a graph; the linear hook routes the call with no layer.
        return original_fn(self, x, *args, **kwargs)
    if layout is not None and layout.compressor_aiter == "_tgemm":
        _wrap_compressor_tgemm()
    prev = _thread.layer
    _thread.layer = self
    try:
        return original_fn(self, x, *args, **kwargs)
    finally:
        _thread.layer = prev


def around_overlapped(original_fn: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """``MQALayer``'s multi-stream prepares: the GEMMs they issue run beside other streams, so they take
    the fast table's rows (ranked there), not the serial table's (``routing.overlapped``). Traced by
    torch.compile, it marks nothing (Dynamo cannot guard a thread-local): the calls take the serial rows."""
    if torch.compiler.is_compiling():
        return original_fn(self, *args, **kwargs)
    with routing.overlapped():
        return original_fn(self, *args, **kwargs)


def name_v41_layer(result: Any, owner: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``MQALayer.__init__``: give its DeepSeek-V4.1 compressor the layer id (it has none)."""
    comp = getattr(owner, "__dict__", {}).get("_modules", {}).get("compressor")
    if comp is not None and type(comp).__name__ == V41_CLASS:
        try:
            object.__setattr__(comp, LAYER_ID_ATTR, int(getattr(owner, "layer_id", -1)))
        except Exception:  # never break model construction; the layer stays unnamed (id -1)
            pass
    return None


class CompressorTgemm:
    """Stands in for the compressor module's ``_tgemm`` (0.5.13-0.5.14 with aiter): routes the layer's
    ``_tgemm.mm(x, wkv_gate.weight, otype=bf16)`` in a hooked ``compute_kv_score``, fp32 out."""

    def __init__(self, real: Any):
        self.__wrapped__ = real

    def mm(self, inp: torch.Tensor, weights: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        r = routing.get_router()
        caller = _calling_caller(weights, r) if r.enabled else None
        if caller is None or args or kwargs.get("bias") is not None or inp.dtype != _BF16:
            return self.__wrapped__.mm(inp, weights, *args, **kwargs)
        # SGLang asks for bf16 output here; the plugin gives the fp32 product.
        out = _run(r, inp, weights, caller)
        return out if out is not None else torch_ref.mm_fp32(inp, weights)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)


def _wrap_compressor_tgemm() -> None:
    """Put ``CompressorTgemm`` in front of the compressor module's ``_tgemm``, once (plugin on only)."""
    comp = sys.modules.get(releases.COMPRESSOR_MODULE)
    real = getattr(comp, "_tgemm", None)
    if real is None or isinstance(real, CompressorTgemm):
        return  # no aiter here (SGLang never takes that branch), or done
    with _tgemm_lock:
        real = getattr(comp, "_tgemm", None)
        if real is not None and not isinstance(real, CompressorTgemm):
            comp._tgemm = CompressorTgemm(real)
