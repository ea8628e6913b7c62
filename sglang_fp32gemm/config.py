"""The process's configuration, loaded and validated once, then frozen.

``load()`` reads the settings (``settings.py``), and only when the plugin is
enabled the tuned tables (fast and deterministic, ``table.py``), the layer
file (``layers.py``) and, given the backends' parsers, checks every row's
kernelName. Anything wrong is one ``ConfigError`` whose message is a single
line naming the file:line or the variable. A disabled plugin reads no file
at all: its ``Config`` has no tables and no selection, and nothing but a
malformed ``SGLANG_ENABLE_FLYDSL_FP32_GEMM`` itself can raise.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.table import KernelParser, TunedTable, TunedTables, validate_kernel_names


@dataclasses.dataclass(frozen=True)
class Config:
    settings: settings_mod.Settings
    #: The fast table; None when disabled.
    table: Optional[TunedTable]
    #: The deterministic table (``*_deterministic.csv``); None when disabled.
    det_table: Optional[TunedTable]
    #: The layer file's selection (every layer without a file); None when disabled.
    selection: Optional[layers_mod.LayerSelection]

    @property
    def enabled(self) -> bool:
        return self.settings.enabled


def load(env: Optional[Mapping[str, str]] = None,
         parsers: Optional[Mapping[str, Sequence[KernelParser]]] = None) -> Config:
    """Settings from ``env`` (default ``os.environ``); when enabled, tables and layer file too.

    ``parsers``: libtype -> the ``parse`` functions of its backends; each
    row of both tables with such a libtype must name a kernel one of them
    accepts (``table.validate_kernel_names``).
    """
    try:
        s = settings_mod.from_environ(env)
        if not s.enabled:
            return Config(s, None, None, None)
        tables = TunedTables.load(s.config_paths)
        selection = layers_mod.load(s.layers_path)
        if parsers:
            validate_kernel_names(tables.rows(), parsers)
    except ConfigError as e:
        raise ConfigError(one_line(e)) from None
    return Config(s, tables.fast, tables.deterministic, selection)


def one_line(e: ConfigError) -> str:
    """The message, guaranteed to be one line (for a launcher that prints it)."""
    return " ".join(part.strip() for part in str(e).splitlines() if part.strip())
