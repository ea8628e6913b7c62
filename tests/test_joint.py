"""``joint`` on CPU: the subset choice, the rows it writes, and one run over the tiny region model.

No GPU: streams are no-ops, and a fake timer prices each fp32 output by whether the routed
fake kernel or torch made it, so the right choice is known in advance.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch

from fakes.fake_backends import FAKE_KERNEL, ExactFake, make_router
from sglang_fp32gemm import __main__ as cli
from sglang_fp32gemm import routing
from sglang_fp32gemm.tools import joint, region

TINY = region.MODELS["tiny"]  # fp32 shapes (64, 64) x2 and (128, 64) x1 per step, 3 layers


def test_subsets_start_with_all_torch_and_cover_every_combination():
    assert joint.subsets([2048, 512]) == [frozenset(), frozenset({512}), frozenset({2048}), frozenset({512, 2048})]
    assert joint.subsets([]) == [frozenset()]


@pytest.mark.parametrize("added, kept", [
    ({(): 5.0, (1,): 4.0, (2,): 6.0, (1, 2): 4.5}, (1,)),      # the fastest subset
    ({(): 5.0, (1,): 4.0, (2,): 4.0, (1, 2): 4.0}, (1,)),      # a tie: fewer kernels, then the first
    ({(): 5.0, (1,): 4.95, (2,): 6.0, (1, 2): 7.0}, ()),       # within --min-gain of torch: torch
    ({(): 5.0, (1,): 9.9, (2,): 8.0, (1, 2): 9.0}, ()),        # every kernel loses: torch
])
def test_choose_keeps_kernels_only_where_they_beat_all_torch_by_the_min_gain(added, kept):
    assert joint.choose({frozenset(k): v for k, v in added.items()}, 0.02) == frozenset(kept)


class PricedTimer:
    """Runs the step once; 100 us plus, per fp32 output, the fake kernel's price for its N or torch's 4 us."""

    def __init__(self, fake: ExactFake, fake_us: dict[int, float]):
        self.fake, self.fake_us, self.steps = fake, fake_us, 0

    def step(self, step, replays=20, before_capture=None, refresh=None):
        self.steps += 1
        if before_capture is not None:  # as CudaTimer: after the (here skipped) eager warm-up
            before_capture()
        if refresh is not None:  # the outputs of a replay after fresh inputs
            refresh()
        before = len(self.fake.shapes)
        outs = step()
        by_fake = [n for _, n, _ in self.fake.shapes[before:]]
        us = 100.0 + sum(self.fake_us[n] for n in by_fake)
        us += sum(4.0 for o in outs) - 4.0 * len(by_fake)
        return us, outs


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_joint_drops_the_kernel_that_loses_in_the_step_and_keeps_its_eager_calls(tmp_path, monkeypatch, capsys):
    fake = ExactFake()
    shapes = [(m, n, k) for m in (1, 2) for n, k in region.fp32_shapes(TINY)]
    monkeypatch.setattr(routing, "build_router", lambda: make_router([fake], shapes=shapes))
    timer = PricedTimer(fake, {64: 1.0, 128: 9.0})  # N=64 wins, N=128 loses
    out, eager, js = tmp_path / "j.csv", tmp_path / "j_eager.csv", tmp_path / "j.json"
    argv = ["--model", "tiny", "--m", "1,2", "--rounds", "2", "--out", str(out), "--out-eager", str(eager),
            "--json", str(js)]
    assert joint.main(argv, device=torch.device("cpu"), timer=timer) == 0
    assert timer.steps == 2 * 2 * 5  # M values x rounds x (no fp32 GEMMs + 4 subsets)
    rows = _rows(out)
    assert [(r["M"], r["N"], r["K"], r["libtype"], r["kernelName"]) for r in rows] == [
        ("1", "128", "64", "torch", ""), ("2", "128", "64", "torch", "")]
    assert [(r["M"], r["N"], r["libtype"], r["kernelName"]) for r in _rows(eager)] == [
        ("1", "128", "triton", FAKE_KERNEL), ("2", "128", "triton", FAKE_KERNEL)]
    rec = json.load(open(js))["results"][0]
    # per layer: torch 3 x 4 / 3 = 4; N=64 alone 2 x 1 + 4 = 6 / 3; N=128 alone 8 + 9 = 17 / 3
    assert rec["added_per_layer_us"] == {"torch": 4.0, "64": 2.0, "128": 5.667, "64+128": 3.667}
    assert rec["kept"] == [64] and rec["dropped"] == [128] and rec["routed"] == {"64": FAKE_KERNEL, "128": FAKE_KERNEL}
    assert float(rows[0]["us"]) == 4.0  # torch's time per call in the step
    assert "kept 64 2.00; torch rows for N=128" in capsys.readouterr().out
    from sglang_fp32gemm.table import TunedTables

    t = TunedTables.load([str(out), str(eager)])  # the files load as a fast and an eager table
    assert [(r.M, r.libtype) for r in t.fast.rows() if r.source.startswith(str(out))] == [(1, "torch"), (2, "torch")]
    assert [(r.M, r.kernelName) for r in t.eager.rows() if r.source.startswith(str(eager))] == [
        (1, FAKE_KERNEL), (2, FAKE_KERNEL)]


def test_joint_writes_no_rows_where_the_routed_step_wins(tmp_path, monkeypatch):
    fake = ExactFake()
    shapes = [(1, n, k) for n, k in region.fp32_shapes(TINY)]
    monkeypatch.setattr(routing, "build_router", lambda: make_router([fake], shapes=shapes))
    out = tmp_path / "j.csv"
    argv = ["--model", "tiny", "--m", "1", "--rounds", "1", "--out", str(out)]
    assert joint.main(argv, device=torch.device("cpu"), timer=PricedTimer(fake, {64: 1.0, 128: 1.0})) == 0
    assert _rows(out) == []


def test_joint_is_a_command_and_rejects_an_unknown_model(capsys):
    assert cli.main(["joint", "--model", "ultra", "--out", "x.csv"]) == 2
    assert "unknown model ultra" in capsys.readouterr().err


def _joint_at_m1(tmp_path, monkeypatch, fake, timer) -> dict:
    """``joint`` on tiny at M=1 (one round), the fast table routing both its shapes to ``fake``: its record."""
    shapes = [(1, n, k) for n, k in region.fp32_shapes(TINY)]
    monkeypatch.setattr(routing, "build_router", lambda: make_router([fake], shapes=shapes))
    js = tmp_path / "j.json"
    argv = ["--model", "tiny", "--m", "1", "--rounds", "1", "--out", str(tmp_path / "j.csv"), "--json", str(js)]
    assert joint.main(argv, device=torch.device("cpu"), timer=timer) == 0
    return json.load(open(js))["results"][0]


def test_a_subset_whose_captured_calls_fell_back_is_never_kept(tmp_path, monkeypatch, capsys):
    from fakes.fake_backends import splitk_fp32
    from sglang_fp32gemm.backends import probe as probe_mod
    from sglang_fp32gemm.backends.base import NotReadyInCapture

    class NotReadyAt128(ExactFake):
        """Passes its probe, then every N=128 call meets a stream without its buffers (H200 run 13a)."""

        def compute(self, cfg, x, w):
            if w.shape[0] == 128 and self.kernel_runs[cfg.name] > probe_mod.TRIALS * 2:
                raise NotReadyInCapture("buffers missing for this stream (fake)")
            return splitk_fp32(x, w)

    fake = NotReadyAt128()
    # Priced as if N=128's kernel were free: only the fallback check keeps it out.
    rec = _joint_at_m1(tmp_path, monkeypatch, fake, PricedTimer(fake, {64: 1.0, 128: 0.0}))
    assert sorted(rec["fallbacks"]) == ["128", "64+128"], rec["fallbacks"]
    assert rec["kept"] == [64] and rec["dropped"] == [128]
    assert "FELL BACK (not kept)" in capsys.readouterr().out


def test_a_subset_whose_calls_the_graph_did_not_run_is_never_kept(tmp_path, monkeypatch, capsys):
    """N=128's kernel computes from the first x it saw (as one launched outside the capture, run once at capture
    time): after x gets fresh values its output is wrong, and a subset holding it is not kept, however fast."""
    from fakes.fake_backends import splitk_fp32

    class FirstXAt128(ExactFake):
        def compute(self, cfg, x, w):
            if w.shape[0] == 128:
                x = self.first.setdefault(id(x), (x, x.clone()))[1]
            return splitk_fp32(x, w)

    class CaptureThenReplay(PricedTimer):
        """The step once as the capture (priced), then, after ``refresh``, once more as the checked replay."""

        def step(self, step, replays=20, before_capture=None, refresh=None):
            us, outs = super().step(step, replays, before_capture)
            if refresh is not None:
                refresh()
                outs = step()
            return us, outs

    fake = FirstXAt128()
    fake.first = {}
    rec = _joint_at_m1(tmp_path, monkeypatch, fake, CaptureThenReplay(fake, {64: 1.0, 128: 0.0}))
    assert sorted(rec["stale"]) == ["128", "64+128"], rec["stale"]
    assert rec["kept"] == [64] and rec["dropped"] == [128]
    assert "NOT RUN IN THE GRAPH (not kept): 128, 64+128" in capsys.readouterr().out
