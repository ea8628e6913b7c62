"""``bench --region`` on a real NVIDIA GPU (skipped elsewhere): the side streams, their events and
joins captured in one CUDA graph; every fp32 output exact after replay; the routed calls counted
at capture on the kernels the tables name. The tiny model, and V4-Flash overlapped at M=1
(its real shapes, so the routed calls run the tables' kernels on the side streams): seconds.
"""

from __future__ import annotations

import json

import pytest
import torch

from sglang_fp32gemm.tools import bench

cuda = pytest.mark.skipif(not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
                          reason="needs an NVIDIA GPU")


@cuda
@pytest.mark.parametrize("model, ms, schedules, capture", [("tiny", "1,4", "overlapped,serial", "private"),
                                                             ("tiny", "1,4", "overlapped", "sglang"),
                                                             ("flash", "1", "overlapped", "private")])
def test_region_captures_every_schedule_exactly_and_routes_as_the_table_says(tmp_path, model, ms, schedules, capture):
    """In both capture settings: ``private`` (a fresh stream and memory pool per graph) and ``sglang`` (one
    capture stream and one shared memory pool for every graph, as SGLang's graph runner)."""
    argv = ["--region", "--region-model", model, "--region-m", ms, "--region-schedule", schedules,
            "--region-replays", "5", "--region-rounds", "2", "--no-region-peer", "--workers", "0",
            "--capture", capture, "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[]) == 0
    doc = json.load(open(tmp_path / "bench_region.json"))
    assert doc["capture"] == capture
    rs = doc["results"]
    assert len(rs) == len(ms.split(",")) * len(schedules.split(","))
    for r in rs:
        assert set(r["step_us"]) == {"none", "torch", "routed"}, r["note"]
        assert all(r["allclose"].values()) and max(r["rel_err"].values()) <= 1e-5
        assert r["route_check"]["ok"], r["route_check"]
        assert sum(r["route_check"]["counted"].values()) == {"tiny": 3, "flash": 62}[model]
        assert r["step_us"]["none"] > 0
        assert all(len(ts) == 2 for ts in r["rounds_step_us"].values()), r["rounds_step_us"]


@cuda
def test_the_timer_returns_the_replay_after_refresh():
    """``refresh`` gives the graph's input new values before one more replay: the outputs are those of the
    new values (bench --region checks them, so that a kernel the graph does not hold shows as wrong)."""
    from sglang_fp32gemm.tools import timing

    x = torch.randn(4, 256, device="cuda").bfloat16()
    w = torch.randn(128, 256, device="cuda").bfloat16()
    fresh = torch.randn_like(x)
    for capture in timing.CAPTURES:
        x.copy_(torch.randn_like(x))
        us, outs = timing.CudaTimer(capture).step(lambda: [timing.torch_mm(x, w)], 3,
                                                  refresh=lambda: x.copy_(fresh))
        assert us > 0 and torch.equal(outs[0], timing.torch_mm(fresh, w))
