"""The device A/B's tools (docs/benchmarks/h200/run29/): ``ab_verdict.py``'s shipping rule, A ships only where it
beats B in both pairs by more than the margin run 35e's A/A measured twice over; ``changed_rows.py``, what a tune
changed, read against what the tuned device routes."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

H200_DIR = pathlib.Path(__file__).resolve().parents[1] / "docs/benchmarks/h200"


def _script(name: str):
    """One of run 29's scripts, imported fresh (ab_verdict.py reads its margin from the environment at import)."""
    spec = importlib.util.spec_from_file_location(name, H200_DIR / f"run29/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(monkeypatch, margin: str | None):
    if margin is None:
        monkeypatch.delenv("AB_MIN_MARGIN_US", raising=False)
    else:
        monkeypatch.setenv("AB_MIN_MARGIN_US", margin)
    return _script("ab_verdict")


def _write(ab_dir: pathlib.Path, routed: dict[str, float], exact: bool = True) -> None:
    for run, us in routed.items():
        d = ab_dir / run
        d.mkdir(parents=True)
        result = {"model": "pro", "schedule": "serial", "M": 4,
                  "add_per_layer_us": {"routed": us, "torch": 17.0},
                  "allclose": {"routed": exact}, "route_check": {"ok": True}}
        (d / "bench_region.json").write_text(json.dumps({"results": [result]}))


# 35e (an A/A: the same tables both sides), 35a (M=4 N=1024), 35b (V4-Flash M=1), 35d (V4-Pro M=1 N=1024).
@pytest.mark.parametrize("routed, ships", [
    ({"A1": 10.573, "B1": 10.698, "A2": 10.524, "B2": 10.702}, False),
    ({"A1": 11.571, "B1": 12.003, "A2": 11.5, "B2": 12.055}, True),
    ({"A1": 6.493, "B1": 6.826, "A2": 6.463, "B2": 6.698}, False),
    ({"A1": 10.292, "B1": 10.499, "A2": 10.217, "B2": 10.61}, False),
])
def test_a_ships_only_past_twice_the_aa_gap_in_both_pairs(tmp_path, monkeypatch, capsys, routed, ships):
    mod = _load(monkeypatch, None)
    assert mod.MIN_MARGIN_US == pytest.approx(0.36)
    _write(tmp_path, routed)
    assert mod.main(str(tmp_path)) == (0 if ships else 1)
    line = capsys.readouterr().out
    assert line.startswith("ship" if ships else "keep") and "B - A " in line


def test_the_margin_can_be_set_and_exactness_still_decides(tmp_path, monkeypatch, capsys):
    aa = {"A1": 10.573, "B1": 10.698, "A2": 10.524, "B2": 10.702}
    mod = _load(monkeypatch, "0")  # the rule before run 35: any win in both pairs
    _write(tmp_path / "a", aa)
    assert mod.main(str(tmp_path / "a")) == 0
    _write(tmp_path / "b", {"A1": 9.0, "B1": 12.0, "A2": 9.0, "B2": 12.0}, exact=False)
    assert mod.main(str(tmp_path / "b")) == 1
    assert "a result not exact" in capsys.readouterr().out


def test_a_pick_the_device_already_routes_is_no_change(tmp_path, capsys):
    """Run 35e: the serial tune's pick at M=2 N=1024 was the H100's own row (then in configs/), while the generic
    row differs; compared with the generic rows alone it looked changed, and the A/B ran the same kernels on both
    sides. With the tune's summary ("shipped": what the device routed) it is no change."""
    mod = _script("changed_rows")
    tune = H200_DIR / "run35/35e_h100_serial_tune_m2_n1024/s_tune"
    shipped = tmp_path / "sm90_serial.csv"  # the generic row of that shape, as configs/ has it
    shipped.write_text("gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName\n"
                       "sm90,132,2,1024,7168,False,torch.bfloat16,torch.float32,False,False,cutedsl,0,0,,"
                       "cutedsl_dot_m2_t896_r2_pdl_ls_bx\n")
    assert mod.device_routes(str(tune / "summary.json")) == {("2", "1024", "7168"): "cutedsl_dot_m2_t896_r2_bx"}
    assert mod.main(str(shipped), str(tune / "s_serial.csv"), str(tmp_path / "a.csv"), kernels_only=True) == 0
    assert mod.main(str(shipped), str(tune / "s_serial.csv"), str(tmp_path / "b.csv"), kernels_only=True,
                    summary=str(tune / "summary.json")) == 1
    assert "no A/B" in capsys.readouterr().out.splitlines()[-1]
    # 35d: the pick differs from what that H100 routed too; still a change.
    tune = H200_DIR / "run35/35d_h100_serial_tune_m1_n1024/s_tune"
    assert mod.main(str(H200_DIR.parents[2] / "configs/sm90_serial.csv"), str(tune / "s_serial.csv"),
                    str(tmp_path / "c.csv"), kernels_only=True, summary=str(tune / "summary.json")) == 0
