"""The frozen configuration: settings, tuned tables and layer selection, validated once.

(Interim version; the validation work replaces it.)
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.table import TunedTable


@dataclasses.dataclass(frozen=True)
class Config:
    settings: settings_mod.Settings
    table: TunedTable
    det_table: TunedTable
    selection: layers_mod.LayerSelection


def load(env: Optional[Mapping[str, str]] = None,
         parsers: Optional[dict[str, list[Callable[[str], object]]]] = None) -> Config:
    s = settings_mod.from_environ(env) if env is not None else settings_mod.get()
    if not s.enabled:
        return Config(s, TunedTable([]), TunedTable([]), layers_mod.LayerSelection())
    return Config(s, TunedTable.load(s.config_paths), TunedTable([]), layers_mod.load(s.layers_path))
