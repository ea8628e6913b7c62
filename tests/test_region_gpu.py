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
