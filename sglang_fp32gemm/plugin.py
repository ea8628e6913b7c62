"""The hooks into SGLang, registered by SGLang's own plugin loader.

``register()`` is the ``sglang.srt.plugins`` entry point. SGLang runs it in
every process (launcher, Engine, schedulers, workers) and then applies the
hooks; running it twice changes nothing. It installs AROUND hooks on

- ``linear_bf16_fp32``, at the first location the installed SGLang has
  (releases moved it; every ``from ... import`` copy is rebound by SGLang's
  hook registry), and
- ``Compressor._compute_wkv_gate``, which names the calling layer and, on
  ROCm with aiter, replaces SGLang's bf16-rounded ``tgemm.mm`` with the
  fp32 result;

and AFTER hooks on ``ServerArgs.add_cli_args`` / ``from_cli_args`` that add
``--enable-flydsl-fp32-gemm`` and ``--flydsl-fp32-gemm-layers`` and export
them to the environment the worker processes inherit. Nothing here raises
into SGLang at run time: a missing host symbol is one error line, and SGLang
runs on unpatched.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any, Callable

import torch

from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import routing
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.layers import LayerInfo

logger = logging.getLogger(__name__)

LINEAR_MODULES = (
    "sglang.kernels.ops.gemm.bf16_fp32",
    "sglang.kernels.ops.attention.dsv4.gemm",
    "sglang.jit_kernel.dsv4.gemm",
    "sglang.jit_kernel.deepseek_v4",
)
COMPRESSOR_MODULE = "sglang.srt.layers.attention.dsv4.compressor"
SERVER_ARGS = "sglang.srt.server_args.ServerArgs"
FLAG = "--enable-flydsl-fp32-gemm"
LAYERS_FLAG = "--flydsl-fp32-gemm-layers"

# What register() installed, for explain and tests. A dict, not module
# globals holding functions: SGLang's registry rebinds any module global
# that holds a patched original.
STATE: dict[str, Any] = {"registered": False, "linear_target": None, "compressor_target": None, "errors": []}
_register_lock = threading.Lock()
class _Bypass(threading.local):
    # A class default: reading an unset thread-local through getattr(...,
    # default) costs an exception per call on the hot path.
    on = False


_bypass = _Bypass()


def _hook_registry():
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    return HookRegistry, HookType


def _has(dotted: str) -> bool:
    mod, _, attr = dotted.rpartition(".")
    try:
        obj = importlib.import_module(mod)
    except Exception:
        # e.g. "a.b.Class" -> import "a.b", then getattr "Class"
        head, _, cls = mod.rpartition(".")
        try:
            obj = getattr(importlib.import_module(head), cls)
        except Exception:
            return False
    return hasattr(obj, attr)


def find_linear_target() -> str | None:
    for mod in LINEAR_MODULES:
        if _has(f"{mod}.linear_bf16_fp32"):
            return f"{mod}.linear_bf16_fp32"
    return None


def register() -> None:
    """The entry point. Safe to run twice; never raises into SGLang."""
    with _register_lock:
        if STATE["registered"]:
            return
        try:
            HookRegistry, HookType = _hook_registry()
        except Exception as e:
            logger.error("sglang-fp32gemm: SGLang's hook registry (sglang.srt.plugins.hook_registry) "
                         "not importable (%s: %s); nothing patched", type(e).__name__, e)
            return
        STATE["errors"] = []
        if _has(f"{SERVER_ARGS}.add_cli_args") and _has(f"{SERVER_ARGS}.from_cli_args"):
            HookRegistry.register(f"{SERVER_ARGS}.add_cli_args", _after_add_cli_args, HookType.AFTER)
            HookRegistry.register(f"{SERVER_ARGS}.from_cli_args", _after_from_cli_args, HookType.AFTER)
        else:
            _error(f"{SERVER_ARGS}.add_cli_args/from_cli_args not found: the launch flag {FLAG} is "
                   f"unavailable; use {settings_mod.ENABLE_VAR}=1")
        target = find_linear_target()
        if target is None:
            _error("linear_bf16_fp32 not found in SGLang at any of: "
                   + ", ".join(f"{m}.linear_bf16_fp32" for m in LINEAR_MODULES) + "; left unpatched")
        else:
            HookRegistry.register(target, _around_linear, HookType.AROUND)
            STATE["linear_target"] = target
            logger.info("sglang-fp32gemm: hooking %s", target)
        comp = f"{COMPRESSOR_MODULE}.Compressor._compute_wkv_gate"
        if _has(comp):
            HookRegistry.register(comp, _around_wkv_gate, HookType.AROUND)
            STATE["compressor_target"] = comp
            logger.info("sglang-fp32gemm: hooking %s", comp)
        else:
            _error(f"{comp} not found; DeepSeek-V4 compressor calls are left unpatched")
        STATE["registered"] = True
        try:
            settings_mod.get()
        except Exception as e:  # reported once here; calls run on the fallback
            _error(f"bad setting: {e}")


def install() -> None:
    """register() and apply the hooks now, for code that does not run SGLang's loader."""
    register()
    HookRegistry, _ = _hook_registry()
    HookRegistry.apply_hooks()


def _error(msg: str) -> None:
    STATE["errors"].append(msg)
    logger.error("sglang-fp32gemm: %s", msg)


# -- the GEMM hooks ------------------------------------------------------------
def _around_linear(original_fn: Callable, x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    # The hot path: every DeepSeek-V4 compressor call of every decode step
    # in eager mode comes through here; keep it to attribute reads, one
    # route lookup and the launch.
    r = routing.get_router()
    if r.enabled and not _bypass.on:
        if _is_compiling():
            return routing.linear_bf16_fp32(x, y, fallback=lambda: original_fn(x, y, *args, **kwargs))
        run = r.kernel_for(x, y)
        if run is not None:
            out = run(x, y)
            if out is not None:
                return out
    return original_fn(x, y, *args, **kwargs)


def _is_compiling() -> bool:
    return torch.compiler.is_compiling()


def _around_wkv_gate(original_fn: Callable, self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    r = routing.get_router()
    if not r.enabled:
        return original_fn(self, x, *args, **kwargs)
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
        import sys

        comp = sys.modules.get(COMPRESSOR_MODULE)
        if fused is not None or (comp is not None and getattr(comp, "_use_aiter", False)):
            # SGLang's aiter branch rounds kv_score to bf16, and releases
            # before the fused GEMM take no weight=: give the fp32 product.
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
    # Bad settings stop the launch here, with the file:line or variable.
    s = settings_mod.reload()
    if s.enabled:
        layers_mod.load(s.layers_path)
        from sglang_fp32gemm.table import TunedTable

        TunedTable.load(s.config_paths)
    routing.reset_router()
    return None
