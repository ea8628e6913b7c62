"""Registration: the ``sglang.srt.plugins`` entry point (``register()``, run in every process) and the
launch flags. Nothing here raises into SGLang: a missing host symbol is one error line, SGLang runs on
unpatched. How the flags reach the workers: docs/design.md ("Enablement and settings").
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable, Optional

from sglang_fp32gemm import releases
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.errors import ConfigError

# hooks and routing (and the custom op) are imported only when the plugin is
# on: an installed plugin that is off costs SGLang's processes nothing.

logger = logging.getLogger(__name__)

SERVER_ARGS = "sglang.srt.server_args.ServerArgs"
FLAG = "--enable-flydsl-fp32-gemm"
LAYERS_FLAG = "--flydsl-fp32-gemm-layers"


# What register() found and installed, for explain and tests. A dict, not
# module globals holding functions: SGLang's registry rebinds any module
# global that holds a patched original.
STATE: dict[str, Any] = {"registered": False, "off": False, "layout": None, "linear_target": None,
                         "compressor_target": None, "layer_targets": [], "v41_targets": [], "overlap_targets": [],
                         "hooks": [],
                         "errors": []}
_register_lock = threading.Lock()


def _hook_registry():
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    return HookRegistry, HookType


def register() -> None:
    """The entry point. Safe to run twice; never raises into SGLang."""
    with _register_lock:
        if STATE["registered"]:
            return
        STATE["errors"] = []
        try:
            HookRegistry, HookType = _hook_registry()
        except Exception as e:
            _error(f"SGLang's hook registry (sglang.srt.plugins.hook_registry) not importable "
                   f"({type(e).__name__}: {e}); nothing patched")
            return
        installed: list[str] = []

        def hook(target: str, fn: Callable, kind: Any) -> None:
            HookRegistry.register(target, fn, kind)
            installed.append(target)

        found_add, err_add = releases.lookup(f"{SERVER_ARGS}.add_cli_args")
        found_from, err_from = releases.lookup(f"{SERVER_ARGS}.from_cli_args")
        if found_add and found_from:
            hook(f"{SERVER_ARGS}.add_cli_args", _after_add_cli_args, HookType.AFTER)
            hook(f"{SERVER_ARGS}.from_cli_args", _after_from_cli_args, HookType.AFTER)
        else:
            cause = err_add or err_from or f"{SERVER_ARGS}.add_cli_args/from_cli_args not found"
            _error(f"{cause}: the launch flag {FLAG} is unavailable; use {settings_mod.ENABLE_VAR}=1")

        if _cleanly_off():
            # Off costs nothing: no GEMM hook, so SGLang's model code is not
            # imported for it (the registry imports each hook's target).
            STATE["off"] = True
        else:
            _hook_gemms(hook, HookType)
        STATE["hooks"] = installed
        STATE["registered"] = True
        for line in describe():
            logger.info("sglang-fp32gemm: %s", line)
        if STATE["off"]:
            return
        # Load and validate the configuration once per process; a bad one means every call takes the fallback.
        try:
            from sglang_fp32gemm import routing

            r = routing.get_router()
            if r.error:
                # Logged by the router at the first GEMM call (a launcher
                # stops with one line of its own, see _after_from_cli_args).
                STATE["errors"].append(f"bad configuration: {r.error}")
        except Exception as e:  # never raise into SGLang's loader
            _error(f"router set-up failed: {type(e).__name__}: {e}")


def _cleanly_off() -> bool:
    """Off by the switch, not by a bad configuration (which is hooked, logged and served exactly)."""
    try:
        return not settings_mod.reload().enabled
    except ConfigError:
        return False


def _hook_gemms(hook: Callable, HookType: Any) -> None:
    from sglang_fp32gemm import hooks

    lay, errors = releases.detect_layout()
    for e in errors:
        _error(e)
    STATE["layout"] = hooks.layout = lay
    if lay is not None and lay.linear_module:
        hook(lay.linear_target, hooks.around_linear, HookType.AROUND)
        STATE["linear_target"] = lay.linear_target
    if lay is not None and lay.layer_method:
        around = hooks.around_wkv_gate if lay.layer_method == "_compute_wkv_gate" else hooks.around_naming
        for target in lay.layer_targets:
            hook(target, around, HookType.AROUND)
        STATE["layer_targets"] = list(lay.layer_targets)
        STATE["compressor_target"] = lay.layer_targets[0]
    if lay is not None and lay.linear_module:
        _hook_v41(hook, HookType)
        _hook_multi_stream(hook, HookType)


def _hook_multi_stream(hook: Callable, HookType: Any) -> None:
    """Mark SGLang's multi-stream region, so that calls outside it take the serial table's rows.
    Without the methods there is no telling, and every call takes the fast table's rows."""
    from sglang_fp32gemm import hooks, routing

    targets = []
    for name in releases.MULTI_STREAM_METHODS:
        dotted = f"{releases.MQA_LAYER}.{name}"
        found, err = releases.lookup(dotted)
        if found:
            hook(dotted, hooks.around_overlapped, HookType.AROUND)
            targets.append(dotted)
        elif err is not None:
            break
    STATE["overlap_targets"] = targets
    if not targets:
        routing.serial_routes_allowed = False
        logger.warning("sglang-fp32gemm: %s.%s not found: the serial table is not used (every call takes "
                       "the fast table's rows)", releases.MQA_LAYER, releases.MULTI_STREAM_METHODS[0])


def _hook_v41(hook: Callable, HookType: Any) -> None:
    """DeepSeek-V4.1's ratio-2 compressor, where it and the model module that names its layer import
    (without that module no DeepSeek model is served: its import error is SGLang's business)."""
    from sglang_fp32gemm import hooks

    targets = []
    for dotted in [f"{releases.V41_COMPRESSOR}.{m}" for m in releases.V41_METHODS] + [releases.V41_OWNER_INIT]:
        found, err = releases.lookup(dotted)
        if not found:
            if err is not None:
                logger.info("sglang-fp32gemm: DeepSeek-V4.1 compressor not hooked: %s", err)
            return
        targets.append(dotted)
    *methods, owner = targets
    for target in methods:
        hook(target, hooks.around_naming, HookType.AROUND)
    hook(owner, hooks.name_v41_layer, HookType.AFTER)
    STATE["v41_targets"] = methods


def install() -> None:
    """register() and apply the hooks now, for code that does not run SGLang's loader."""
    register()
    HookRegistry, _ = _hook_registry()
    HookRegistry.apply_hooks()


def describe() -> list[str]:
    """What was found and hooked, one line each (``explain`` prints these)."""
    if not STATE["registered"]:
        return ["not registered (SGLang's plugin loader has not run it in this process)"]
    lay: Optional[releases.ReleaseLayout] = STATE["layout"]
    out = []
    if STATE["off"]:
        out.append(f"off when SGLang loaded it ({settings_mod.ENABLE_VAR} not set): no GEMM hook installed, "
                   "SGLang's functions are untouched")
    elif lay is None:
        out.append(f"SGLang {releases.sglang_version()}: no DeepSeek-V4 GEMM found")
    else:
        out.append(f"SGLang {lay.sglang_version}: release layout {lay.releases}")
        if lay.linear_module:
            out.append(f"hooked {lay.linear_target} (AROUND; SGLang rebinds every from-import copy)")
        if lay.layer_method == "_compute_wkv_gate":
            out.append(f"hooked {lay.layer_targets[0]} (AROUND; names the layer, routes the GEMM)")
        elif lay.layer_method:
            out.append(f"hooked {', '.join(lay.layer_targets)} (AROUND; names the calling layer for "
                       "the linear_bf16_fp32 hook)")
        if STATE["overlap_targets"]:
            out.append(f"hooked {', '.join(STATE['overlap_targets'])} (AROUND; marks SGLang's multi-stream "
                       "region: calls outside it take the serial table's rows)")
        if STATE["v41_targets"]:
            out.append(f"hooked {', '.join(STATE['v41_targets'])} (AROUND; names DeepSeek-V4.1's compressor "
                       f"layer, kind v41) and {releases.V41_OWNER_INIT} (AFTER; gives it its layer id)")
        rounds = []
        if lay.linear_aiter == "hip":
            out.append("ROCm: SGLang's linear_bf16_fp32 may call aiter for bf16 weights, fp32-exact only with an "
                       "aiter whose fp32 kernels keep C in fp32; with the plugin on, such calls give the fp32 "
                       "product")
        elif lay.linear_aiter:
            rounds.append("inside linear_bf16_fp32" + (" (bf16 weights)" if lay.linear_aiter == "bf16" else ""))
        if lay.compressor_aiter == "_tgemm":
            rounds.append("in Compressor.compute_kv_score, which calls the module's _tgemm with bf16 output"
                          + (" (wrapped)" if _tgemm_wrapped() else ""))
        elif lay.compressor_aiter == "tgemm":
            rounds.append("in Compressor._compute_wkv_gate")
        if rounds:
            here = "active here" if releases.aiter_active(lay) else "not active here"
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


def _tgemm_wrapped() -> bool:
    hooks = sys.modules.get("sglang_fp32gemm.hooks")
    real = getattr(sys.modules.get(releases.COMPRESSOR_MODULE), "_tgemm", None)
    return hooks is not None and isinstance(real, hooks.CompressorTgemm)


# -- the launch flags --------------------------------------------------------
def _after_add_cli_args(result: Any, parser: Any, *args: Any, **kwargs: Any) -> None:
    if FLAG in getattr(parser, "_option_string_actions", {}):
        return None
    group = parser.add_argument_group("sglang-fp32gemm plugin")
    group.add_argument(FLAG, action="store_true", default=False,
                       help="Route DeepSeek-V4 compressor fp32-output GEMMs (the tuned shapes, M up to 128) "
                            "to the fastest exact fp32-output kernel of the sglang-fp32gemm plugin (Triton or "
                            "CuTe-DSL on NVIDIA, FlyDSL/aiter on gfx950). Same as "
                            f"{settings_mod.ENABLE_VAR}=1.")
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
    from sglang_fp32gemm import routing

    try:
        settings_mod.reload()  # the cached settings other modules read
    except ConfigError:
        pass  # the router below holds the same error
    r = routing.reset_router()
    if r.error is not None:
        raise SystemExit(f"sglang-fp32gemm: bad configuration, launch stopped: {r.error}") from None
    return None
