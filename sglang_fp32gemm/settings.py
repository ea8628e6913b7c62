"""Every switch of the plugin, read from the environment once per process (the variables: README).

While the plugin is disabled a malformed value of its other variables reads as its default and is kept in
``Settings.problems`` for ``explain`` (a disabled plugin never stops a launch); enabled, it is raised.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from typing import Any, Callable, Mapping, Optional

from sglang_fp32gemm.errors import ConfigError

ENABLE_VAR = "SGLANG_ENABLE_FLYDSL_FP32_GEMM"
CONFIG_VAR = "SGLANG_FLYDSL_FP32_GEMM_CONFIG"
LAYERS_VAR = "SGLANG_FLYDSL_FP32_GEMM_LAYERS"
DETERMINISTIC_VAR = "SGLANG_FLYDSL_FP32_GEMM_DETERMINISTIC"
PROBE_CACHE_VAR = "SGLANG_FLYDSL_FP32_GEMM_PROBE_CACHE"
PROBE_TIMEOUT_VAR = "SGLANG_FLYDSL_FP32_GEMM_PROBE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT_S = 120.0
# Set to "flag" by the launcher's flag hook next to ENABLE_VAR.
SOURCE_VAR = "SGLANG_FLYDSL_FP32_GEMM_SOURCE"
# SGLang exports this for --enable-deterministic-inference.
SGLANG_DETERMINISTIC_VAR = "SGLANG_ENABLE_DETERMINISTIC_INFERENCE"

_TRUE = frozenset({"1", "true", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "no", "n", "off"})
# SGLang 0.5.23, sglang/srt/environ.py, EnvBool.parse.
_SGLANG_TRUE = ("true", "1", "yes", "y")
_SGLANG_FALSE = ("false", "0", "no", "n")


def parse_bool(var: str, value: Optional[str], default: bool = False) -> bool:
    """1/true/yes/y/on or 0/false/no/n/off, any case, whitespace ignored; blank is ``default``."""
    if value is None:
        return default
    v = value.strip().lower()
    if not v:
        return default
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ConfigError(f"{var}={value!r}: expected 1/true/yes/y/on or 0/false/no/n/off (any case)")


def sglang_env_bool(value: Optional[str], default: bool = False) -> bool:
    """A boolean SGLang variable read as SGLang reads it (lower-cased, not stripped, else default)."""
    if value is None:
        return default
    v = value.lower()
    if v in _SGLANG_TRUE:
        return True
    if v in _SGLANG_FALSE:
        return False
    return default


def parse_seconds(var: str, value: str) -> float:
    """A positive, finite number of seconds; ``ConfigError`` naming ``var`` otherwise."""
    try:
        v = float(value.strip())
    except ValueError:
        v = float("nan")
    if not (v > 0 and math.isfinite(v)):
        raise ConfigError(f"{var}={value!r}: expected a positive number of seconds")
    return v


@dataclasses.dataclass(frozen=True)
class Settings:
    enabled: bool
    enabled_source: str          # "flag", "env" or "default"
    config_paths: tuple[str, ...]
    layers_path: Optional[str]
    deterministic: bool
    deterministic_source: str    # "env", "sglang" or "default"
    #: Malformed values read as their default because the plugin is disabled.
    problems: tuple[str, ...] = ()
    #: Seconds a child-process probe may run (``PROBE_TIMEOUT_VAR``).
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S


def from_environ(env: Optional[Mapping[str, str]] = None) -> Settings:
    """Parse the variables; ``ConfigError`` names the variable."""
    env = os.environ if env is None else env
    raw = env.get(ENABLE_VAR)
    enabled = parse_bool(ENABLE_VAR, raw)  # a bad switch is always an error
    if raw is None or not raw.strip():
        source = "default"
    else:
        source = "flag" if env.get(SOURCE_VAR) == "flag" else "env"
    problems: list[str] = []

    def lenient(parse: Callable[[str, str], Any], var: str, default: Any) -> Any:
        """``parse(var, value)``; blank is ``default``, and so is a bad value while disabled."""
        value = env.get(var)
        if value is None or not value.strip():
            return default
        try:
            return parse(var, value)
        except ConfigError as e:
            if enabled:
                raise
            problems.append(str(e))
            return default

    paths = tuple(p.strip() for p in (env.get(CONFIG_VAR) or "").split(os.pathsep) if p.strip())
    layers = (env.get(LAYERS_VAR) or "").strip() or None
    det = lenient(parse_bool, DETERMINISTIC_VAR, None)
    if det is not None:
        det_src = "env"
    elif sglang_env_bool(env.get(SGLANG_DETERMINISTIC_VAR)):
        det, det_src = True, "sglang"
    else:
        det, det_src = False, "default"
    timeout = lenient(parse_seconds, PROBE_TIMEOUT_VAR, DEFAULT_PROBE_TIMEOUT_S)
    return Settings(enabled, source, paths, layers, det, det_src, tuple(problems), timeout)


def probe_cache_dir(env: Optional[Mapping[str, str]] = None) -> str:
    """The probe verdict cache directory: the variable, else $XDG_CACHE_HOME or ~/.cache + sglang_fp32gemm/probes."""
    env = os.environ if env is None else env
    given = (env.get(PROBE_CACHE_VAR) or "").strip()
    if given:
        return os.path.expanduser(given)
    base = (env.get("XDG_CACHE_HOME") or "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sglang_fp32gemm", "probes")


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
