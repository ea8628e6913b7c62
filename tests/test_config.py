"""The frozen configuration and the one reader of configuration files.

Guarantees: a disabled plugin reads no file and raises for nothing but a
malformed switch; an enabled one loads settings, both tables and the layer
file once and stops on the first problem with one line naming file:line or
the variable; only regular files are ever read, never blocking.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading

import pytest

from fakes.fake_backends import rows_csv
from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm import errors
from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import settings as S
from sglang_fp32gemm import table as table_mod
from sglang_fp32gemm.errors import ConfigError, read_config_text
from sglang_fp32gemm.table import DeviceKey

K = 7168
GFX950 = DeviceKey("gfx950", 256)


def _in_thread(fn, timeout: float = 10.0, fifos=()):
    """fn()'s result or exception; fails (after unblocking any FIFO reader) if it blocks."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        for f in fifos:
            try:
                os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        pytest.fail(f"blocked for more than {timeout}s")
    return box


def _csv(tmp_path, name, kernel="k", shapes=((1, 1024, K),)):
    p = tmp_path / name
    p.write_text(rows_csv(list(shapes), gfx="gfx950", cu_num=256, libtype="flydsl", kernel=kernel))
    return str(p)


# -- disabled: nothing read, nothing raised -------------------------------------------------
def test_disabled_config_reads_no_file_whatever_the_environment_holds(tmp_path, monkeypatch):
    fifo = str(tmp_path / "t.fifo")
    os.mkfifo(fifo)

    def no_reads(*a, **k):
        raise AssertionError(f"a disabled plugin read a file: {a}")

    monkeypatch.setattr(table_mod, "read_config_text", no_reads)
    monkeypatch.setattr(table_mod, "packaged_tables", no_reads)
    monkeypatch.setattr(layers_mod, "read_config_text", no_reads)
    env = {
        S.CONFIG_VAR: os.pathsep.join([fifo, "/nonexistent.csv", str(tmp_path)]),
        S.LAYERS_VAR: fifo,
        S.DETERMINISTIC_VAR: "sometimes",
        S.SGLANG_DETERMINISTIC_VAR: "maybe",
    }
    for switch in (None, "", "0", "off", "N"):
        e = dict(env) if switch is None else {**env, S.ENABLE_VAR: switch}
        box = _in_thread(lambda: config_mod.load(e, parsers={"flydsl": [no_reads]}), fifos=[fifo])
        assert "error" not in box, box
        c = box["value"]
        assert not c.enabled and (c.table, c.det_table, c.selection) == (None, None, None)
        assert len(c.settings.problems) == 1 and S.DETERMINISTIC_VAR in c.settings.problems[0]


def test_a_malformed_switch_is_the_one_error_a_disabled_plugin_raises():
    with pytest.raises(ConfigError) as e:
        config_mod.load({S.ENABLE_VAR: "enabled", S.DETERMINISTIC_VAR: "sometimes"})
    assert str(e.value) == (f"{S.ENABLE_VAR}='enabled': expected 1/true/yes/y/on or 0/false/no/n/off (any case)")


# -- enabled: everything loaded and validated once ---------------------------------------
def test_enabled_config_loads_tables_and_layers_and_is_frozen(tmp_path):
    fast = _csv(tmp_path, "mine.csv", kernel="fast_k")
    det = _csv(tmp_path, "mine_deterministic.csv", kernel="det_k")
    lay = tmp_path / "layers.txt"
    lay.write_text("layers = 0-10000000\nkinds = hca\n")
    env = {S.ENABLE_VAR: "1", S.CONFIG_VAR: os.pathsep.join([fast, det]), S.LAYERS_VAR: str(lay),
           S.SGLANG_DETERMINISTIC_VAR: "y"}
    seen: list[str] = []
    c = config_mod.load(env, parsers={"flydsl": [lambda name: seen.append(name)]})
    assert c.enabled and c.settings.deterministic and c.settings.deterministic_source == "sglang"
    assert c.table.lookup(GFX950, 1, 1024, K).kernelName == "fast_k"
    assert c.det_table.lookup(GFX950, 1, 1024, K).kernelName == "det_k"
    assert det in c.det_table.files and det not in c.table.files
    assert c.selection.source == str(lay) and c.selection.layers.intervals == ((0, 10000000),)
    assert {"fast_k", "det_k"} <= set(seen)  # rows of both tables were checked
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.table = None  # type: ignore[misc]


def test_load_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv(S.ENABLE_VAR, "yes")
    c = config_mod.load()
    assert c.enabled and c.table is not None and c.selection is not None
    assert c.selection.selects(None)


def _one_line_error(env, parsers=None) -> str:
    with pytest.raises(ConfigError) as e:
        config_mod.load(env, parsers)
    msg = str(e.value)
    assert "\n" not in msg and msg.strip() == msg
    return msg


def test_enabled_config_errors_are_one_line_naming_file_line_or_variable(tmp_path):
    on = {S.ENABLE_VAR: "1"}
    assert _one_line_error({**on, S.DETERMINISTIC_VAR: "sometimes"}).startswith(f"{S.DETERMINISTIC_VAR}=")
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text(rows_csv([(1, 1024, K)]) + "sm1,4,2,1024\n")
    assert _one_line_error({**on, S.CONFIG_VAR: str(bad_csv)}).startswith(f"{bad_csv}:3: 4 fields")
    bad_layers = tmp_path / "l.txt"
    bad_layers.write_text("layers = 1\nlayers = 3-\n")
    assert _one_line_error({**on, S.LAYERS_VAR: str(bad_layers)}).startswith(f"{bad_layers}:2: ")
    assert _one_line_error({**on, S.LAYERS_VAR: str(tmp_path / "none.txt")}).endswith("layer file not found")
    good = _csv(tmp_path, "g.csv", kernel="nonsense", shapes=((1, 1024, K), (2, 1024, K)))

    def parse(name):
        if name == "nonsense":
            raise ValueError("no such\nconfig")
        return name

    msg = _one_line_error({**on, S.CONFIG_VAR: good}, {"flydsl": [parse]})
    assert msg == f"{good}:2: kernelName 'nonsense' is not a flydsl kernel: no such config"
    # A bad name is an error even in a row a later file overrides.
    fixed = _csv(tmp_path, "fixed.csv", kernel="fine", shapes=((1, 1024, K), (2, 1024, K)))
    msg = _one_line_error({**on, S.CONFIG_VAR: os.pathsep.join([good, fixed])}, {"flydsl": [parse]})
    assert msg.startswith(f"{good}:2: kernelName 'nonsense'")
    odd = tmp_path / "new\nline.csv"
    odd.write_text("")
    assert "empty file" in _one_line_error({**on, S.CONFIG_VAR: str(odd)})


def test_enabled_config_with_a_fifo_table_is_an_error_not_a_hang(tmp_path):
    fifo = str(tmp_path / "t.csv")
    os.mkfifo(fifo)
    box = _in_thread(lambda: config_mod.load({S.ENABLE_VAR: "1", S.CONFIG_VAR: fifo}), fifos=[fifo])
    assert isinstance(box.get("error"), ConfigError), box
    assert str(box["error"]) == f"{fifo}: tuned table is a FIFO (named pipe), not a regular file"


# -- read_config_text ---------------------------------------------------------------------
def test_only_regular_files_are_read(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    sock_path = tmp_path / "s"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    try:
        cases = [(d, "a directory"), (fifo, "a FIFO (named pipe)"), (sock_path, "a socket")]
        if os.path.exists("/dev/null"):
            cases.append(("/dev/null", "a character device"))
        for path, kind in cases:
            box = _in_thread(lambda: read_config_text(path, "thing"), fifos=[fifo])
            assert isinstance(box.get("error"), ConfigError), (path, box)
            assert str(box["error"]) == f"{path}: thing is {kind}, not a regular file"
        link = tmp_path / "link"
        link.symlink_to(fifo)
        box = _in_thread(lambda: read_config_text(link, "thing"), fifos=[fifo])
        assert str(box["error"]) == f"{link}: thing is a FIFO (named pipe), not a regular file"
    finally:
        sock.close()


def test_a_symlink_to_a_regular_file_is_read(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("layers = 1\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    assert read_config_text(link, "layer file") == "layers = 1\n"


def test_bom_is_dropped_and_undecodable_bytes_name_the_line(tmp_path):
    p = tmp_path / "b.txt"
    p.write_bytes(b"\xef\xbb\xbfa\r\nb\n")
    assert read_config_text(p, "x") == "a\r\nb\n"
    p.write_bytes(b"a\nb\nc\x80\n")
    with pytest.raises(ConfigError, match=rf"^{p}:3: x is not UTF-8 text \(byte 0x80 at offset 5\)$"):
        read_config_text(p, "x")


def test_missing_and_permission_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=rf"^{tmp_path}/nope: x not found$"):
        read_config_text(tmp_path / "nope", "x")
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(ConfigError, match=rf"^{f}/below: x unreadable \(Not a directory\)$"):
        read_config_text(f / "below", "x")
    if os.geteuid() != 0:
        f.chmod(0)
        with pytest.raises(ConfigError, match=rf"^{f}: x unreadable \(Permission denied\)$"):
            read_config_text(f, "x")


def test_an_absurdly_large_file_is_refused_without_reading_it(tmp_path, monkeypatch):
    monkeypatch.setattr(errors, "MAX_CONFIG_BYTES", 10)
    p = tmp_path / "big.csv"
    p.write_text("x" * 11)
    with pytest.raises(ConfigError, match=rf"^{p}: x is 11 bytes, more than a configuration file can be"):
        read_config_text(p, "x")
    p.write_text("x" * 10)
    assert read_config_text(p, "x") == "x" * 10
