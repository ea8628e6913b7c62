"""Environment switches and the per-layer opt-in file."""

from __future__ import annotations

import logging

import pytest
import torch

from fakes.fake_backends import ExactFake, enabled_settings, make_router
from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import routing
from sglang_fp32gemm import settings as S
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.layers import IdRanges, LayerInfo, LayerSelection


# -- the enable variable --------------------------------------------------------
@pytest.mark.parametrize("value", ["1", "true", "TRUE", "True", "on", "ON", "oN", " yes ", "tRuE", "y", "Y", " y\n"])
def test_enable_var_true_spellings_enable(monkeypatch, value):
    monkeypatch.setenv(S.ENABLE_VAR, value)
    s = S.reload()
    assert s.enabled is True and s.enabled_source == "env"


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "False", "off", "OFF", "Off", "no", "n", "N", "\tno "])
def test_enable_var_false_spellings_disable(monkeypatch, value):
    monkeypatch.setenv(S.ENABLE_VAR, value)
    s = S.reload()
    assert s.enabled is False and s.enabled_source == "env"


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_enable_var_is_the_default_off(monkeypatch, value):
    monkeypatch.setenv(S.ENABLE_VAR, value)
    s = S.reload()
    assert s.enabled is False and s.enabled_source == "default"


def test_unset_enable_var_is_off():
    s = S.reload()
    assert (s.enabled, s.enabled_source, s.config_paths, s.layers_path) == (False, "default", (), None)


@pytest.mark.parametrize("value", ["2", "enable", "tru", "yess", "1.0", "-1", "ye", "nope", "1 1", "None"])
def test_bad_enable_value_raises_one_config_error_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(S.ENABLE_VAR, value)
    with pytest.raises(ConfigError) as e:
        S.reload()
    msg = str(e.value)
    assert msg.startswith(f"{S.ENABLE_VAR}=") and repr(value) in msg and "\n" not in msg


def test_flag_source_is_reported_only_with_the_value(monkeypatch):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    monkeypatch.setenv(S.SOURCE_VAR, "flag")
    assert S.reload().enabled_source == "flag"


def test_settings_are_cached_until_reload(monkeypatch):
    assert S.get().enabled is False
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    assert S.get().enabled is False
    assert S.reload().enabled is True and S.get().enabled is True


def test_bad_deterministic_value_names_its_variable_when_enabled(monkeypatch):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    monkeypatch.setenv(S.DETERMINISTIC_VAR, "sometimes")
    with pytest.raises(ConfigError, match=S.DETERMINISTIC_VAR):
        S.reload()


def test_disabled_plugin_never_raises_for_its_other_variables(monkeypatch):
    # Installed, not enabled: whatever the other variables hold, the launch goes on.
    monkeypatch.setenv(S.DETERMINISTIC_VAR, "sometimes")
    monkeypatch.setenv(S.CONFIG_VAR, "/nonexistent/a.csv:/dev/null")
    monkeypatch.setenv(S.LAYERS_VAR, "/nonexistent/layers.txt")
    monkeypatch.setenv(S.SGLANG_DETERMINISTIC_VAR, "maybe")
    monkeypatch.setenv(S.SOURCE_VAR, "garbage")
    s = S.reload()
    assert s.enabled is False and s.enabled_source == "default"
    assert (s.deterministic, s.deterministic_source) == (False, "default")
    assert len(s.problems) == 1 and S.DETERMINISTIC_VAR in s.problems[0]
    monkeypatch.setenv(S.ENABLE_VAR, "0")  # explicitly off: the same
    s = S.reload()
    assert s.enabled is False and s.enabled_source == "env" and len(s.problems) == 1


def test_bad_enable_value_is_an_error_even_though_it_does_not_enable(monkeypatch):
    monkeypatch.setenv(S.ENABLE_VAR, "maybe")
    monkeypatch.setenv(S.DETERMINISTIC_VAR, "sometimes")
    with pytest.raises(ConfigError) as e:
        S.reload()
    assert str(e.value).startswith(S.ENABLE_VAR + "=")  # the switch, not the other variable


def test_config_paths_are_split_stripped_and_empty_entries_skipped(monkeypatch):
    import os

    monkeypatch.setenv(S.CONFIG_VAR, os.pathsep.join([" /a.csv ", "", "  ", "/b c.csv"]))
    monkeypatch.setenv(S.LAYERS_VAR, "  /l.txt \n")
    s = S.reload()
    assert s.config_paths == ("/a.csv", "/b c.csv") and s.layers_path == "/l.txt"
    monkeypatch.setenv(S.LAYERS_VAR, "   ")
    assert S.reload().layers_path is None


# SGLang 0.5.23's EnvBool: value.lower() (no strip) in true/1/yes/y or false/0/no/n; anything
# else is its default (False) with a warning.
SGLANG_BOOL_CASES = [
    ("1", True), ("true", True), ("TRUE", True), ("True", True), ("yes", True), ("YES", True), ("y", True),
    ("Y", True), ("0", False), ("false", False), ("no", False), ("n", False), ("N", False),
    ("", False), (" 1", False), ("1 ", False), ("on", False), ("ON", False), ("2", False), ("maybe", False),
    ("None", False), ("yes\n", False),
]


@pytest.mark.parametrize("value, on", SGLANG_BOOL_CASES)
def test_sglang_deterministic_variable_is_read_with_sglang_grammar_and_never_raises(monkeypatch, value, on):
    monkeypatch.setenv(S.ENABLE_VAR, "1")  # even when enabled, SGLang's variable is SGLang's business
    monkeypatch.setenv(S.SGLANG_DETERMINISTIC_VAR, value)
    s = S.reload()
    assert (s.deterministic, s.deterministic_source) == ((True, "sglang") if on else (False, "default"))
    assert S.sglang_env_bool(value) is on


@pytest.mark.parametrize("value", [v for v, _ in SGLANG_BOOL_CASES] + ["Yes", "nO", "tRUE", "\t0"])
def test_sglang_bool_grammar_matches_the_installed_sglang(sglang_available, monkeypatch, value):
    import warnings

    from sglang.srt.environ import envs

    monkeypatch.setenv(S.SGLANG_DETERMINISTIC_VAR, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = envs.SGLANG_ENABLE_DETERMINISTIC_INFERENCE.get()
    assert S.sglang_env_bool(value) is theirs


def test_probe_cache_dir_variable_and_default(monkeypatch, tmp_path):
    assert S.probe_cache_dir({S.PROBE_CACHE_VAR: f" {tmp_path} "}) == str(tmp_path)
    assert S.probe_cache_dir({"XDG_CACHE_HOME": "/xdg"}) == "/xdg/sglang_fp32gemm/probes"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert S.probe_cache_dir({S.PROBE_CACHE_VAR: ""}) == f"{tmp_path}/.cache/sglang_fp32gemm/probes"


@pytest.mark.parametrize("value, seconds", [(None, 120.0), ("", 120.0), ("  ", 120.0), ("30", 30.0),
                                            (" 2.5\n", 2.5), ("1e3", 1000.0)])
def test_probe_timeout_default_and_values(monkeypatch, value, seconds):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    if value is not None:
        monkeypatch.setenv(S.PROBE_TIMEOUT_VAR, value)
    assert S.reload().probe_timeout_s == seconds


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf", "-inf", "12s", "1,5"])
def test_a_bad_probe_timeout_is_an_error_naming_the_variable_once_enabled(monkeypatch, value):
    monkeypatch.setenv(S.PROBE_TIMEOUT_VAR, value)
    s = S.reload()  # disabled: kept as a problem, the default is used
    assert s.probe_timeout_s == 120.0 and len(s.problems) == 1 and S.PROBE_TIMEOUT_VAR in s.problems[0]
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    with pytest.raises(ConfigError, match=S.PROBE_TIMEOUT_VAR):
        S.reload()


def test_deterministic_follows_sglang_unless_set(monkeypatch):
    monkeypatch.setenv(S.SGLANG_DETERMINISTIC_VAR, "1")
    s = S.reload()
    assert (s.deterministic, s.deterministic_source) == (True, "sglang")
    monkeypatch.setenv(S.DETERMINISTIC_VAR, "0")
    s = S.reload()
    assert (s.deterministic, s.deterministic_source) == (False, "env")


def test_bad_enable_value_at_run_time_logs_and_falls_back(monkeypatch, caplog, make_bf16):
    monkeypatch.setenv(S.ENABLE_VAR, "perhaps")
    monkeypatch.setattr(S, "_cached", None)  # a fresh process: nothing parsed yet
    r = routing.reset_router()
    x, w = make_bf16(4, 64), make_bf16(32, 64)
    with caplog.at_level(logging.ERROR, logger="sglang_fp32gemm.routing"):
        out = routing.linear_bf16_fp32(x, w)
        out2 = routing.linear_bf16_fp32(x, w)
    assert torch.equal(out, torch.mm(x.float(), w.float().t())) and torch.equal(out, out2)
    assert not r.enabled and S.ENABLE_VAR in r.error
    errs = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert len(errs) == 1 and S.ENABLE_VAR in errs[0].getMessage()
    assert r.counters() == {("torch", "bad configuration"): 2}


# -- the layer file ---------------------------------------------------------------
def _sel(text: str) -> LayerSelection:
    return layers_mod.parse(text, "layers.txt")


def test_layer_ids_and_ranges_select_only_those_layers():
    s = _sel("layers = 0-3, 7, 10-11\n")
    assert s.layers == IdRanges(((0, 3), (7, 7), (10, 11)))
    want = {0, 1, 2, 3, 7, 10, 11}
    for i in range(15):
        assert s.selects(LayerInfo(i, "hca")) is (i in want)
        assert (i in s.layers) is (i in want)


def test_overlapping_and_adjacent_ranges_merge():
    s = _sel("layers = 5-9, 0-3, 4, 8-12, 20 - 22, 20\n")
    assert s.layers.intervals == ((0, 12), (20, 22))
    assert "layers=0-12,20-22" in s.describe()


def test_huge_layer_ranges_cost_nothing():
    import time
    import tracemalloc

    tracemalloc.start()
    t0 = time.perf_counter()
    s = _sel("layers = 0-10000000, 20000000-900000000000\nexclude_layers = 5-9999999\n")
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 0.05 and peak < 1 << 20, (elapsed, peak)
    assert len(s.layers) == 2 and len(s.exclude) == 1
    assert s.selects(LayerInfo(4, "hca")) and s.selects(LayerInfo(10000000, "csa"))
    assert not s.selects(LayerInfo(5, "hca")) and not s.selects(LayerInfo(10000001, "hca"))
    assert s.selects(LayerInfo(900000000000, "hca")) and not s.selects(LayerInfo(900000000001, "hca"))
    assert s.describe().endswith("layers=0-10000000,20000000-900000000000 exclude_layers=5-9999999")


def test_layer_membership_is_a_binary_search_over_ranges():
    import random

    rng = random.Random(0)
    pairs = sorted({(a, a + rng.randrange(3)) for a in rng.sample(range(0, 100000, 4), 2000)})
    text = "layers = " + ", ".join(f"{a}-{b}" for a, b in pairs) + "\n"
    s = _sel(text)
    want = {i for a, b in pairs for i in range(a, b + 1)}
    for i in rng.sample(range(0, 100010), 5000) + [0, 1, 99999, 100003, 100004]:
        assert (i in s.layers) is (i in want), i


def test_kinds_select_only_those_kinds():
    s = _sel("kinds = HCA, indexer\n")
    assert s.kinds == frozenset({"hca", "indexer"})
    assert [s.selects(LayerInfo(5, k)) for k in layers_mod.KINDS] == [True, False, True, False, False]


def test_exclude_wins_over_layers_and_kinds():
    s = _sel("# comment\nlayers = 0-9  # trailing\nkinds = csa,fused\nexclude_layers = 3, 5-6\n\n")
    assert s.selects(LayerInfo(2, "csa")) and s.selects(LayerInfo(9, "fused"))
    assert not s.selects(LayerInfo(3, "csa"))
    assert not s.selects(LayerInfo(6, "fused"))
    assert not s.selects(LayerInfo(2, "hca"))
    assert not s.selects(LayerInfo(10, "csa"))
    assert "layers=0-9" in s.describe() and "exclude_layers=3,5-6" in s.describe()


def test_exclude_alone_keeps_every_other_layer():
    s = _sel("exclude_layers = 1\n")
    assert s.selects(LayerInfo(0, "hca")) and s.selects(LayerInfo(60, "indexer"))
    assert not s.selects(LayerInfo(1, "csa"))


def test_no_file_and_no_layer_context_select_everything(tmp_path):
    s = layers_mod.load(None)
    assert s.selects(LayerInfo(42, "fused")) and s.selects(None)
    # A layer file opts in only the compressor layers it selects: a call with no layer is on none.
    assert not _sel("layers = 1").selects(None) and not _sel("kinds = hca, csa, indexer, fused, v41").selects(None)


@pytest.mark.parametrize("ratio, indexer, fused, kind", [
    (4, False, False, "csa"), (128, False, False, "hca"), (4, True, False, "indexer"),
    (4, False, True, "fused"), (4, True, True, "fused"),
])
def test_layer_info_of_compressor_kinds(ratio, indexer, fused, kind):
    assert LayerInfo.of_compressor(7, ratio, indexer, fused) == LayerInfo(7, kind)


@pytest.mark.parametrize("text, line, words", [
    ("layers = 1\nlayer_ids = 2\n", 2, "unknown key 'layer_ids'"),
    ("# x\n\nlayers = 5-2\n", 3, "bad range '5-2'"),
    ("layers = 1, x\n", 1, "'x' is not a layer id"),
    ("layers = a\n", 1, "'a' is not a layer id"),
    ("layers = -3\n", 1, "'-3' is not a layer id"),
    ("layers = 1-\n", 1, "'1-' is not a layer id"),
    ("layers = 3-\n", 1, "'3-' is not a layer id"),
    ("layers = +3\n", 1, "'+3' is not a layer id"),
    ("layers = 1.5\n", 1, "'1.5' is not a layer id"),
    ("layers = 1-2-3\n", 1, "'1-2-3' is not a layer id"),
    ("layers = 1 2\n", 1, "'1 2' is not a layer id"),
    ("layers = \u0663\n", 1, "is not a layer id"),  # an Arabic-Indic three: ASCII digits only
    ("layers = " + "9" * 19 + "\n", 1, "layer id too large"),
    ("layers = 1,,2\n", 1, "empty item in '1,,2'"),
    ("layers = 1,\n", 1, "empty item in '1,'"),
    ("layers = ,1\n", 1, "empty item in ',1'"),
    ("layers =\n", 1, "empty list"),
    ("layers =   # nothing\n", 1, "empty list"),
    ("layers = 1\nexclude_layers = ,\n", 2, "empty item"),
    ("layers = 1\nexclude_layers =\n", 2, "empty list"),
    ("kinds = hca, mla\n", 1, "unknown kind(s) mla"),
    ("kinds = ,\n", 1, "empty item"),
    ("kinds = hca,,csa\n", 1, "empty item"),
    ("kinds =\n", 1, "empty list"),
    ("layers = 1\nkinds = hca\nlayers = 2\n", 3, "'layers' given twice"),
    ("LAYERS = 1\nlayers = 2\n", 2, "'layers' given twice"),
    ("layers 1-3\n", 1, "expected 'key = value'"),
])
def test_bad_layer_file_errors_name_file_and_line(tmp_path, text, line, words):
    p = tmp_path / "sel.txt"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        layers_mod.load(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert words in msg, msg


def test_missing_directory_and_undecodable_layer_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.txt: layer file not found"):
        layers_mod.load(str(tmp_path / "nope.txt"))
    with pytest.raises(ConfigError, match=rf"^{tmp_path}: layer file is a directory, not a regular file$"):
        layers_mod.load(str(tmp_path))
    bad = tmp_path / "bin.txt"
    bad.write_bytes(b"# ok\nlayers = 1\xff\xfe\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:2: layer file is not UTF-8 text \(byte 0xff at offset 15\)$"):
        layers_mod.load(str(bad))


def test_fifo_layer_file_is_an_error_not_a_hang(tmp_path):
    import os
    import threading

    fifo = tmp_path / "layers.fifo"
    os.mkfifo(fifo)
    got: list[BaseException] = []
    t = threading.Thread(target=lambda: got.append(_catch(lambda: layers_mod.load(str(fifo)))), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # release the blocked reader, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO layer file blocked")
    assert isinstance(got[0], ConfigError), got
    assert str(got[0]) == f"{fifo}: layer file is a FIFO (named pipe), not a regular file"


def _catch(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - handed to the test thread
        return e
    return None


def test_layer_file_with_bom_and_crlf_is_read(tmp_path):
    p = tmp_path / "sel.txt"
    p.write_bytes("\ufefflayers = 1-3\r\nkinds = hca\r\n".encode("utf-8"))
    s = layers_mod.load(str(p))
    assert s.layers.intervals == ((1, 3),) and s.kinds == frozenset({"hca"})


def test_layer_file_from_environment_reaches_the_router(tmp_path, monkeypatch, make_bf16):
    p = tmp_path / "sel.txt"
    p.write_text("layers = 3\n")
    monkeypatch.setenv(S.LAYERS_VAR, str(p))
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    s = S.reload()
    assert s.layers_path == str(p)
    from fakes.fake_backends import FAKE_KERNEL
    from sglang_fp32gemm import config as config_mod

    fake = ExactFake()
    # The selection the plugin's loader reads from the environment's file; the fake's table and backend.
    r = make_router([fake], shapes=[(4, 32, 64)], selection=config_mod.load().selection)
    x, w = make_bf16(4, 64), make_bf16(32, 64)
    r.call(x, w, LayerInfo(2, "hca"))
    r.call(x, w, LayerInfo(3, "hca"))
    assert r.config.selection.source == str(p)
    assert r.counters() == {("torch", "layer not selected"): 1, ("fake", FAKE_KERNEL): 1}


def test_bad_layer_file_at_run_time_disables_with_the_file_line(tmp_path, monkeypatch, caplog, make_bf16):
    p = tmp_path / "sel.txt"
    p.write_text("kinds = hca\nbogus = 1\n")
    monkeypatch.setenv(S.LAYERS_VAR, str(p))
    monkeypatch.setenv(S.ENABLE_VAR, "on")
    S.reload()
    r = routing.reset_router()
    x, w = make_bf16(2, 64), make_bf16(16, 64)
    with caplog.at_level(logging.ERROR):
        out = routing.linear_bf16_fp32(x, w)
    assert torch.equal(out, torch.mm(x.float(), w.float().t()))
    assert not r.enabled and f"{p}:2" in r.error
    assert any(f"{p}:2" in rec.getMessage() for rec in caplog.records)


def test_enabled_settings_helper_is_really_enabled():
    # Guards the fakes: a router built by make_router must be on.
    assert enabled_settings().enabled and make_router([]).enabled


def test_layer_selection_built_from_plain_id_sets_keeps_ranges():
    s = LayerSelection(layers=frozenset({1, 2, 3, 9}), kinds={"hca"}, exclude=frozenset({2}))
    assert s.layers == IdRanges(((9, 9), (1, 3))) and s.exclude.intervals == ((2, 2),)
    assert [i for i in range(12) if s.selects(LayerInfo(i, "hca"))] == [1, 3, 9]
    assert s.describe().endswith("layers=1-3,9 kinds=hca exclude_layers=2")
    with pytest.raises(ValueError):
        IdRanges(((5, 2),))
