"""Tuned tables: aiter's CSV schema, validated once, looked up like aiter.

Which files, in which order, into which of the two tables, and the file format: docs/design.md ("Tuned tables").
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from sglang_fp32gemm.backends.base import MAX_M
from sglang_fp32gemm.errors import ConfigError, one_line, read_config_text

logger = logging.getLogger(__name__)

HEADER = (
    "gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB",
    "bpreshuffle", "libtype", "solidx", "splitK", "us", "kernelName",
    "err_ratio", "tflops", "bw",
)
# aiter's lookup key: the first ten columns.
KEY_COLUMNS = HEADER[:10]
# libtypes aiter writes; flydsl, triton and cutedsl are served by a fast backend here,
# the rest name a library this plugin leaves to torch.
KNOWN_LIBTYPES = frozenset({"hipblaslt", "rocblas", "asm", "skinny", "torch", "flydsl", "triton", "cutedsl"})
DTYPES = frozenset({"torch.bfloat16", "torch.float16", "torch.float32"})
M_BUCKET_LIMIT = 256  # aiter rounds M up to a multiple of 16 only up to here


@dataclasses.dataclass(frozen=True)
class TunedRow:
    gfx: str
    cu_num: int
    M: int
    N: int
    K: int
    bias: bool
    dtype: str
    outdtype: str
    scaleAB: bool
    bpreshuffle: bool
    libtype: str
    solidx: int
    splitK: int
    us: float
    kernelName: str
    err_ratio: float
    tflops: float
    bw: float
    source: str = ""  # "file:line", for messages

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, c) for c in KEY_COLUMNS)

    @property
    def arch(self) -> str:
        """``gfx`` less its GPU model (``sm90-h200`` -> ``sm90``)."""
        return self.gfx.partition("-")[0]

    @property
    def model(self) -> str:
        """The GPU model a row is for (``sm90-h200`` -> ``h200``); "" for every GPU of its arch."""
        return self.gfx.partition("-")[2]

    def to_csv_fields(self) -> list[str]:
        return [str(getattr(self, c)) for c in HEADER]


def format_rows(rows: Iterable[TunedRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    for r in rows:
        w.writerow(r.to_csv_fields())
    return buf.getvalue()


def _parse_bool(text: str, where: str, col: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1"):
        return True
    if t in ("false", "0"):
        return False
    raise ConfigError(f"{where}: column {col!r} must be True or False, got {text!r}")


def _parse_int(text: str, where: str, col: str, minimum: int = 0) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise ConfigError(f"{where}: column {col!r} must be an integer, got {text!r}") from None
    if v < minimum:
        raise ConfigError(f"{where}: column {col!r} must be >= {minimum}, got {v}")
    return v


def _parse_m(text: str, where: str) -> int:
    m = _parse_int(text, where, "M", 1)
    if m > MAX_M:
        raise ConfigError(f"{where}: column 'M' is {m}; calls above M={MAX_M} are never looked up, "
                          "so the row would never be used")
    return m


def _parse_float(text: str, where: str, col: str) -> float:
    try:
        v = float(text.strip())
    except ValueError:
        raise ConfigError(f"{where}: column {col!r} must be a number, got {text!r}") from None
    if math.isnan(v):
        raise ConfigError(f"{where}: column {col!r} must be a number, got {text!r}")
    return v


def parse_csv(text: str, name: str) -> list[TunedRow]:
    """Parse and validate one table; errors name ``name:line``."""
    if text.startswith("\ufeff"):  # a byte-order mark (Excel's "CSV UTF-8")
        text = text[1:]
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except csv.Error as e:
        raise ConfigError(f"{name}:1: not CSV ({e})") from None
    except StopIteration:
        raise ConfigError(f"{name}:1: empty file, expected the header {','.join(HEADER)}") from None
    header = [h.strip() for h in header]
    missing = [c for c in HEADER if c not in header]
    if missing:
        raise ConfigError(f"{name}:1: header lacks column(s) {', '.join(missing)}")
    twice = sorted({c for c in HEADER if header.count(c) > 1})
    if twice:
        raise ConfigError(f"{name}:1: header names column(s) {', '.join(twice)} more than once")
    idx = {c: header.index(c) for c in HEADER}
    rows: list[TunedRow] = []
    seen: dict[tuple, int] = {}
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise ConfigError(f"{name}:{reader.line_num}: not CSV ({e})") from None
        lineno = reader.line_num  # physical line (a quoted field may span lines)
        if not fields or all(not f.strip() for f in fields) or fields[0].lstrip().startswith("#"):
            continue
        where = f"{name}:{lineno}"
        if len(fields) != len(header):
            raise ConfigError(f"{where}: {len(fields)} fields, the header has {len(header)}")
        f = {c: fields[i].strip() for c, i in idx.items()}
        if not f["gfx"]:
            raise ConfigError(f"{where}: column 'gfx' is empty")
        if not _GFX_COLUMN_RE.fullmatch(f["gfx"]):
            # A row no device key can equal (sm_90, SM90, H200) would never be used.
            raise ConfigError(f"{where}: column 'gfx' is {f['gfx']!r}, which no device has: expected gfx<hex> "
                              "(ROCm, e.g. gfx950) or sm<digits> (CUDA, e.g. sm90), optionally -MODEL for one "
                              "GPU model's rows (e.g. sm90-h200)")
        for c in ("dtype", "outdtype"):
            if f[c] not in DTYPES:
                raise ConfigError(f"{where}: column {c!r} must be one of {sorted(DTYPES)}, got {f[c]!r}")
        if f["libtype"] not in KNOWN_LIBTYPES:
            raise ConfigError(f"{where}: unknown libtype {f['libtype']!r} (known: {', '.join(sorted(KNOWN_LIBTYPES))})")
        row = TunedRow(
            gfx=f["gfx"],
            cu_num=_parse_int(f["cu_num"], where, "cu_num", 1),
            M=_parse_m(f["M"], where),
            N=_parse_int(f["N"], where, "N", 1),
            K=_parse_int(f["K"], where, "K", 1),
            bias=_parse_bool(f["bias"], where, "bias"),
            dtype=f["dtype"],
            outdtype=f["outdtype"],
            scaleAB=_parse_bool(f["scaleAB"], where, "scaleAB"),
            bpreshuffle=_parse_bool(f["bpreshuffle"], where, "bpreshuffle"),
            libtype=f["libtype"],
            solidx=_parse_int(f["solidx"], where, "solidx", -1) if f["solidx"] else 0,
            splitK=_parse_int(f["splitK"], where, "splitK", 0) if f["splitK"] else 0,
            us=_parse_float(f["us"], where, "us") if f["us"] else 0.0,
            kernelName=f["kernelName"],
            err_ratio=_parse_float(f["err_ratio"], where, "err_ratio") if f["err_ratio"] else 0.0,
            tflops=_parse_float(f["tflops"], where, "tflops") if f["tflops"] else 0.0,
            bw=_parse_float(f["bw"], where, "bw") if f["bw"] else 0.0,
            source=where,
        )
        if row.libtype in ("flydsl", "triton", "cutedsl") and not row.kernelName:
            raise ConfigError(f"{where}: libtype {row.libtype!r} needs a kernelName")
        if row.key in seen:
            raise ConfigError(f"{where}: duplicate key {row.key} (first at line {seen[row.key]})")
        seen[row.key] = lineno
        rows.append(row)
    return rows


def read_csv_file(path: str | os.PathLike) -> list[TunedRow]:
    return parse_csv(read_config_text(path, "tuned table"), str(Path(path)))


def packaged_tables() -> list[tuple[str, str]]:
    """(name, text) of every CSV shipped in ``sglang_fp32gemm.configs``, sorted."""
    try:
        root = resources.files("sglang_fp32gemm.configs")
    except ModuleNotFoundError:
        # Run from a source checkout without installing: configs/ is beside the package.
        root = Path(__file__).resolve().parent.parent / "configs"
    out = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".csv"):
            name = f"configs/{entry.name}"
            try:
                out.append((name, entry.read_bytes().decode("utf-8-sig")))
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"{name}: packaged tuned table unreadable ({e})") from None
    return out


_ARCH = r"gfx[0-9a-f]+|sm[0-9]+"
_MODEL = r"[a-z]+[0-9]+[a-z]*"
#: A row's ``gfx`` column: the architecture, or ``ARCH-MODEL`` for rows only that GPU model reads.
_GFX_COLUMN_RE = re.compile(rf"({_ARCH})(?:-({_MODEL}))?")
_DEVICE_KEY_RE = re.compile(rf"({_ARCH})(?:-({_MODEL}))?:([1-9][0-9]{{0,5}})")


def gpu_model(name: str) -> str:
    """A CUDA device name's product token, lower case ("NVIDIA H200" -> "h200", "NVIDIA H100 80GB HBM3" ->
    "h100"); "" where the name has none. The H100 and the H200 share sm90 and 132 SMs, but not the best
    kernel at every shape (run 34): the model tells their rows apart."""
    for token in re.findall(r"[a-z0-9]+", name.lower()):
        if token != "nvidia" and re.fullmatch(_MODEL, token):
            return token
    return ""


@dataclasses.dataclass(frozen=True)
class DeviceKey:
    gfx: str      # "gfx950" on ROCm, "sm90" on CUDA
    cu_num: int   # CUs on ROCm, SMs on CUDA
    #: The GPU model on CUDA ("h200"): rows whose gfx is ``ARCH-MODEL`` serve only it; "" reads none of them.
    model: str = ""

    def __str__(self) -> str:
        return f"{self.gfx}-{self.model}:{self.cu_num}" if self.model else f"{self.gfx}:{self.cu_num}"

    @staticmethod
    def parse(text: str) -> "DeviceKey":
        """``ARCH[-MODEL]:COUNT`` as ``device_key`` makes it (``gfx950:256``, ``sm90-h200:132``); else a
        ConfigError."""
        t = str(text).strip()
        m = _DEVICE_KEY_RE.fullmatch(t.lower())
        if m is None:
            raise ConfigError(f"device key {text!r}: expected ARCH:COUNT such as gfx950:256 or sm90:132 "
                              "(ARCH gfx<hex> or sm<digits>, optionally -MODEL such as sm90-h200, COUNT the "
                              "CU/SM count >= 1)")
        return DeviceKey(m.group(1), int(m.group(3)), m.group(2) or "")


def device_key(device) -> Optional[DeviceKey]:
    """The table key of a torch device, or None for CPU and unknown devices."""
    import torch

    if getattr(device, "type", None) != "cuda" or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(device)
    count = int(props.multi_processor_count)
    if getattr(torch.version, "hip", None):
        return DeviceKey((getattr(props, "gcnArchName", "") or "").split(":")[0], count)
    return DeviceKey(f"sm{props.major}{props.minor}", count, gpu_model(getattr(props, "name", "") or ""))


def m_candidates(m: int) -> list[int]:
    """aiter's order: exact M, M rounded up to 16 (M <= 256), next power of two."""
    out = [m]
    if m <= M_BUCKET_LIMIT:
        r16 = (m + 15) // 16 * 16
        if r16 not in out:
            out.append(r16)
    p2 = 1 << max(0, (m - 1).bit_length())
    if p2 not in out:
        out.append(p2)
    return out


KernelParser = Callable[[str], object]


def validate_kernel_names(rows: Iterable[TunedRow], parsers: Mapping[str, Sequence[KernelParser]],
                          what: str = "kernel", every_libtype: bool = False) -> None:
    """Every row whose libtype has parsers (libtype -> ``Backend.parse`` functions) names a kernel
    one of them accepts (``what`` names such a kernel in the error); else a ConfigError with the first parser's
    error. ``every_libtype``: a row of a libtype without parsers (torch aside) is an error too (the pair table:
    only backends with a pair form serve it)."""
    for row in rows:
        fns = parsers.get(row.libtype)
        if not fns:
            if every_libtype and row.libtype != "torch":
                raise ConfigError(f"{row.source}: libtype {row.libtype!r} has no {what}")
            continue
        first: Optional[str] = None
        for fn in fns:
            try:
                fn(row.kernelName)
            except Exception as e:  # ValueError by contract; a crash rejects the name too
                if first is None:
                    text = one_line(e) or "(no message)"
                    first = text if isinstance(e, ValueError) else f"{type(e).__name__}: {text}"
            else:
                break
        else:
            raise ConfigError(f"{row.source}: kernelName {row.kernelName!r} is not a {row.libtype} {what}: {first}")


DETERMINISTIC_SUFFIX = "_deterministic.csv"
#: Rows for calls outside CUDA-graph capture where they differ from the fast table's (fast mode only).
EAGER_SUFFIX = "_eager.csv"
#: Rows for calls outside SGLang's multi-stream (overlapped) region, laid over the fast table's (fast mode
#: only; ``TunedTables.outside``).
SERIAL_SUFFIX = "_serial.csv"
#: Rows at the joined width N1 + N2 of two GEMMs on the same x that one launch of a pair form computes
#: (DeepSeek-V4's ratio-4 layers, outside the multi-stream region; fast mode only; ``pairs.py``).
PAIR_SUFFIX = "_pair.csv"


def is_deterministic_file(name: str | os.PathLike) -> bool:
    """Whether a table file holds deterministic kernels (its name ends in ``_deterministic.csv``)."""
    return os.path.basename(os.fspath(name)).endswith(DETERMINISTIC_SUFFIX)


def table_of(name: str | os.PathLike) -> str:
    """Which table a file's rows go to, by its name: ``deterministic``, ``eager``, ``serial``, ``pair`` or
    ``fast``."""
    if is_deterministic_file(name):
        return "deterministic"
    base = os.path.basename(os.fspath(name))
    for suffix, kind in ((EAGER_SUFFIX, "eager"), (SERIAL_SUFFIX, "serial"), (PAIR_SUFFIX, "pair")):
        if base.endswith(suffix):
            return kind
    return "fast"


class TunedTable:
    """All rows, merged in file order, indexed by aiter's key."""

    def __init__(self, rows_by_file: list[tuple[str, list[TunedRow]]]):
        self.files = [name for name, _ in rows_by_file]
        self._by_file = rows_by_file
        self._every_row = [r for _, rows in rows_by_file for r in rows]
        #: GPU model ("" for none) -> key -> row, built at a model's first lookup.
        self._views: dict[str, dict[tuple, TunedRow]] = {}
        self._view("")  # the generic rows: start-up logs the overrides, as before

    def _view(self, model: str) -> dict[tuple, TunedRow]:
        """The rows a device of ``model`` reads, keyed by the architecture alone: file by file, the generic
        rows, then that model's (``ARCH-MODEL``), so a model's row beats the generic one of its own file and
        of earlier files, and a later file's generic row beats both (a user's file, the serial files over
        the fast ones)."""
        view = self._views.get(model)
        if view is None:
            view = {}
            for _, rows in self._by_file:
                for r in [r for r in rows if not r.model] + ([r for r in rows if r.model == model] if model else []):
                    key = (r.arch,) + r.key[1:]
                    prev = view.get(key)
                    if prev is not None:
                        logger.debug("tuned row %s overrides %s", r.source, prev.source)
                    view[key] = r
            self._views[model] = view
        return view

    @classmethod
    def load(cls, extra_paths: Iterable[str] = (), deterministic: bool = False) -> "TunedTable":
        """The fast table (default) or the deterministic one; see ``TunedTables.load``."""
        return TunedTables.load(extra_paths).for_mode(deterministic)

    def rows(self) -> list[TunedRow]:
        """The merged rows: one per key, the last file's (no GPU model's rows)."""
        return list(self._view("").values())

    def ms(self, dev: DeviceKey, n: int, k: int) -> list[int]:
        """The M values with a row for ``dev`` at N and K, ascending."""
        return sorted({key[2] for key in self._view(dev.model)
                       if (key[0], key[1], key[3], key[4]) == (dev.gfx, dev.cu_num, n, k)})

    def every_row(self) -> list[TunedRow]:
        """Every row of every file, overridden ones included (for start-up validation)."""
        return list(self._every_row)

    def __len__(self) -> int:
        return len(self._view(""))

    def lookup(self, dev: DeviceKey, m: int, n: int, k: int, dtype: str = "torch.bfloat16",
               outdtype: str = "torch.float32", bias: bool = False) -> Optional[TunedRow]:
        if m <= 0:
            return None
        view = self._view(dev.model)
        for mm in m_candidates(m):
            r = view.get((dev.gfx, dev.cu_num, mm, n, k, bias, dtype, outdtype, False, False))
            if r is not None:
                return r
        return None


@dataclasses.dataclass(frozen=True)
class TunedTables:
    """The fast, the deterministic, the eager, the serial and the pair table."""

    fast: TunedTable
    deterministic: TunedTable
    eager: TunedTable = dataclasses.field(default_factory=lambda: TunedTable([]))
    serial: TunedTable = dataclasses.field(default_factory=lambda: TunedTable([]))
    pair: TunedTable = dataclasses.field(default_factory=lambda: TunedTable([]))
    #: What fast-mode calls outside SGLang's multi-stream region read where the serial table has rows: the
    #: packaged fast files, the packaged serial files, then the user's fast and serial files in the order
    #: given, so that a user's row overrides every packaged row for the calls its table serves.
    outside: TunedTable = dataclasses.field(default_factory=lambda: TunedTable([]))

    @classmethod
    def load(cls, extra_paths: Iterable[str] = ()) -> "TunedTables":
        """Packaged files, then ``extra_paths``, each read and validated once."""
        files: dict[str, list[tuple[str, list[TunedRow]]]] = {
            "fast": [], "deterministic": [], "eager": [], "serial": [], "pair": []}
        for name, text in packaged_tables():
            files[table_of(name)].append((name, parse_csv(text, name)))
        outside = files["fast"] + files["serial"]
        for p in extra_paths:
            kind, entry = table_of(p), (str(p), read_csv_file(p))
            files[kind].append(entry)
            if kind in ("fast", "serial"):
                outside.append(entry)
        return cls(**{kind: TunedTable(rows) for kind, rows in files.items()}, outside=TunedTable(outside))

    def for_mode(self, deterministic: bool) -> TunedTable:
        return self.deterministic if deterministic else self.fast

    def rows(self) -> list[TunedRow]:
        """Every row of every file of the tables, overridden ones included (for start-up validation)."""
        return (self.fast.every_row() + self.deterministic.every_row() + self.eager.every_row()
                + self.serial.every_row() + self.pair.every_row())
