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
from sglang_fp32gemm.layers import LayerInfo, LayerSelection


# -- the enable variable --------------------------------------------------------
@pytest.mark.parametrize("value", ["1", "true", "TRUE", "True", "on", "ON", "oN", " yes ", "tRuE"])
def test_enable_var_true_spellings_enable(monkeypatch, value):
    monkeypatch.setenv(S.ENABLE_VAR, value)
    s = S.reload()
    assert s.enabled is True and s.enabled_source == "env"


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "False", "off", "OFF", "Off", "no"])
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


@pytest.mark.parametrize("value", ["2", "enable", "tru", "yess", "1.0", "-1"])
def test_bad_enable_value_raises_config_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(S.ENABLE_VAR, value)
    with pytest.raises(ConfigError) as e:
        S.reload()
    assert S.ENABLE_VAR in str(e.value) and repr(value) in str(e.value)


def test_flag_source_is_reported_only_with_the_value(monkeypatch):
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    monkeypatch.setenv(S.SOURCE_VAR, "flag")
    assert S.reload().enabled_source == "flag"


def test_settings_are_cached_until_reload(monkeypatch):
    assert S.get().enabled is False
    monkeypatch.setenv(S.ENABLE_VAR, "1")
    assert S.get().enabled is False
    assert S.reload().enabled is True and S.get().enabled is True


def test_bad_deterministic_value_names_its_variable(monkeypatch):
    monkeypatch.setenv(S.DETERMINISTIC_VAR, "sometimes")
    with pytest.raises(ConfigError, match=S.DETERMINISTIC_VAR):
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
    assert s.layers == frozenset({0, 1, 2, 3, 7, 10, 11})
    for i in range(15):
        assert s.selects(LayerInfo(i, "hca")) is (i in s.layers)


def test_kinds_select_only_those_kinds():
    s = _sel("kinds = HCA, indexer\n")
    assert s.kinds == frozenset({"hca", "indexer"})
    assert [s.selects(LayerInfo(5, k)) for k in layers_mod.KINDS] == [True, False, True, False]


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
    assert _sel("layers = 1").selects(None)  # plain linear_bf16_fp32 callers follow the table


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
    ("layers = -3\n", 1, "'-3' is not a layer id"),
    ("layers = 1-\n", 1, "'1-' is not a layer id"),
    ("layers = 1\nexclude_layers = ,\n", 2, "empty list"),
    ("kinds = hca, mla\n", 1, "unknown kind(s) mla"),
    ("kinds = ,\n", 1, "unknown kind(s) (none)"),
    ("layers = 1\nkinds = hca\nlayers = 2\n", 3, "'layers' given twice"),
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


def test_missing_and_unreadable_layer_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.txt: layer file not found"):
        layers_mod.load(str(tmp_path / "nope.txt"))
    with pytest.raises(ConfigError, match="unreadable"):
        layers_mod.load(str(tmp_path))
    bad = tmp_path / "bin.txt"
    bad.write_bytes(b"layers = 1\xff\xfe\n")
    with pytest.raises(ConfigError, match="bin.txt: layer file unreadable"):
        layers_mod.load(str(bad))


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
