"""Tuned tables: the packaged rows, aiter's M bucketing, extra files, and file:line errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakes.fake_backends import rows_csv
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.table import (HEADER, DeviceKey, TunedTable, TunedTables, format_rows, m_candidates, parse_csv,
                                   read_csv_file, validate_kernel_names)

GFX950 = DeviceKey("gfx950", 256)
SM90 = DeviceKey("sm90", 132)
K = 7168

# ROCm/aiter PR #6005, MI355X FlyDSL per-call times (us), copied from its text.
UPSTREAM_US = {
    (1, 1024): 5.80, (2, 1024): 5.81, (4, 1024): 6.00, (8, 1024): 6.27, (16, 1024): 6.63, (32, 1024): 7.77,
    (1, 2560): 8.77, (2, 2560): 8.96, (4, 2560): 9.02, (8, 2560): 9.41, (16, 2560): 10.49, (32, 2560): 13.13,
}


@pytest.fixture(scope="module")
def packaged() -> TunedTable:
    return TunedTable.load()


def test_packaged_tables_load_without_errors(packaged):
    assert packaged.files == ["configs/gfx950.csv", "configs/sm90.csv"]
    assert len(packaged) == len(packaged.rows()) > 0
    for r in packaged.rows():
        assert r.source.startswith(("configs/gfx950.csv:", "configs/sm90.csv:"))


def test_gfx950_has_exactly_the_twelve_upstream_rows(packaged):
    rows = [r for r in packaged.rows() if r.gfx == "gfx950"]
    assert len(rows) == 12
    got = {(r.M, r.N): r for r in rows}
    assert set(got) == set(UPSTREAM_US)
    for (m, n), r in got.items():
        assert (r.cu_num, r.K, r.libtype, r.dtype, r.outdtype) == (256, K, "flydsl", "torch.bfloat16",
                                                                   "torch.float32"), r
        assert not (r.bias or r.scaleAB or r.bpreshuffle)
        assert r.us == pytest.approx(UPSTREAM_US[(m, n)], abs=1e-9), (m, n, r.us)
        assert "_fp32_" in r.kernelName and r.kernelName.endswith("_gfx950"), r.kernelName


def test_sm90_rows_cover_every_dsv4_compressor_shape():
    from sglang_fp32gemm.table import TunedTables

    tables = TunedTables.load()
    for table in (tables.fast, tables.deterministic):
        rows = [r for r in table.rows() if r.gfx == "sm90"]
        assert rows
        for r in rows:
            assert r.cu_num == 132 and r.outdtype == "torch.float32"
            assert r.libtype in ("triton", "cutedsl", "torch")
        for k in (7168, 4096):  # V4-Pro and V4-Flash
            for n in (512, 1024, 2048, 2560):
                assert {1, 2, 4, 8, 16} <= {r.M for r in rows if r.N == n and r.K == k}, (n, k)


def test_packaged_rows_round_trip_through_the_csv_writer(packaged):
    text = format_rows(packaged.rows())
    again = parse_csv(text, "again.csv")
    assert [r.key for r in again] == [r.key for r in packaged.rows()]
    assert [(r.us, r.kernelName) for r in again] == [(r.us, r.kernelName) for r in packaged.rows()]


@pytest.mark.parametrize("m, expected", [
    (1, [1, 16]), (2, [2, 16]), (3, [3, 16, 4]), (16, [16]), (17, [17, 32]), (31, [31, 32]),
    (33, [33, 48, 64]), (200, [200, 208, 256]), (256, [256]), (257, [257, 512]), (300, [300, 512]),
    (1024, [1024]),
])
def test_m_candidates_follow_aiter_order(m, expected):
    assert m_candidates(m) == expected


@pytest.mark.parametrize("m, bucket", [(1, 1), (2, 2), (3, 16), (5, 16), (8, 8), (9, 16), (16, 16),
                                       (17, 32), (24, 32), (32, 32)])
@pytest.mark.parametrize("n", [1024, 2560])
def test_gfx950_m_up_to_32_routes_to_its_bucket(packaged, m, n, bucket):
    r = packaged.lookup(GFX950, m, n, K)
    assert r is not None and (r.M, r.N, r.K) == (bucket, n, K)


@pytest.mark.parametrize("m", [0, 33, 40, 64, 100, 256, 300, 4096])
def test_gfx950_larger_m_has_no_row(packaged, m):
    assert packaged.lookup(GFX950, m, 1024, K) is None


def test_lookup_misses_other_shapes_devices_and_dtypes(packaged):
    assert packaged.lookup(GFX950, 8, 2048, K) is None          # no gfx950 CSA row
    assert packaged.lookup(GFX950, 8, 1024, 4096) is None
    assert packaged.lookup(DeviceKey("gfx950", 304), 8, 1024, K) is None
    assert packaged.lookup(DeviceKey("gfx942", 256), 8, 1024, K) is None
    assert packaged.lookup(GFX950, 8, 1024, K, dtype="torch.float16") is None
    assert packaged.lookup(GFX950, 8, 1024, K, outdtype="torch.bfloat16") is None
    assert packaged.lookup(GFX950, 8, 1024, K, bias=True) is None
    # sm90 (re-tuned from time to time): every row is found by its own M, and an
    # untuned M takes the first bucket aiter's order names, or none.
    sm90 = [r for r in packaged.rows() if r.gfx == "sm90"]
    for r in sm90:
        assert packaged.lookup(SM90, r.M, r.N, r.K) is r
    for n in {r.N for r in sm90}:
        ms = {r.M for r in sm90 if r.N == n}
        for m in range(1, 300):
            want = next((c for c in m_candidates(m) if c in ms), None)
            got = packaged.lookup(SM90, m, n, K)
            assert (got.M if got else None) == want, (m, n)


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_extra_tables_from_the_environment_override_packaged_and_earlier(tmp_path, monkeypatch, packaged):
    a = _write(tmp_path, "a.csv", rows_csv([(1, 1024, K), (64, 1024, K)], gfx="gfx950", cu_num=256,
                                           libtype="flydsl", kernel="kernel_from_a", us=1.5))
    b = _write(tmp_path, "b.csv", rows_csv([(64, 1024, K)], gfx="gfx950", cu_num=256, libtype="flydsl",
                                           kernel="kernel_from_b", us=2.5))
    monkeypatch.setenv(settings_mod.CONFIG_VAR, os.pathsep.join([a, "", b]))
    s = settings_mod.reload()
    assert s.config_paths == (a, b)
    t = TunedTable.load(s.config_paths)
    assert t.files == ["configs/gfx950.csv", "configs/sm90.csv", a, b]
    r1 = t.lookup(GFX950, 1, 1024, K)
    assert (r1.kernelName, r1.us, r1.source) == ("kernel_from_a", 1.5, f"{a}:2")  # a overrides packaged
    r64 = t.lookup(GFX950, 64, 1024, K)
    assert (r64.kernelName, r64.us, r64.source) == ("kernel_from_b", 2.5, f"{b}:2")  # b overrides a
    assert t.lookup(GFX950, 33, 1024, K).M == 64  # the new row extends the bucketing
    assert t.lookup(GFX950, 2, 1024, K).source.startswith("configs/gfx950.csv:")
    assert len(t) == len(packaged) + 1  # one new key (M=64); M=1 replaced a packaged row


_GOOD = rows_csv([(1, 1024, K), (2, 1024, K)], gfx="gfx950", cu_num=256, libtype="flydsl", kernel="k")
_LINES = _GOOD.splitlines()


def _bad(line: int, old: str, new: str) -> str:
    lines = list(_LINES)
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, line, words", [
    (_GOOD.replace(",us,", ",usec,", 1), 1, "lacks column(s) us"),
    (_bad(3, ",2,1024,", ",two,1024,"), 3, "column 'M' must be an integer, got 'two'"),
    (_bad(2, ",0,2,1.0,", ",0,2,fast,"), 2, "column 'us' must be a number, got 'fast'"),
    (_bad(2, ",0,2,1.0,", ",0,2,nan,"), 2, "column 'us' must be a number"),
    (_bad(3, ",False,torch.bfloat16", ",maybe,torch.bfloat16"), 3, "column 'bias' must be True or False"),
    (_bad(3, ",flydsl,", ",cublasLt,"), 3, "unknown libtype 'cublasLt'"),
    (_bad(2, "torch.float32", "torch.float64"), 2, "column 'outdtype' must be one of"),
    (_bad(3, ",k,", ",,"), 3, "libtype 'flydsl' needs a kernelName"),
    (_bad(3, "gfx950,256,2,", "gfx950,256,1,"), 3, "duplicate key"),
    (_bad(2, "gfx950,256,1,", "gfx950,0,1,"), 2, "column 'cu_num' must be >= 1"),
    (_LINES[0] + "\n" + _LINES[1] + "\ngfx950,256,4\n", 3, "3 fields"),
    (_LINES[0] + "\n" + _LINES[1] + "\n" + _LINES[2] + ",extra\n", 3, "19 fields, the header has 18"),
    (_LINES[0] + "\n" + _LINES[1] + ",\n", 2, "19 fields, the header has 18"),
    (_LINES[0] + ",M\n" + _LINES[1] + ",1\n", 1, "header names column(s) M more than once"),
])
def test_bad_table_errors_name_file_and_line(tmp_path, text, line, words):
    p = _write(tmp_path, "bad.csv", text)
    with pytest.raises(ConfigError) as e:
        read_csv_file(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert words in msg, msg


def test_duplicate_key_error_names_the_first_line(tmp_path):
    p = _write(tmp_path, "dup.csv", _bad(3, "gfx950,256,2,", "gfx950,256,1,"))
    with pytest.raises(ConfigError, match=r"first at line 2"):
        read_csv_file(p)


def test_same_key_in_two_files_is_an_override_not_an_error(tmp_path):
    a = _write(tmp_path, "a.csv", _GOOD)
    b = _write(tmp_path, "b.csv", _GOOD.replace(",k,", ",k2,"))
    t = TunedTable.load([a, b])
    assert t.lookup(GFX950, 1, 1024, K).kernelName == "k2"


def test_comment_and_blank_lines_are_skipped_and_lines_still_counted(tmp_path):
    text = _LINES[0] + "\n# a comment\n\n" + _LINES[1] + "\n" + _LINES[2].replace(",flydsl,", ",bogus,") + "\n"
    p = _write(tmp_path, "c.csv", text)
    with pytest.raises(ConfigError, match=rf"^{p}:5: unknown libtype 'bogus'"):
        read_csv_file(p)


def test_empty_file_names_line_one(tmp_path):
    p = _write(tmp_path, "empty.csv", "")
    with pytest.raises(ConfigError, match=rf"^{p}:1: empty file"):
        read_csv_file(p)


def test_missing_table_file_is_named(tmp_path, monkeypatch):
    p = str(tmp_path / "nope.csv")
    with pytest.raises(ConfigError, match=rf"^{p}: tuned table not found"):
        read_csv_file(p)
    monkeypatch.setenv(settings_mod.CONFIG_VAR, p)
    with pytest.raises(ConfigError, match="nope.csv: tuned table not found"):
        TunedTable.load(settings_mod.reload().config_paths)


def test_directory_as_table_is_an_error_saying_so(tmp_path):
    d = tmp_path / "adir.csv"
    d.mkdir()
    with pytest.raises(ConfigError, match=rf"^{d}: tuned table is a directory, not a regular file$"):
        read_csv_file(d)


def test_invalid_utf8_table_names_file_and_line(tmp_path):
    p = tmp_path / "latin.csv"
    p.write_bytes(_GOOD.encode() + b"gfx950,256,4,1024,7168,False,\xff\xfe\xc3(\n")
    with pytest.raises(ConfigError, match=rf"^{p}:4: tuned table is not UTF-8 text \(byte 0xff at offset "):
        read_csv_file(p)


def test_table_saved_with_a_utf8_bom_is_accepted(tmp_path):
    p = tmp_path / "excel.csv"
    p.write_bytes(b"\xef\xbb\xbf" + _GOOD.replace("\n", "\r\n").encode())
    rows = read_csv_file(p)
    assert [r.key for r in rows] == [r.key for r in parse_csv(_GOOD, "g.csv")]
    assert [r.source for r in rows] == [f"{p}:2", f"{p}:3"]
    assert [r.key for r in parse_csv("\ufeff" + _GOOD, "t.csv")] == [r.key for r in rows]


def test_fifo_table_is_an_error_not_a_hang(tmp_path):
    import threading

    fifo = tmp_path / "table.csv"
    os.mkfifo(fifo)
    got: list = []

    def read():
        try:
            read_csv_file(fifo)
        except BaseException as e:  # noqa: BLE001
            got.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO table blocked")
    assert isinstance(got[0], ConfigError) and str(got[0]) == (
        f"{fifo}: tuned table is a FIFO (named pipe), not a regular file")


# -- device keys ------------------------------------------------------------------------
@pytest.mark.parametrize("text, key", [
    ("gfx950:256", GFX950), ("sm90:132", SM90), (" SM90:132 ", SM90), ("gfx90a:104", DeviceKey("gfx90a", 104)),
    ("sm100:148", DeviceKey("sm100", 148)), ("gfx1100:48", DeviceKey("gfx1100", 48)),
])
def test_device_key_parse_accepts_what_device_key_makes(text, key):
    assert DeviceKey.parse(text) == key
    assert DeviceKey.parse(str(key)) == key


@pytest.mark.parametrize("text", [
    "sm90", "sm90:x", ":132", "sm90:0", "gfx950:256:1", "", ":", "sm90:", "sm90:-1", "sm90:+132", "sm90:0132",
    "sm90: 132", "cuda:0", "gfx:256", "sm:132", "gfx950 256", "sm90:1e3", "gfxzz:1",
])
def test_device_key_parse_rejects_malformed_keys(text):
    with pytest.raises(ConfigError) as e:
        DeviceKey.parse(text)
    assert str(e.value).startswith(f"device key {text!r}: expected ARCH:COUNT") and "\n" not in str(e.value)


@pytest.mark.parametrize("key", ["sm90", "sm90:x", ":132", "sm90:0", "gfx950:256:1", ""])
def test_explain_cli_with_a_malformed_device_key_prints_one_line_and_exits_2(key, capsys):
    from sglang_fp32gemm.__main__ import main

    assert main(["explain", "--device-key", key]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: --device-key: device key {key!r}: expected ARCH:COUNT such as gfx950:256 " \
        "or sm90:132 (ARCH gfx<hex> or sm<digits>, optionally -MODEL such as sm90-h200, COUNT the CU/SM count " \
        ">= 1)\n"


def test_explain_process_with_a_malformed_device_key_has_no_traceback():
    import subprocess
    import sys

    from conftest import REPO_ROOT, subprocess_env

    p = subprocess.run([sys.executable, "-m", "sglang_fp32gemm", "explain", "--device-key", "sm90:x"],
                       capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd=str(REPO_ROOT))
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: --device-key: device key 'sm90:x'"), p.stderr


def test_explain_function_rejects_a_malformed_device_key_before_any_work():
    from sglang_fp32gemm.explain import explain

    code, text = explain("sm90:x")
    assert code == 2 and text.startswith("error: device key 'sm90:x'") and text.count("\n") == 1


# -- kernel names -----------------------------------------------------------------------
def _only(prefix: str):
    def parse(name: str) -> str:
        if not name.startswith(prefix):
            raise ValueError(f"{name!r} does not start with {prefix!r}")
        return name
    return parse


def test_validate_kernel_names_accepts_a_name_any_parser_of_its_libtype_takes():
    rows = parse_csv(_GOOD, "g.csv")  # libtype flydsl, kernelName "k"
    validate_kernel_names(rows, {"flydsl": [_only("x"), _only("k")]})
    validate_kernel_names(rows, {"triton": [_only("x")]})  # no parsers for flydsl: torch serves it, no check
    validate_kernel_names(rows, {"flydsl": []})
    validate_kernel_names([], {"flydsl": [_only("x")]})


def test_unparsable_kernel_name_is_an_error_naming_file_line_and_the_first_parsers_reason():
    rows = parse_csv(_GOOD.replace(",k,", ",zz,", 2).replace(",zz,", ",k,", 1), "g.csv")
    assert [r.kernelName for r in rows] == ["k", "zz"]
    with pytest.raises(ConfigError) as e:
        validate_kernel_names(rows, {"flydsl": [_only("k"), _only("q")]})
    assert str(e.value) == "g.csv:3: kernelName 'zz' is not a flydsl kernel: 'zz' does not start with 'k'"


def test_a_crashing_parser_rejects_the_name_with_one_line():
    def crash(name):
        raise TypeError("bad\nthings")

    rows = parse_csv(_GOOD, "g.csv")
    with pytest.raises(ConfigError, match=r"^g.csv:2: kernelName 'k' is not a flydsl kernel: TypeError: bad things$"):
        validate_kernel_names(rows, {"flydsl": [crash]})


def test_every_shipped_kernel_name_parses_for_a_backend_of_its_libtype():
    from sglang_fp32gemm.backends import default_backends

    try:
        backends = default_backends()
    except TypeError as e:  # a backend not yet on the parse()/bind() interface
        pytest.skip(f"backends not constructible yet: {e}")
    parsers = {lib: [b.parse for b in bs] for lib, bs in backends.items()}
    assert set(parsers) >= {"triton", "flydsl"}
    validate_kernel_names(TunedTables.load().rows(), parsers)


# -- the deterministic table ----------------------------------------------------------------
def test_deterministic_files_form_their_own_table(tmp_path):
    fast = _write(tmp_path, "mine.csv", rows_csv([(1, 1024, K)], gfx="gfx950", cu_num=256, libtype="flydsl",
                                                 kernel="fast_k"))
    det = _write(tmp_path, "mine_deterministic.csv", rows_csv([(1, 1024, K), (4, 1024, K)], gfx="gfx950",
                                                              cu_num=256, libtype="flydsl", kernel="det_k"))
    det2 = _write(tmp_path, "later_deterministic.csv", rows_csv([(4, 1024, K)], gfx="gfx950", cu_num=256,
                                                                libtype="flydsl", kernel="det_k2"))
    t = TunedTables.load([fast, det, det2])
    assert t.fast.files[-1] == fast and det not in t.fast.files and det2 not in t.fast.files
    assert [f for f in t.deterministic.files if not f.startswith("configs/")] == [det, det2]
    assert all(f.endswith("_deterministic.csv") for f in t.deterministic.files)
    assert t.fast.lookup(GFX950, 1, 1024, K).kernelName == "fast_k"
    assert t.deterministic.lookup(GFX950, 1, 1024, K).kernelName == "det_k"
    assert t.deterministic.lookup(GFX950, 4, 1024, K).kernelName == "det_k2"  # later file wins
    assert t.fast.lookup(GFX950, 4, 1024, K).kernelName != "det_k2"
    assert t.for_mode(True) is t.deterministic and t.for_mode(False) is t.fast
    assert {r.kernelName for r in t.rows()} >= {"fast_k", "det_k", "det_k2"}
    assert TunedTable.load([fast, det, det2], deterministic=True).lookup(GFX950, 1, 1024, K).kernelName == "det_k"
    assert TunedTable.load([fast, det, det2]).lookup(GFX950, 1, 1024, K).kernelName == "fast_k"


def test_eager_files_form_their_own_table(tmp_path):
    """``*_eager.csv``: rows for calls outside graph capture; neither the fast nor the deterministic table."""
    eager = _write(tmp_path, "mine_eager.csv", rows_csv([(1, 1024, K)], gfx="gfx950", cu_num=256, libtype="flydsl",
                                                        kernel="eager_k"))
    fast = _write(tmp_path, "eager_not.csv", rows_csv([(1, 1024, K)], gfx="gfx950", cu_num=256, libtype="flydsl",
                                                      kernel="fast_k"))
    t = TunedTables.load([eager, fast])
    assert [f for f in t.eager.files if not f.startswith("configs/")] == [eager]
    assert eager not in t.fast.files + t.deterministic.files and fast in t.fast.files
    assert t.eager.lookup(GFX950, 1, 1024, K).kernelName == "eager_k"
    assert t.fast.lookup(GFX950, 1, 1024, K).kernelName == "fast_k"
    assert "eager_k" in {r.kernelName for r in t.rows()}  # validated at start-up like every row
    assert TunedTables.load().eager.files == ["configs/sm90_eager.csv"]


def test_a_name_merely_containing_deterministic_is_a_fast_table(tmp_path):
    p = _write(tmp_path, "deterministic_not.csv", rows_csv([(1, 1024, K)], gfx="gfx950", cu_num=256,
                                                            libtype="flydsl", kernel="x"))
    t = TunedTables.load([p])
    assert p in t.fast.files and p not in t.deterministic.files


def test_packaged_tables_split_by_name(packaged):
    t = TunedTables.load()
    assert t.fast.files == packaged.files
    assert all(f.startswith("configs/") and f.endswith("_deterministic.csv") for f in t.deterministic.files)


def test_header_may_reorder_and_extend_columns(tmp_path):
    order = list(reversed(HEADER)) + ["extra"]
    rows = parse_csv(_GOOD, "g.csv")
    lines = [",".join(order)] + [",".join(list(reversed(r.to_csv_fields())) + ["x"]) for r in rows]
    got = parse_csv("\n".join(lines) + "\n", "r.csv")
    assert [r.key for r in got] == [r.key for r in rows]
