"""The per-layer opt-in file: which compressor layers may use a fast kernel (without a file: every layer
and calls with no layer). Format: README; grammar and errors: docs/design.md.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from pathlib import Path
from typing import Iterable, Optional

from sglang_fp32gemm.errors import ConfigError, read_config_text

KINDS = ("hca", "csa", "indexer", "fused", "v41")
NO_FILE = "(no file: every compressor layer)"
KEYS = ("layers", "kinds", "exclude_layers")


@dataclasses.dataclass(frozen=True)
class LayerInfo:
    """Who is calling: a DeepSeek-V4 compressor layer."""

    layer_id: int
    kind: str  # one of KINDS

    @staticmethod
    def of_compressor(layer_id: int, ratio: int, is_in_indexer: bool, fused: bool) -> "LayerInfo":
        if fused:
            kind = "fused"
        elif is_in_indexer:
            kind = "indexer"
        else:
            kind = "csa" if ratio == 4 else "hca"
        return LayerInfo(int(layer_id), kind)


@dataclasses.dataclass(frozen=True)
class IdRanges:
    """Layer ids as sorted, disjoint, non-adjacent inclusive ranges; membership is a binary search."""

    intervals: tuple[tuple[int, int], ...] = ()
    _starts: tuple[int, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        merged: list[list[int]] = []  # sorted, overlapping and adjacent ranges joined
        for a, b in sorted((int(a), int(b)) for a, b in self.intervals):
            if not 0 <= a <= b:
                raise ValueError(f"bad layer range {a}-{b}")
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        object.__setattr__(self, "intervals", tuple((a, b) for a, b in merged))
        object.__setattr__(self, "_starts", tuple(a for a, _ in merged))

    @staticmethod
    def of_ids(ids: Iterable[int]) -> "IdRanges":
        return IdRanges(tuple((int(i), int(i)) for i in ids))

    def __contains__(self, layer_id: object) -> bool:
        i = bisect.bisect_right(self._starts, layer_id) - 1  # type: ignore[arg-type]
        return i >= 0 and layer_id <= self.intervals[i][1]  # type: ignore[operator]

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def __len__(self) -> int:
        """How many ranges (not ids: a range may hold millions)."""
        return len(self.intervals)

    def __str__(self) -> str:
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.intervals) or "(none)"


@dataclasses.dataclass(frozen=True)
class LayerSelection:
    layers: Optional[IdRanges] = None
    kinds: Optional[frozenset[str]] = None
    exclude: IdRanges = IdRanges()
    source: str = NO_FILE

    def __post_init__(self) -> None:
        # Plain id collections (frozenset({5})) are accepted and kept as ranges.
        if self.layers is not None and not isinstance(self.layers, IdRanges):
            object.__setattr__(self, "layers", IdRanges.of_ids(self.layers))
        if not isinstance(self.exclude, IdRanges):
            object.__setattr__(self, "exclude", IdRanges.of_ids(self.exclude))
        if self.kinds is not None and not isinstance(self.kinds, frozenset):
            object.__setattr__(self, "kinds", frozenset(self.kinds))

    def selects(self, info: Optional[LayerInfo]) -> bool:
        if info is None:
            return self.source == NO_FILE  # a layer file opts in only the layers it names
        if info.layer_id in self.exclude:
            return False
        if self.layers is not None and info.layer_id not in self.layers:
            return False
        return self.kinds is None or info.kind in self.kinds

    def describe(self) -> str:
        parts = []
        if self.layers is not None:
            parts.append(f"layers={self.layers}")
        if self.kinds is not None:
            parts.append(f"kinds={','.join(k for k in KINDS if k in self.kinds)}")
        if self.exclude:
            parts.append(f"exclude_layers={self.exclude}")
        return f"{self.source}: " + (" ".join(parts) if parts else "every compressor layer")


# One item of an id list: "7" or "3-7" (ASCII digits; spaces around the dash allowed).
MAX_ID_DIGITS = 18  # Python refuses to parse very long ints; no model has 10**18 layers
_ITEM = re.compile(r"([0-9]+)(?:\s*-\s*([0-9]+))?")


def _items(value: str, where: str) -> list[str]:
    if not value.strip():
        raise ConfigError(f"{where}: empty list")
    items = [t.strip() for t in value.split(",")]
    if not all(items):
        raise ConfigError(f"{where}: empty item in {value.strip()!r} (a stray comma?)")
    return items


def _parse_ids(value: str, where: str) -> IdRanges:
    pairs = []
    for part in _items(value, where):
        m = _ITEM.fullmatch(part)
        if m is None:
            raise ConfigError(f"{where}: {part!r} is not a layer id or range like 3-7 "
                              f"(ids are whole numbers >= 0)")
        if max(len(g) for g in m.groups() if g) > MAX_ID_DIGITS:
            raise ConfigError(f"{where}: {part!r}: layer id too large (at most {MAX_ID_DIGITS} digits)")
        a = int(m.group(1))
        b = a if m.group(2) is None else int(m.group(2))
        if b < a:
            raise ConfigError(f"{where}: bad range {part!r} (need start <= end)")
        pairs.append((a, b))
    return IdRanges(tuple(pairs))


def parse(text: str, name: str) -> LayerSelection:
    values: dict[str, object] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{name}:{lineno}"
        if "=" not in line:
            raise ConfigError(f"{where}: expected 'key = value', got {raw.strip()!r}")
        key, value = (t.strip() for t in line.split("=", 1))
        key = key.lower()
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(KEYS)})")
        if key in values:
            raise ConfigError(f"{where}: {key!r} given twice")
        if key == "kinds":
            kinds = {k.lower() for k in _items(value, where)}
            bad = sorted(kinds - set(KINDS))
            if bad:
                raise ConfigError(f"{where}: unknown kind(s) {', '.join(bad)} (known: {', '.join(KINDS)})")
            values[key] = frozenset(kinds)
        else:
            values[key] = _parse_ids(value, where)
    return LayerSelection(
        layers=values.get("layers"),  # type: ignore[arg-type]
        kinds=values.get("kinds"),  # type: ignore[arg-type]
        exclude=values.get("exclude_layers", IdRanges()),  # type: ignore[arg-type]
        source=name,
    )


def load(path: Optional[str]) -> LayerSelection:
    if not path:
        return LayerSelection()
    return parse(read_config_text(path, "layer file"), str(Path(path)))
