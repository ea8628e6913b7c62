"""The hooks into SGLang, registered by SGLang's own plugin loader.

``register()`` is the ``sglang.srt.plugins`` entry point. SGLang runs it in
every process (launcher, Engine, schedulers, workers) and then applies the
hooks; running it twice changes nothing. Every SGLang release with
DeepSeek-V4 (0.5.12 to 0.5.23) has the same plugin loader and hook registry;
what differs is where the GEMM lives and which compressor method calls it.
``detect_layout()`` finds which of the release layouts in ``RELEASE_LAYOUTS``
is installed, and the plugin installs AROUND hooks on

- ``linear_bf16_fp32`` where that release defines it (every ``from ...
  import`` copy is rebound by SGLang's hook registry);
- the ``Compressor`` method that calls the GEMM with the layer at hand:
  ``_compute_wkv_gate`` (0.5.19 on), else ``compute_kv_score`` and, where it
  exists, ``prelaunch_kv_score`` (0.5.12-0.5.18). Those two do more than the
  GEMM (context-parallel gathers), so their hook only names the calling layer
  for the ``linear_bf16_fp32`` hook;
- on 0.5.13-0.5.14 with aiter, the compressor module's own ``_tgemm``, which
  ``compute_kv_score`` calls directly with bf16 output;

and AFTER hooks on ``ServerArgs.add_cli_args`` / ``from_cli_args`` that add
``--enable-flydsl-fp32-gemm`` and ``--flydsl-fp32-gemm-layers`` and export
them to the environment the worker processes inherit.

With the plugin on, a call that SGLang's own code would round to bf16 (ROCm
with ``SGLANG_USE_AITER=1``: inside ``linear_bf16_fp32`` on 0.5.13-0.5.20, in
the compressor on 0.5.13-0.5.14 and 0.5.22-0.5.23) and that no fast kernel
takes gets the exact fp32 product instead. With it off, SGLang's functions
run as they are. Nothing here raises into SGLang at run time: a missing or
unimportable host symbol is one error line naming the cause, and SGLang runs
on unpatched.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
import threading
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import routing
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.layers import LayerInfo

logger = logging.getLogger(__name__)

COMPRESSOR_MODULE = "sglang.srt.layers.attention.dsv4.compressor"
COMPRESSOR = f"{COMPRESSOR_MODULE}.Compressor"
SERVER_ARGS = "sglang.srt.server_args.ServerArgs"
FLAG = "--enable-flydsl-fp32-gemm"
LAYERS_FLAG = "--flydsl-fp32-gemm-layers"


# -- release layouts -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ReleaseLayout:
    """One family of SGLang releases: where the GEMM is, and what rounds on ROCm.

    ``linear_aiter``: SGLang's ``linear_bf16_fp32`` itself returns
    ``tgemm.mm(x, w, otype=bf16).float()`` when its module's ``_use_aiter`` is
    set ("all" weights, or "bf16" weights only); None: no aiter branch.
    ``compressor_aiter``: the compressor's own aiter GEMM: "_tgemm" (the module
    global ``_tgemm``, called from ``compute_kv_score`` with bf16 output),
    "tgemm" (``_compute_wkv_gate`` returns ``tgemm.mm(...).float()`` when the
    module's ``_use_aiter`` is set, bf16 weights); None: none.
    """

    releases: str
    linear_module: str
    layer_method: str                  # "_compute_wkv_gate" or "compute_kv_score"
    linear_aiter: Optional[str]
    compressor_aiter: Optional[str]
    layer_methods: tuple[str, ...] = ()  # the Compressor methods hooked (filled in by detection)
    sglang_version: str = ""

    @property
    def linear_target(self) -> str:
        return f"{self.linear_module}.linear_bf16_fp32"

    @property
    def layer_targets(self) -> tuple[str, ...]:
        methods = self.layer_methods or ((self.layer_method,) if self.layer_method else ())
        return tuple(f"{COMPRESSOR}.{m}" for m in methods)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["linear_target"], d["layer_targets"] = self.linear_target, list(self.layer_targets)
        return d


# Newest first. Read from the released wheels (sglang==0.5.12 .. 0.5.23).
RELEASE_LAYOUTS: tuple[ReleaseLayout, ...] = (
    ReleaseLayout("0.5.22-0.5.23", "sglang.kernels.ops.gemm.bf16_fp32", "_compute_wkv_gate", None, "tgemm"),
    ReleaseLayout("0.5.21", "sglang.kernels.ops.gemm.bf16_fp32", "_compute_wkv_gate", None, None),
    ReleaseLayout("0.5.19-0.5.20", "sglang.kernels.ops.attention.dsv4.gemm", "_compute_wkv_gate", "bf16", None),
    ReleaseLayout("0.5.17-0.5.18", "sglang.kernels.ops.attention.dsv4.gemm", "compute_kv_score", "bf16", None),
    ReleaseLayout("0.5.15-0.5.16", "sglang.jit_kernel.dsv4.gemm", "compute_kv_score", "all", None),
    ReleaseLayout("0.5.13-0.5.14", "sglang.jit_kernel.dsv4.gemm", "compute_kv_score", "all", "_tgemm"),
    ReleaseLayout("0.5.12", "sglang.jit_kernel.deepseek_v4", "compute_kv_score", None, None),
)
LINEAR_MODULES: tuple[str, ...] = tuple(dict.fromkeys(lay.linear_module for lay in RELEASE_LAYOUTS))
# Methods that call the GEMM with the layer at hand on releases without _compute_wkv_gate.
KV_SCORE_METHODS = ("compute_kv_score", "prelaunch_kv_score")


def _import(module: str) -> tuple[Any, Optional[str]]:
    """(module, None); (None, None) when SGLang has no such module; (None, cause) when it failed."""
    try:
        return importlib.import_module(module), None
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):
            return None, None  # the module (or a package above it) is not in this release
        return None, f"{module} failed to import: {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - any import-time failure is the cause to report
        return None, f"{module} failed to import: {type(e).__name__}: {e}"


def _lookup(dotted: str) -> tuple[bool, Optional[str]]:
    """Whether ``module.Class.attr`` / ``module.attr`` exists, and the import error if one hid it."""
    parts = dotted.split(".")
    obj, rest = None, parts[-1:]
    for i in range(1, len(parts)):
        mod, err = _import(".".join(parts[:i]))
        if err is not None:
            return False, err
        if mod is None:  # parts[i-1] is no module: the attribute path starts there
            rest = parts[i - 1:]
            break
        obj = mod
    if obj is None:
        return False, None
    for name in rest:
        if not hasattr(obj, name):
            return False, None
        obj = getattr(obj, name)
    return True, None


def _sglang_version() -> str:
    try:
        import sglang

        return str(getattr(sglang, "__version__", "?"))
    except Exception as e:  # noqa: BLE001
        return f"? ({type(e).__name__}: {e})"


def detect_layout() -> tuple[Optional[ReleaseLayout], list[str]]:
    """The installed SGLang's release layout, and the reasons for anything not found.

    Matched on what the installed code has (not the version string, so patched
    images are recognised by their code): where ``linear_bf16_fp32`` is,
    whether ``Compressor`` has ``_compute_wkv_gate``, and the aiter globals of
    the two modules. A layout outside the table is hooked by the same rules
    and named "unrecognized".
    """
    errors: list[str] = []
    linear_mod = None
    linear_name = None
    failed: list[str] = []
    for name in LINEAR_MODULES:
        mod, err = _import(name)
        if err is not None:
            failed.append(err)
        elif mod is not None and hasattr(mod, "linear_bf16_fp32"):
            linear_mod, linear_name = mod, name
            break
    if linear_mod is None and failed:
        errors.append(f"linear_bf16_fp32: SGLang's {'; '.join(failed)}; left unpatched")
    elif linear_mod is None:
        errors.append("linear_bf16_fp32 not found in SGLang at any of: "
                      + ", ".join(f"{m}.linear_bf16_fp32" for m in LINEAR_MODULES) + "; left unpatched")
    elif failed:  # an older location failed to import, but this release defines it elsewhere
        logger.info("sglang-fp32gemm: ignored while looking for linear_bf16_fp32: %s", "; ".join(failed))
    comp_mod, err = _import(COMPRESSOR_MODULE)
    comp_cls = getattr(comp_mod, "Compressor", None) if comp_mod is not None else None
    if err is not None:
        errors.append(f"DeepSeek-V4 compressor: SGLang's {err}; compressor calls are left unpatched")
    elif comp_cls is None:
        errors.append(f"{COMPRESSOR} not found (no DeepSeek-V4 in this SGLang); compressor calls are "
                      "left unpatched")
    if linear_mod is None and comp_cls is None:
        return None, errors

    if comp_cls is not None and hasattr(comp_cls, "_compute_wkv_gate"):
        layer_method, methods = "_compute_wkv_gate", ("_compute_wkv_gate",)
    elif comp_cls is not None and hasattr(comp_cls, "compute_kv_score"):
        layer_method = "compute_kv_score"
        methods = tuple(m for m in KV_SCORE_METHODS if hasattr(comp_cls, m))
    else:
        layer_method, methods = "", ()
        if comp_cls is not None:
            errors.append(f"{COMPRESSOR} has neither _compute_wkv_gate nor compute_kv_score; compressor "
                          "calls route without their layer")
    cvars = vars(comp_mod) if comp_mod is not None else {}
    compressor_aiter = "_tgemm" if "_tgemm" in cvars else ("tgemm" if "_use_aiter" in cvars else None)
    linear_has_aiter = linear_mod is not None and "_use_aiter" in vars(linear_mod)
    version = _sglang_version()
    for known in RELEASE_LAYOUTS:
        if (known.linear_module == linear_name and known.layer_method == layer_method
                and known.compressor_aiter == compressor_aiter
                and (known.linear_aiter is not None) == linear_has_aiter):
            return dataclasses.replace(known, layer_methods=methods, sglang_version=version), errors
    # Not a layout we have read, or part of it missing (reported above):
    # hook what is there; assume the worst of an aiter branch.
    name = "unrecognized" if linear_mod is not None and comp_cls is not None else "incomplete (see errors)"
    lay = ReleaseLayout(name, linear_name or "", layer_method, "all" if linear_has_aiter else None,
                        compressor_aiter, methods, version)
    if not errors:
        logger.warning("sglang-fp32gemm: SGLang %s has a layout not in the plugin's table (%s, %s); hooking "
                       "what was found", version, lay.linear_target, ", ".join(lay.layer_targets))
    return lay, errors


def _linear_rounds(w: torch.Tensor) -> bool:
    """Would SGLang's own ``linear_bf16_fp32`` round this call to bf16 (its aiter branch)?"""
    lay = STATE["layout"]
    if lay is None or lay.linear_aiter is None:
        return False
    mod = sys.modules.get(lay.linear_module)
    if not getattr(mod, "_use_aiter", False):
        return False
    return lay.linear_aiter == "all" or w.dtype == torch.bfloat16


def _compressor_rounds(w: torch.Tensor) -> bool:
    """Would SGLang's own ``_compute_wkv_gate`` round this call to bf16 (its aiter branch)?"""
    lay = STATE["layout"]
    if lay is None or lay.compressor_aiter != "tgemm":
        return False
    comp = sys.modules.get(COMPRESSOR_MODULE)
    return bool(getattr(comp, "_use_aiter", False)) and w.dtype == torch.bfloat16


def _sglang_rounds(w: torch.Tensor) -> bool:
    """Would SGLang's own path for a compressor GEMM with this weight give a bf16-rounded result?"""
    return _compressor_rounds(w) or _linear_rounds(w)


# What register() found and installed, for explain and tests. A dict, not
# module globals holding functions: SGLang's registry rebinds any module
# global that holds a patched original.
STATE: dict[str, Any] = {"registered": False, "layout": None, "linear_target": None, "compressor_target": None,
                         "layer_targets": [], "hooks": [], "tgemm_proxy": False, "errors": []}
_register_lock = threading.Lock()
_tgemm_lock = threading.Lock()


class _Bypass(threading.local):
    # A class default: reading an unset thread-local through getattr(...,
    # default) costs an exception per call on the hot path.
    on = False


class _Calling(threading.local):
    # The Compressor whose compute_kv_score / prelaunch_kv_score is running
    # on this thread (releases without _compute_wkv_gate).
    layer: Any = None


_bypass = _Bypass()
_calling = _Calling()


def _hook_registry():
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    return HookRegistry, HookType


def find_linear_target() -> Optional[str]:
    lay, _ = detect_layout()
    return lay.linear_target if lay is not None and lay.linear_module else None


def register() -> None:
    """The entry point. Safe to run twice; never raises into SGLang."""
    with _register_lock:
        if STATE["registered"]:
            return
        try:
            HookRegistry, HookType = _hook_registry()
        except Exception as e:
            STATE["errors"] = []
            _error(f"SGLang's hook registry (sglang.srt.plugins.hook_registry) not importable "
                   f"({type(e).__name__}: {e}); nothing patched")
            return
        STATE["errors"] = []
        hooks: list[str] = []

        def hook(target: str, fn: Callable, kind: Any) -> None:
            HookRegistry.register(target, fn, kind)
            hooks.append(target)

        found_add, err_add = _lookup(f"{SERVER_ARGS}.add_cli_args")
        found_from, err_from = _lookup(f"{SERVER_ARGS}.from_cli_args")
        if found_add and found_from:
            hook(f"{SERVER_ARGS}.add_cli_args", _after_add_cli_args, HookType.AFTER)
            hook(f"{SERVER_ARGS}.from_cli_args", _after_from_cli_args, HookType.AFTER)
        else:
            cause = err_add or err_from or f"{SERVER_ARGS}.add_cli_args/from_cli_args not found"
            _error(f"{cause}: the launch flag {FLAG} is unavailable; use {settings_mod.ENABLE_VAR}=1")

        lay, errors = detect_layout()
        for e in errors:
            _error(e)
        STATE["layout"] = lay
        if lay is not None and lay.linear_module:
            hook(lay.linear_target, _around_linear, HookType.AROUND)
            STATE["linear_target"] = lay.linear_target
        if lay is not None and lay.layer_method:
            around = _around_wkv_gate if lay.layer_method == "_compute_wkv_gate" else _around_kv_score
            for target in lay.layer_targets:
                hook(target, around, HookType.AROUND)
            STATE["layer_targets"] = list(lay.layer_targets)
            STATE["compressor_target"] = lay.layer_targets[0]
        STATE["hooks"] = hooks
        STATE["registered"] = True
        for line in describe():
            logger.info("sglang-fp32gemm: %s", line)
        # Load and validate the configuration now, once per process; the
        # router logs a bad one itself (once) and every call takes the fallback.
        try:
            r = routing.get_router()
            if r.error:
                # Logged by the router at the first GEMM call (a launcher
                # stops with one line of its own, see _after_from_cli_args).
                STATE["errors"].append(f"bad configuration: {r.error}")
        except Exception as e:  # never raise into SGLang's loader
            _error(f"router set-up failed: {type(e).__name__}: {e}")


def install() -> None:
    """register() and apply the hooks now, for code that does not run SGLang's loader."""
    register()
    HookRegistry, _ = _hook_registry()
    HookRegistry.apply_hooks()


def describe() -> list[str]:
    """What was found and hooked, one line each (``explain`` prints these)."""
    if not STATE["registered"]:
        return ["not registered (SGLang's plugin loader has not run it in this process)"]
    lay: Optional[ReleaseLayout] = STATE["layout"]
    out = []
    if lay is None:
        out.append(f"SGLang {_sglang_version()}: no DeepSeek-V4 GEMM found")
    else:
        out.append(f"SGLang {lay.sglang_version}: release layout {lay.releases}")
        if lay.linear_module:
            out.append(f"hooked {lay.linear_target} (AROUND; SGLang rebinds every from-import copy)")
        if lay.layer_method == "_compute_wkv_gate":
            out.append(f"hooked {lay.layer_targets[0]} (AROUND; names the layer, routes the GEMM)")
        elif lay.layer_method:
            out.append(f"hooked {', '.join(lay.layer_targets)} (AROUND; names the calling layer for "
                       "the linear_bf16_fp32 hook)")
        rounds = []
        if lay.linear_aiter:
            rounds.append("inside linear_bf16_fp32" + (" (bf16 weights)" if lay.linear_aiter == "bf16" else ""))
        if lay.compressor_aiter == "_tgemm":
            rounds.append("in Compressor.compute_kv_score, which calls the module's _tgemm with bf16 output"
                          + (" (wrapped)" if STATE["tgemm_proxy"] else ""))
        elif lay.compressor_aiter == "tgemm":
            rounds.append("in Compressor._compute_wkv_gate")
        if rounds:
            here = "active here" if _aiter_active() else "not active here"
            out.append(f"ROCm with SGLANG_USE_AITER=1 ({here}): SGLang rounds to bf16 " + " and ".join(rounds)
                       + "; with the plugin on, such calls give the fp32 product")
    if f"{SERVER_ARGS}.add_cli_args" in STATE["hooks"]:
        out.append(f"flags {FLAG}, {LAYERS_FLAG} on {SERVER_ARGS}.add_cli_args/from_cli_args "
                   "(python -m sglang.launch_server --help lists them; sglang serve --help does not)")
    out.extend(f"error: {e}" for e in STATE["errors"])
    return out


def _error(msg: str) -> None:
    STATE["errors"].append(msg)
    logger.error("sglang-fp32gemm: %s", msg)


# -- which layer is calling (releases without _compute_wkv_gate) -----------------
def _calling_layer(w: torch.Tensor) -> Optional[LayerInfo]:
    """The compressor layer whose kv-score method is running here, if ``w`` is its wkv_gate weight."""
    comp = _calling.layer
    if comp is None or w.dtype != torch.bfloat16:
        return None
    if w is not getattr(getattr(comp, "wkv_gate", None), "weight", None):
        return None
    return LayerInfo.of_compressor(getattr(comp, "layer_id", -1), getattr(comp, "ratio", 0),
                                   bool(getattr(comp, "is_in_indexer", False)), False)


def _linear_fallback(original_fn: Callable, x: torch.Tensor, y: torch.Tensor, args: tuple,
                     kwargs: dict) -> Callable[[], torch.Tensor]:
    if _linear_rounds(y):
        return lambda: routing.torch_ref.mm_fp32(x, y)  # SGLang's aiter branch would round to bf16
    return lambda: original_fn(x, y, *args, **kwargs)


class _CompressorTgemm:
    """Stands in for the compressor module's ``_tgemm`` (0.5.13-0.5.14 with aiter).

    Inside a hooked ``compute_kv_score`` with the plugin on, the layer's
    ``_tgemm.mm(x, wkv_gate.weight, otype=bf16)`` is routed and returns fp32;
    every other use goes to aiter's own object.
    """

    def __init__(self, real: Any):
        self.__wrapped__ = real

    def mm(self, inp: torch.Tensor, weights: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _around_compressor_tgemm(self.__wrapped__.mm, inp, weights, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)


def _wrap_compressor_tgemm() -> None:
    """Put ``_CompressorTgemm`` in front of the compressor module's ``_tgemm``, once.

    Called by the kv-score hook with the plugin on, so with the plugin off
    SGLang's module is left as it is.
    """
    comp = sys.modules.get(COMPRESSOR_MODULE)
    real = getattr(comp, "_tgemm", None)
    if real is None or isinstance(real, _CompressorTgemm):
        return  # no aiter here (SGLang never takes that branch), or done
    with _tgemm_lock:
        real = getattr(comp, "_tgemm", None)
        if real is not None and not isinstance(real, _CompressorTgemm):
            comp._tgemm = _CompressorTgemm(real)
            STATE["tgemm_proxy"] = True


def _aiter_active() -> bool:
    """Whether the installed SGLang took its aiter branches in this process (ROCm, SGLANG_USE_AITER=1)."""
    lay = STATE["layout"]
    if lay is None:
        return False
    lin, comp = sys.modules.get(lay.linear_module), sys.modules.get(COMPRESSOR_MODULE)
    return bool(getattr(lin, "_use_aiter", False) or getattr(comp, "_use_aiter", False)
                or getattr(comp, "_tgemm", None) is not None)


def _around_compressor_tgemm(original_mm: Callable, inp: torch.Tensor, weights: torch.Tensor, *args: Any,
                             **kwargs: Any) -> torch.Tensor:
    layer = _calling_layer(weights) if routing.get_router().enabled else None
    if layer is None or args or kwargs.get("bias") is not None or inp.dtype != torch.bfloat16:
        return original_mm(inp, weights, *args, **kwargs)
    # SGLang asks for bf16 output here; the plugin gives the fp32 product.
    return routing.linear_bf16_fp32(inp, weights, layer=layer,
                                    fallback=lambda: routing.torch_ref.mm_fp32(inp, weights))


# -- the GEMM hooks ------------------------------------------------------------
def _around_linear(original_fn: Callable, x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    # The hot path: every DeepSeek-V4 compressor call of every decode step
    # in eager mode comes through here; keep it to attribute reads, one
    # route lookup and the launch.
    r = routing.get_router()
    if _bypass.on:
        pass  # the compressor hook already decided this call
    elif r.error is not None:
        r.bad_configuration()
    elif r.enabled:
        layer = _calling_layer(y) if _calling.layer is not None else None
        if _is_compiling():
            return routing.linear_bf16_fp32(x, y, layer=layer,
                                            fallback=_linear_fallback(original_fn, x, y, args, kwargs))
        if layer is None or r.selects(layer):
            run = r.kernel_for(x, y)
            if run is not None:
                out = run(x, y)
                if out is not None:
                    return out
        else:
            r.count_unselected()
        if _linear_rounds(y):
            return routing.torch_ref.mm_fp32(x, y)  # SGLang's aiter branch would round to bf16
    return original_fn(x, y, *args, **kwargs)


def _is_compiling() -> bool:
    return torch.compiler.is_compiling()


def _around_kv_score(original_fn: Callable, self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``Compressor.compute_kv_score`` / ``prelaunch_kv_score`` (0.5.12-0.5.18): name the layer."""
    if not routing.get_router().enabled:
        return original_fn(self, x, *args, **kwargs)
    lay = STATE["layout"]
    if lay is not None and lay.compressor_aiter == "_tgemm":
        _wrap_compressor_tgemm()
    prev = _calling.layer
    _calling.layer = self
    try:
        return original_fn(self, x, *args, **kwargs)
    finally:
        _calling.layer = prev


def _around_wkv_gate(original_fn: Callable, self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    r = routing.get_router()
    if not r.enabled:
        if r.error is None:
            return original_fn(self, x, *args, **kwargs)
        r.bad_configuration()
        _bypass.on = True  # counted here; its linear_bf16_fp32 call must not count again
        try:
            return original_fn(self, x, *args, **kwargs)
        finally:
            _bypass.on = False
    fused = kwargs.get("weight", args[0] if args else None)
    weight = fused if fused is not None else getattr(getattr(self, "wkv_gate", None), "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dtype != torch.bfloat16:
        return original_fn(self, x, *args, **kwargs)  # quantized (GGUF) weights: SGLang's own path
    # Which layer this is and whether the layer file selects it: decided
    # once per compressor module (and fused or not), kept by the router.
    key = (id(self), fused is not None)
    got = r.layers.get(key)
    if got is None:
        info = LayerInfo.of_compressor(getattr(self, "layer_id", -1), getattr(self, "ratio", 0),
                                       bool(getattr(self, "is_in_indexer", False)), fused is not None)
        got = r.layers[key] = (info, r.selects(info))
    info, selected = got
    if selected and not _is_compiling():
        run = r.kernel_for(x, weight)
        if run is not None:
            out = run(x, weight)
            if out is not None:
                return out
    elif not selected:
        r.count_unselected()

    def fallback() -> torch.Tensor:
        if fused is not None or _sglang_rounds(weight):
            # SGLang's aiter branch (in the compressor, or inside
            # linear_bf16_fp32 on 0.5.19-0.5.20) rounds kv_score to bf16, and
            # releases before the fused GEMM take no weight=: give the fp32 product.
            return routing.torch_ref.mm_fp32(x, weight)
        _bypass.on = True  # its linear_bf16_fp32 call must not be routed again
        try:
            return original_fn(self, x, *args, **kwargs)
        finally:
            _bypass.on = False

    if selected and _is_compiling():
        return routing.linear_bf16_fp32(x, weight, layer=info, fallback=fallback)
    return fallback()


# -- the launch flags --------------------------------------------------------
def _after_add_cli_args(result: Any, parser: Any, *args: Any, **kwargs: Any) -> None:
    if FLAG in getattr(parser, "_option_string_actions", {}):
        return None
    group = parser.add_argument_group("sglang-fp32gemm plugin")
    group.add_argument(FLAG, action="store_true", default=False,
                       help="Route DeepSeek-V4 compressor fp32-output GEMMs (M<=32, tuned shapes) to the "
                            "fast fp32 kernel of the sglang-fp32gemm plugin (Triton on NVIDIA, FlyDSL on "
                            f"gfx950). Same as {settings_mod.ENABLE_VAR}=1.")
    group.add_argument(LAYERS_FLAG, type=str, default=None, metavar="PATH",
                       help="Per-layer opt-in file for the sglang-fp32gemm plugin (layer ids, ranges, "
                            f"kinds hca/csa/indexer/fused). Same as {settings_mod.LAYERS_VAR}=PATH.")
    return None


def _after_from_cli_args(result: Any, *args: Any, **kwargs: Any) -> None:
    ns = next((a for a in args if hasattr(a, "__dict__") and not isinstance(a, type)), None)
    if ns is None:
        ns = kwargs.get("args")
    if getattr(ns, "enable_flydsl_fp32_gemm", False):
        os.environ[settings_mod.ENABLE_VAR] = "1"
        os.environ[settings_mod.SOURCE_VAR] = "flag"
    path = getattr(ns, "flydsl_fp32_gemm_layers", None)
    if path:
        os.environ[settings_mod.LAYERS_VAR] = os.path.abspath(path)
    # Bad settings stop the launch here, before any model work: one line
    # naming the file:line or the variable, no traceback.
    from sglang_fp32gemm import config as config_mod
    from sglang_fp32gemm.backends import default_backends, parsers

    backends = default_backends()
    try:
        settings_mod.reload()
        cfg = config_mod.load(parsers=parsers(backends))
    except ConfigError as e:
        raise SystemExit(f"sglang-fp32gemm: bad configuration, launch stopped: {e}") from None
    routing.reset_router(routing.Router(cfg, backends))
    return None
