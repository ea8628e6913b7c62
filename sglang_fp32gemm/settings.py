"""Every switch of the plugin, read from the environment once per process.

The launch flags do not reach worker processes directly: ``plugin.py``
exports them to these variables in the launcher, and SGLang's workers
inherit the environment. ``get()`` parses on first use and caches;
``reload()`` re-reads after the environment changed.

What each variable accepts
--------------------------
*bool* below means: surrounding whitespace is ignored, case is ignored, and
``1``, ``true``, ``yes``, ``y``, ``on`` mean on; ``0``, ``false``, ``no``,
``n``, ``off`` mean off (SGLang's own spellings plus ``on``/``off``).

``SGLANG_ENABLE_FLYDSL_FP32_GEMM`` (bool)
    The switch. Unset, empty or only whitespace: off. Any other value that is
    not a bool is a ``ConfigError`` naming the variable, whether or not the
    plugin would be enabled.
``SGLANG_FLYDSL_FP32_GEMM_CONFIG`` (paths)
    Extra tuned tables, separated by ``os.pathsep`` (``:`` on Linux).
    Whitespace around each path is removed; empty entries are skipped. The
    files are read only when the plugin is enabled.
``SGLANG_FLYDSL_FP32_GEMM_LAYERS`` (path)
    The per-layer opt-in file (see ``layers.py``). Whitespace around it is
    removed; empty or unset means no file. Read only when enabled.
``SGLANG_FLYDSL_FP32_GEMM_DETERMINISTIC`` (bool)
    Overrides SGLang's deterministic mode for this plugin's GEMM. Unset, empty
    or only whitespace: follow ``SGLANG_ENABLE_DETERMINISTIC_INFERENCE``.
``SGLANG_FLYDSL_FP32_GEMM_PROBE_CACHE`` (directory)
    Where passed child-process probe verdicts are kept
    (``backends/verdict_cache.py``). Unset or empty:
    ``$XDG_CACHE_HOME/sglang_fp32gemm/probes``, else
    ``~/.cache/sglang_fp32gemm/probes``. Never an error: a directory that
    is unusable (not a directory, cannot be created or written, owned by
    another user or writable by group/others) means verdicts are not kept,
    with one warning per process at the first child probe; ``explain``
    prints the directory and whether verdicts can be kept there.
``SGLANG_FLYDSL_FP32_GEMM_PROBE_TIMEOUT`` (seconds)
    How long a child-process probe may run before it is killed and its
    kernel disabled. A positive finite number (surrounding whitespace
    ignored); unset or empty: 120. Anything else is a ``ConfigError`` naming
    the variable.
``SGLANG_FLYDSL_FP32_GEMM_SOURCE``
    Internal: the launch-flag hook sets it to ``flag`` next to the switch so
    workers can say where their setting came from. Any other value reads as
    ``env``.
``SGLANG_ENABLE_DETERMINISTIC_INFERENCE`` (SGLang's variable)
    Read exactly as SGLang 0.5.23 reads it (``EnvBool`` in
    ``sglang/srt/environ.py``): the value is lower-cased, *not* stripped;
    ``true``, ``1``, ``yes``, ``y`` are on, ``false``, ``0``, ``no``, ``n``
    off, and anything else (including an empty value or one with spaces)
    is SGLang's default, off (SGLang itself warns). Never an error here.

When the plugin is not enabled, a malformed value of one of its other
variables is not an error (a disabled plugin must never stop a launch): it is
read as its default and kept in ``Settings.problems`` so ``explain`` can show
it. When enabled, the first such problem is raised as a ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from typing import Mapping, Optional

from sglang_fp32gemm.errors import ConfigError

ENABLE_VAR = "SGLANG_ENABLE_FLYDSL_FP32_GEMM"
CONFIG_VAR = "SGLANG_FLYDSL_FP32_GEMM_CONFIG"
LAYERS_VAR = "SGLANG_FLYDSL_FP32_GEMM_LAYERS"
DETERMINISTIC_VAR = "SGLANG_FLYDSL_FP32_GEMM_DETERMINISTIC"
PROBE_CACHE_VAR = "SGLANG_FLYDSL_FP32_GEMM_PROBE_CACHE"
PROBE_TIMEOUT_VAR = "SGLANG_FLYDSL_FP32_GEMM_PROBE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT_S = 120.0
# Set by the launcher's flag hook next to ENABLE_VAR, so workers can say
# where their setting came from.
SOURCE_VAR = "SGLANG_FLYDSL_FP32_GEMM_SOURCE"
# SGLang exports this for --enable-deterministic-inference.
SGLANG_DETERMINISTIC_VAR = "SGLANG_ENABLE_DETERMINISTIC_INFERENCE"

_TRUE = frozenset({"1", "true", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "no", "n", "off"})
# SGLang 0.5.23, sglang/srt/environ.py, EnvBool.parse.
_SGLANG_TRUE = ("true", "1", "yes", "y")
_SGLANG_FALSE = ("false", "0", "no", "n")


def parse_bool(var: str, value: Optional[str], default: bool = False) -> bool:
    """The plugin's own bool grammar (see the module docstring)."""
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
    """A boolean SGLang variable, read as SGLang 0.5.23 reads it; never raises.

    SGLang lower-cases the value (no strip) and uses its default for
    anything it does not recognise.
    """
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


def split_paths(value: Optional[str]) -> tuple[str, ...]:
    """``os.pathsep``-separated paths, each stripped, empty entries skipped."""
    return tuple(p.strip() for p in (value or "").split(os.pathsep) if p.strip())


@dataclasses.dataclass(frozen=True)
class Settings:
    enabled: bool
    enabled_source: str          # "flag", "env" or "default"
    config_paths: tuple[str, ...]
    layers_path: Optional[str]
    deterministic: bool
    deterministic_source: str    # "env", "sglang" or "default"
    #: Malformed values of the plugin's variables that were read as their
    #: default because the plugin is disabled (empty when enabled: then the
    #: first problem is raised instead).
    problems: tuple[str, ...] = ()
    #: Seconds a child-process probe may run (``PROBE_TIMEOUT_VAR``).
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S


def from_environ(env: Optional[Mapping[str, str]] = None) -> Settings:
    """Parse the variables; ``ConfigError`` names the variable (see the module docstring)."""
    env = os.environ if env is None else env
    raw = env.get(ENABLE_VAR)
    enabled = parse_bool(ENABLE_VAR, raw)  # a bad switch is always an error
    if raw is None or not raw.strip():
        source = "default"
    else:
        source = "flag" if env.get(SOURCE_VAR) == "flag" else "env"
    problems: list[str] = []
    paths = split_paths(env.get(CONFIG_VAR))
    layers = (env.get(LAYERS_VAR) or "").strip() or None
    own = env.get(DETERMINISTIC_VAR)
    det: Optional[bool] = None
    if own is not None and own.strip():
        try:
            det, det_src = parse_bool(DETERMINISTIC_VAR, own), "env"
        except ConfigError as e:
            if enabled:
                raise
            problems.append(str(e))
    if det is None:
        if sglang_env_bool(env.get(SGLANG_DETERMINISTIC_VAR)):
            det, det_src = True, "sglang"
        else:
            det, det_src = False, "default"
    timeout = DEFAULT_PROBE_TIMEOUT_S
    raw_timeout = env.get(PROBE_TIMEOUT_VAR)
    if raw_timeout is not None and raw_timeout.strip():
        try:
            timeout = parse_seconds(PROBE_TIMEOUT_VAR, raw_timeout)
        except ConfigError as e:
            if enabled:
                raise
            problems.append(str(e))
    return Settings(enabled, source, paths, layers, det, det_src, tuple(problems), timeout)


def probe_cache_dir(env: Optional[Mapping[str, str]] = None) -> str:
    """The probe verdict cache directory (see the module docstring)."""
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
