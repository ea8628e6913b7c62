"""The process's configuration, loaded and validated once, then frozen.

A disabled plugin reads no file: its ``Config`` has no tables and no selection.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.errors import ConfigError, one_line
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
    #: The eager table (``*_eager.csv``): what fast-mode calls outside graph capture take where it has a row.
    eager_table: Optional[TunedTable] = None
    #: The serial table (``*_serial.csv``) laid over the fast table, a user's files over the packaged ones
    #: (``TunedTables.outside``): what fast-mode calls outside SGLang's multi-stream region take; None when no
    #: file has serial rows.
    serial_table: Optional[TunedTable] = None
    #: The pair table (``*_pair.csv``): where a ratio-4 layer's two compressor GEMMs are one launch outside
    #: the multi-stream region (``pairs.py``); None when no file has pair rows.
    pair_table: Optional[TunedTable] = None

    @property
    def enabled(self) -> bool:
        return self.settings.enabled


def load(env: Optional[Mapping[str, str]] = None,
         parsers: Optional[Mapping[str, Sequence[KernelParser]]] = None,
         pair_parsers: Optional[Mapping[str, Sequence[KernelParser]]] = None) -> Config:
    """Settings from ``env`` (default ``os.environ``); when enabled, tables and layer file too,
    every row's kernelName checked by ``parsers`` (``table.validate_kernel_names``), and each pair row's by
    ``pair_parsers`` too (the backends with a pair form); one-line errors."""
    try:
        s = settings_mod.from_environ(env)
        if not s.enabled:
            return Config(s, None, None, None)
        tables = TunedTables.load(s.config_paths)
        selection = layers_mod.load(s.layers_path)
        if parsers:
            validate_kernel_names(tables.rows(), parsers)
        if pair_parsers is not None:
            validate_kernel_names(tables.pair.every_row(), pair_parsers, "kernel with a pair form",
                                  every_libtype=True)
    except ConfigError as e:
        raise ConfigError(one_line(e)) from None
    serial = tables.outside if len(tables.serial) else None
    return Config(s, tables.fast, tables.deterministic, selection, tables.eager, serial,
                  tables.pair if len(tables.pair) else None)
