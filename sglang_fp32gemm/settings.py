"""Every switch of the plugin, read from the environment once per process.

The launch flags do not reach worker processes directly: ``plugin.py``
exports them to these variables in the launcher, and SGLang's workers
inherit the environment. ``get()`` parses on first use (the first routed
call, ``explain``, or the launcher's argument hook) and caches; ``reload()``
re-reads after the environment changed.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Optional

from sglang_fp32gemm.errors import ConfigError

ENABLE_VAR = "SGLANG_ENABLE_FLYDSL_FP32_GEMM"
CONFIG_VAR = "SGLANG_FLYDSL_FP32_GEMM_CONFIG"
LAYERS_VAR = "SGLANG_FLYDSL_FP32_GEMM_LAYERS"
DETERMINISTIC_VAR = "SGLANG_FLYDSL_FP32_GEMM_DETERMINISTIC"
# Set by the launcher's flag hook next to ENABLE_VAR, so workers can say
# where their setting came from.
SOURCE_VAR = "SGLANG_FLYDSL_FP32_GEMM_SOURCE"
# SGLang exports this for --enable-deterministic-inference.
SGLANG_DETERMINISTIC_VAR = "SGLANG_ENABLE_DETERMINISTIC_INFERENCE"

_TRUE = {"1", "true", "on", "yes"}
_FALSE = {"0", "false", "off", "no", ""}


def parse_bool(var: str, value: Optional[str], default: bool = False) -> bool:
    if value is None:
        return default
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False if v else default
    raise ConfigError(f"{var}={value!r}: expected 1/true/on or 0/false/off (any case)")


@dataclasses.dataclass(frozen=True)
class Settings:
    enabled: bool
    enabled_source: str          # "flag", "env" or "default"
    config_paths: tuple[str, ...]
    layers_path: Optional[str]
    deterministic: bool
    deterministic_source: str    # "env", "sglang" or "default"


def from_environ(env: Optional[dict] = None) -> Settings:
    env = os.environ if env is None else env
    raw = env.get(ENABLE_VAR)
    enabled = parse_bool(ENABLE_VAR, raw)
    if raw is None or not raw.strip():
        source = "default"
    else:
        source = "flag" if env.get(SOURCE_VAR) == "flag" else "env"
    paths = tuple(p for p in env.get(CONFIG_VAR, "").split(os.pathsep) if p.strip())
    layers = env.get(LAYERS_VAR, "").strip() or None
    own = env.get(DETERMINISTIC_VAR)
    if own is not None and own.strip():
        det, det_src = parse_bool(DETERMINISTIC_VAR, own), "env"
    elif parse_bool(SGLANG_DETERMINISTIC_VAR, env.get(SGLANG_DETERMINISTIC_VAR)):
        det, det_src = True, "sglang"
    else:
        det, det_src = False, "default"
    return Settings(enabled, source, paths, layers, det, det_src)


_lock = threading.Lock()
_cached: Optional[Settings] = None


def get() -> Settings:
    """The process's settings; raises ConfigError naming the variable."""
    global _cached
    s = _cached
    if s is None:
        with _lock:
            if _cached is None:
                _cached = from_environ()
            s = _cached
    return s


def reload() -> Settings:
    global _cached
    with _lock:
        _cached = None
    return get()
