"""Rows for one GPU model (``gfx`` = ``ARCH-MODEL``, e.g. ``sm90-h200``): the H100 and the H200 share sm90 and
132 SMs, so only the device name tells them apart (run 34: rows that win on one lose on the other)."""

from __future__ import annotations

import types

import pytest

from fakes.fake_backends import rows_csv
from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.table import DeviceKey, TunedTable, TunedTables, device_key, gpu_model, parse_csv

K = 7168
SM90 = DeviceKey("sm90", 132)
H200 = DeviceKey("sm90", 132, "h200")
H100 = DeviceKey("sm90", 132, "h100")


def _rows(shapes, gfx, kernel, name="t.csv"):
    return parse_csv(rows_csv(shapes, gfx=gfx, cu_num=132, kernel=kernel), name)


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200 NVL", "h200"),
    ("NVIDIA H800", "h800"), ("NVIDIA H20", "h20"), ("NVIDIA A100-SXM4-80GB", "a100"), ("Tesla V100-SXM2-16GB", "v100"),
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA GeForce RTX 4090", ""), ("", ""), ("NVIDIA", "")])
def test_gpu_model_is_the_names_product_token(name, model):
    assert gpu_model(name) == model


def test_device_key_of_a_cuda_device_carries_its_model(monkeypatch):
    import torch

    props = types.SimpleNamespace(major=9, minor=0, multi_processor_count=132, name="NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    monkeypatch.setattr(torch.version, "hip", None)
    key = device_key(torch.device("cuda", 0))
    assert key == H200 and str(key) == "sm90-h200:132"
    props.name = "NVIDIA H100 80GB HBM3"
    assert device_key(torch.device("cuda", 0)) == H100


def test_device_key_on_rocm_keeps_the_arch_alone(monkeypatch):
    """gfx950 names the chip already; ROCm keys carry no model."""
    import torch

    props = types.SimpleNamespace(gcnArchName="gfx950:sramecc+:xnack-", multi_processor_count=256,
                                  name="AMD Instinct MI355X", major=9, minor=5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    monkeypatch.setattr(torch.version, "hip", "7.0")
    assert device_key(torch.device("cuda", 0)) == DeviceKey("gfx950", 256)
    assert device_key(torch.device("cpu")) is None


@pytest.mark.parametrize("text, key", [("sm90-h200:132", H200), (" SM90-H200:132 ", H200), ("sm90:132", SM90)])
def test_device_key_parse_takes_a_model(text, key):
    assert DeviceKey.parse(text) == key and DeviceKey.parse(str(key)) == key


@pytest.mark.parametrize("text", ["sm90-:132", "sm90-200:132", "sm90_h200:132", "sm90-h200-x:132", "-h200:132"])
def test_device_key_parse_rejects_a_malformed_model(text):
    with pytest.raises(ConfigError, match="expected ARCH:COUNT"):
        DeviceKey.parse(text)


@pytest.mark.parametrize("gfx", ["sm90-", "sm90_h200", "sm90-H200", "sm90-200", "h200-sm90"])
def test_a_malformed_model_column_names_file_and_line(gfx):
    text = rows_csv([(1, 1024, K)], gfx=gfx, cu_num=132)
    with pytest.raises(ConfigError, match=rf"^t\.csv:2: column 'gfx' is '{gfx}', which no device has"):
        parse_csv(text, "t.csv")


def test_a_models_row_serves_that_model_only():
    generic = _rows([(1, 1024, K), (16, 1024, K)], "sm90", "generic")
    h200 = _rows([(1, 1024, K)], "sm90-h200", "h200_only")
    t = TunedTable([("a.csv", h200 + generic)])  # the model's row first in the file: it still wins for its model
    assert t.lookup(H200, 1, 1024, K).kernelName == "h200_only"
    assert t.lookup(SM90, 1, 1024, K).kernelName == "generic"
    assert t.lookup(H100, 1, 1024, K).kernelName == "generic"
    # Where the model has no row, it reads the generic one, M bucketing included.
    assert t.lookup(H200, 3, 1024, K).M == 16 and t.lookup(H200, 16, 1024, K).kernelName == "generic"
    assert [r.gfx for r in t.rows()] == ["sm90", "sm90"]  # the merged rows are the generic ones
    assert t.ms(H200, 1024, K) == t.ms(SM90, 1024, K) == [1, 16]


def test_a_model_row_alone_at_its_m_changes_only_that_models_bucketing():
    t = TunedTable([("a.csv", _rows([(16, 1024, K)], "sm90", "generic") + _rows([(2, 1024, K)], "sm90-h200", "h"))])
    assert t.lookup(H200, 2, 1024, K).kernelName == "h" and t.lookup(SM90, 2, 1024, K).M == 16
    assert t.ms(H200, 1024, K) == [2, 16] and t.ms(SM90, 1024, K) == [16]


def test_a_later_files_generic_row_beats_an_earlier_files_model_row(tmp_path):
    """The serial files lie over the fast ones and a user's files over the packaged ones, models or not: a fast
    row for the H200 must not serve calls outside the multi-stream region where a serial row exists."""
    fast = tmp_path / "mine.csv"
    fast.write_text(rows_csv([(1, 1024, K)], gfx="sm90-h200", cu_num=132, libtype="torch", kernel=""))
    serial = tmp_path / "mine_serial.csv"
    serial.write_text(rows_csv([(1, 1024, K)], gfx="sm90", cu_num=132, libtype="torch", kernel=""))
    t = TunedTables.load([str(fast), str(serial)])
    assert t.fast.lookup(H200, 1, 1024, K).source == f"{fast}:2"
    assert t.outside.lookup(H200, 1, 1024, K).source == f"{serial}:2"
    assert t.fast.lookup(H100, 1, 1024, K).source.startswith("configs/sm90.csv:")


def test_every_packaged_model_row_has_a_generic_row_of_its_shape():
    """A model's rows refine the generic table; every other sm90 GPU still needs a route at each shape."""
    t = TunedTables.load([])
    for table in (t.fast, t.deterministic, t.eager, t.serial, t.pair):
        for r in table.every_row():
            if "-" in r.gfx:
                arch, _, model = r.gfx.partition("-")
                plain = table.lookup(DeviceKey(arch, r.cu_num), r.M, r.N, r.K)
                assert plain is not None and plain.M == r.M and "-" not in plain.gfx, r.source
                assert table.lookup(DeviceKey(arch, r.cu_num, model), r.M, r.N, r.K) is r, r.source


def test_the_packaged_h200_rows_reach_the_h200_and_not_the_h100():
    """Run 34: the region tune's M=1 rows (34g) and the isolated N=2048 rows (34d) won A/Bs on an H200 and lost
    or tied on an H100 (34h)."""
    cfg = config_mod.load({"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1"})
    h200_rows = [r for r in cfg.table.every_row() + cfg.serial_table.every_row() if r.gfx == "sm90-h200"]
    assert h200_rows, "configs/ ship H200 rows"
    for r in h200_rows:
        table = cfg.table if r in cfg.table.every_row() else cfg.serial_table
        assert table.lookup(H200, r.M, r.N, r.K) is r
        other = table.lookup(H100, r.M, r.N, r.K)
        assert other is not None and other.gfx == "sm90"


def test_the_packaged_h100_rows_reach_the_h100_and_not_the_h200():
    """Run 35a: the serial M=4 N=1024 row as the dot kernel without PDL beat the shipped Triton row in both
    whole-step A/B pairs on an H100 by more than twice the A/A gap (35e); not yet measured on an H200, which keeps
    the generic row."""
    t = TunedTables.load([])
    h100_rows = [r for r in t.serial.every_row() if r.gfx == "sm90-h100"]
    assert [(r.M, r.N, r.K, r.kernelName) for r in h100_rows] == [(4, 1024, K, "cutedsl_dot_m4_t224_r2_bx")]
    for r in h100_rows:
        assert "_pdl" not in r.kernelName and r.source.startswith("configs/sm90_serial.csv:")
        assert t.outside.lookup(H100, r.M, r.N, r.K) is r
        other = t.outside.lookup(H200, r.M, r.N, r.K)
        assert other.gfx == "sm90" and other is t.outside.lookup(DeviceKey("sm90", 132), r.M, r.N, r.K)
    # Inside the multi-stream region the H100 reads the fast table, as before.
    assert t.fast.lookup(H100, 4, 1024, K).gfx == "sm90"


def test_the_h200s_overlapped_rows_never_serve_its_calls_outside_the_region():
    """34g's M=1 rows were ranked beside the other streams; outside SGLang's multi-stream region (serial steps,
    calls alone) the H200 must keep reading the serial table's rows of those shapes."""
    t = TunedTables.load([])
    for n in (512, 1024):
        fast = t.fast.lookup(H200, 1, n, K)
        assert fast.gfx == "sm90-h200" and fast.source.startswith("configs/sm90.csv:")
        outside = t.outside.lookup(H200, 1, n, K)
        assert outside.gfx == "sm90" and outside.source.startswith("configs/sm90_serial.csv:")
        assert outside is t.outside.lookup(DeviceKey("sm90", 132), 1, n, K)


def test_explain_counts_the_model_rows_and_shows_the_h200s_routes(capsys):
    from sglang_fp32gemm.__main__ import main

    assert main(["explain", "--device-key", "sm90-h200:132", "--max-m", "1"]) == 0
    h200 = capsys.readouterr().out
    assert "rows for one GPU model: sm90-h100 (1), sm90-h200 (4), read only on a GPU of that model" in h200
    assert "device key: sm90-h200:132" in h200
    assert "cutedsl_dot_m1_t448_r1_pdl_lw_mb1 (row configs/sm90.csv:" in h200
    assert main(["explain", "--device-key", "sm90:132", "--max-m", "1"]) == 0
    plain = capsys.readouterr().out
    assert "cutedsl_dot_m1_t448_r1_pdl_lw_mb1" not in plain and "sm90-h100 (1), sm90-h200 (4)" in plain
