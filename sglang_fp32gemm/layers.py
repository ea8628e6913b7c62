"""The per-layer opt-in file: which compressor layers may use a fast kernel.

A small ``key = value`` file, one setting a line, ``#`` comments::

    # only the HCA layers 0-29, and layer 40, but never layer 7
    layers = 0-29, 40
    kinds = hca
    exclude_layers = 7

``layers`` and ``exclude_layers`` take ids and inclusive ranges; ``kinds``
takes hca, csa, indexer and fused. A call opts in when its layer id is in
``layers`` (or ``layers`` is absent), its kind is in ``kinds`` (or ``kinds``
is absent), and its id is not excluded. Without a file every compressor
layer opts in. Calls with no layer context (plain ``linear_bf16_fp32``
callers) follow the tuned table alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from sglang_fp32gemm.errors import ConfigError, read_config_text

KINDS = ("hca", "csa", "indexer", "fused")
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
class LayerSelection:
    layers: Optional[frozenset[int]] = None
    kinds: Optional[frozenset[str]] = None
    exclude: frozenset[int] = frozenset()
    source: str = "(no file: every compressor layer)"

    def selects(self, info: Optional[LayerInfo]) -> bool:
        if info is None:
            return True
        if info.layer_id in self.exclude:
            return False
        if self.layers is not None and info.layer_id not in self.layers:
            return False
        return self.kinds is None or info.kind in self.kinds

    def describe(self) -> str:
        parts = []
        if self.layers is not None:
            parts.append(f"layers={_ranges(self.layers)}")
        if self.kinds is not None:
            parts.append(f"kinds={','.join(k for k in KINDS if k in self.kinds)}")
        if self.exclude:
            parts.append(f"exclude_layers={_ranges(self.exclude)}")
        return f"{self.source}: " + (" ".join(parts) if parts else "every compressor layer")


def _ranges(ids: frozenset[int]) -> str:
    out, s = [], sorted(ids)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out) or "(none)"


def _parse_ids(value: str, where: str) -> frozenset[int]:
    ids: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                a, b = (int(t) for t in part.split("-", 1))
                if a < 0 or b < a:
                    raise ConfigError(f"{where}: bad range {part!r} (need 0 <= start <= end)")
                ids.update(range(a, b + 1))
            else:
                v = int(part)
                if v < 0:
                    raise ValueError
                ids.add(v)
        except ConfigError:
            raise  # already says what is wrong (ConfigError is a ValueError)
        except ValueError:
            raise ConfigError(f"{where}: {part!r} is not a layer id or range like 3-7") from None
    if not ids:
        raise ConfigError(f"{where}: empty list")
    return frozenset(ids)


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
            kinds = {k.strip().lower() for k in value.split(",") if k.strip()}
            bad = sorted(kinds - set(KINDS))
            if bad or not kinds:
                raise ConfigError(f"{where}: unknown kind(s) {', '.join(bad) or '(none)'} (known: {', '.join(KINDS)})")
            values[key] = frozenset(kinds)
        else:
            values[key] = _parse_ids(value, where)
    return LayerSelection(
        layers=values.get("layers"),  # type: ignore[arg-type]
        kinds=values.get("kinds"),  # type: ignore[arg-type]
        exclude=values.get("exclude_layers", frozenset()),  # type: ignore[arg-type]
        source=name,
    )


def load(path: Optional[str]) -> LayerSelection:
    if not path:
        return LayerSelection()
    return parse(read_config_text(path, "layer file"), str(Path(path)))
