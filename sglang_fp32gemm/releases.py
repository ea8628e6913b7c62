"""SGLang's release layouts as data, and detection of the installed one.

The releases with DeepSeek-V4 (0.5.12 to 0.5.23) differ in where ``linear_bf16_fp32`` lives, which
``Compressor`` method calls it with the layer at hand, and where SGLang's ROCm/aiter path rounds to bf16.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
from typing import Any, Optional

import torch

logger = logging.getLogger(__name__)

COMPRESSOR_MODULE = "sglang.srt.layers.attention.dsv4.compressor"
COMPRESSOR = f"{COMPRESSOR_MODULE}.Compressor"
# DeepSeek-V4.1's ratio-2 compressor (releases that have dsv41_sparse): project() calls
# linear_bf16_fp32 on wkv and wgate (N = head_dim each), project_fused() on the fused wkv_gate.
V41_COMPRESSOR = "sglang.srt.layers.attention.dsv4.dsv41_sparse.DeepseekV41Compressor"
V41_METHODS = ("project", "project_fused")
# The attention layer that builds it knows the layer id; the compressor does not.
V41_OWNER_INIT = "sglang.srt.models.deepseek_v4.MQALayer.__init__"
# The attention layer's multi-stream prepares (every release 0.5.12-0.5.23 has the first): the compressor
# and indexer GEMMs they issue run on side streams, beside the main stream's GEMMs.
MQA_LAYER = "sglang.srt.models.deepseek_v4.MQALayer"
MULTI_STREAM_METHODS = ("_forward_prepare_multi_stream", "_forward_prepare_low_ratio_multi_stream",
                        "_forward_prepare_multi_stream_hip")


@dataclasses.dataclass(frozen=True)
class ReleaseLayout:
    """One family of SGLang releases: where the GEMM is, and what rounds to bf16 on ROCm with aiter.

    ``linear_aiter``: ``linear_bf16_fp32`` rounds for "all" weights or "bf16" ones only; "hip": it may call
    aiter for bf16 weights on any ROCm build (an aiter branch not gated by ``_use_aiter``, in no release up to
    0.5.23), whose exactness depends on the aiter installed; None: never.
    ``compressor_aiter``: "_tgemm" (the module global, called by ``compute_kv_score`` with bf16 output),
    "tgemm" (``_compute_wkv_gate`` returns ``tgemm.mm(...).float()`` for bf16 weights); None: none.
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


def import_module(module: str) -> tuple[Any, Optional[str]]:
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


def lookup(dotted: str) -> tuple[bool, Optional[str]]:
    """Whether ``module.Class.attr`` / ``module.attr`` exists, and the import error if one hid it."""
    parts = dotted.split(".")
    obj, rest = None, parts[-1:]
    for i in range(1, len(parts)):
        mod, err = import_module(".".join(parts[:i]))
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


def sglang_version() -> str:
    try:
        import sglang

        return str(getattr(sglang, "__version__", "?"))
    except Exception as e:  # noqa: BLE001
        return f"? ({type(e).__name__}: {e})"


def detect_layout() -> tuple[Optional[ReleaseLayout], list[str]]:
    """The installed SGLang's release layout, matched on its code, not its version string (a layout
    outside the table is hooked by the same rules as "unrecognized"), and the reasons for anything not found."""
    errors: list[str] = []
    linear_mod = None
    linear_name = None
    failed: list[str] = []
    for name in LINEAR_MODULES:
        mod, err = import_module(name)
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
    comp_mod, err = import_module(COMPRESSOR_MODULE)
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
    linear_vars = vars(linear_mod) if linear_mod is not None else {}
    linear_has_aiter = "_use_aiter" in linear_vars
    # An aiter branch reached on ROCm without _use_aiter (a global named for aiter; none in 0.5.12-0.5.23):
    # SGLang's own result then depends on the aiter build, so the layout is not one we have read.
    linear_hip_aiter = not linear_has_aiter and any("aiter" in name.lower() for name in linear_vars)
    version = sglang_version()
    for known in RELEASE_LAYOUTS:
        if (known.linear_module == linear_name and known.layer_method == layer_method
                and known.compressor_aiter == compressor_aiter
                and (known.linear_aiter is not None) == linear_has_aiter and not linear_hip_aiter):
            return dataclasses.replace(known, layer_methods=methods, sglang_version=version), errors
    # Not a layout we have read, or part of it missing (reported above):
    # hook what is there; assume the worst of an aiter branch.
    name = "unrecognized" if linear_mod is not None and comp_cls is not None else "incomplete (see errors)"
    linear_aiter = "all" if linear_has_aiter else ("hip" if linear_hip_aiter else None)
    lay = ReleaseLayout(name, linear_name or "", layer_method, linear_aiter, compressor_aiter, methods, version)
    if not errors:
        logger.warning("sglang-fp32gemm: SGLang %s has a layout not in the plugin's table (%s, %s); hooking "
                       "what was found", version, lay.linear_target, ", ".join(lay.layer_targets))
    return lay, errors


# -- where SGLang's own code rounds to bf16 (ROCm with SGLANG_USE_AITER=1) --------
def linear_rounds(lay: Optional[ReleaseLayout], w: torch.Tensor) -> bool:
    """Would SGLang's own ``linear_bf16_fp32`` round this call to bf16 (its aiter branch)?"""
    if lay is None or lay.linear_aiter is None:
        return False
    if lay.linear_aiter == "hip":
        return bool(torch.version.hip) and w.dtype == torch.bfloat16
    if not getattr(sys.modules.get(lay.linear_module), "_use_aiter", False):
        return False
    return lay.linear_aiter == "all" or w.dtype == torch.bfloat16


def compressor_rounds(lay: Optional[ReleaseLayout], w: torch.Tensor) -> bool:
    """Would SGLang's own path for a compressor GEMM with this weight give a bf16-rounded result?"""
    if lay is not None and lay.compressor_aiter == "tgemm" and w.dtype == torch.bfloat16 \
            and getattr(sys.modules.get(COMPRESSOR_MODULE), "_use_aiter", False):
        return True
    return linear_rounds(lay, w)


def aiter_active(lay: Optional[ReleaseLayout]) -> bool:
    """Whether the installed SGLang took its aiter branches in this process (ROCm, SGLANG_USE_AITER=1)."""
    if lay is None:
        return False
    lin, comp = sys.modules.get(lay.linear_module), sys.modules.get(COMPRESSOR_MODULE)
    return bool((lay.linear_aiter == "hip" and torch.version.hip)
                or getattr(lin, "_use_aiter", False) or getattr(comp, "_use_aiter", False)
                or getattr(comp, "_tgemm", None) is not None)
