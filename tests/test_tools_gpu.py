"""The tools' CUDA paths on a real NVIDIA GPU, with torch-based fake backends (skipped elsewhere).

The fake backends run cuBLAS, the same kernel as the torch column, so their
times must agree with torch's within noise: that, and the bandwidth floor,
is what the timing assertions check.

What the CPU tests cannot reach: CUDA-graph timing of calls and of a whole
decode step, eager wall-time loops, the exactness check with synchronisation,
the spawned precompile workers. Small shapes: a few seconds in all.
"""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
import torch

from sglang_fp32gemm.backends.base import OK, Backend
from sglang_fp32gemm.table import parse_csv
from sglang_fp32gemm.tools import bench, common, precompile, timing, tune

cuda = pytest.mark.skipif(not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
                          reason="needs an NVIDIA GPU")


@dataclasses.dataclass(frozen=True)
class Cfg:
    name: str
    pdl: bool = False  # a config field, as cutedsl's: bench adds a "+pdl" decode column for it


class TorchFake(Backend):
    """cuBLAS under a backend's interface; ``rounded`` rounds to bf16 (the tuner must reject it)."""

    def __init__(self, name: str, rounded: bool = False):
        self.name, self.libtype, self.rounded = name, "triton", rounded

    def available(self):
        return OK

    def parse(self, kernel_name):
        if not kernel_name.startswith(self.name):
            raise ValueError(kernel_name)
        return Cfg(kernel_name.removesuffix("_pdl"), kernel_name.endswith("_pdl"))

    def kernel_name(self, cfg):
        return cfg.name + ("_pdl" if cfg.pdl else "")

    def deterministic(self, cfg):
        return True

    def supports(self, cfg, m, n, k):
        return OK

    def candidates(self, m, n, k):
        return [Cfg(f"{self.name}_a"), Cfg(f"{self.name}_b")]

    def bind(self, cfg, device, n, k):
        rounded = self.rounded

        def fn(x, w):
            out = torch.mm(x, w.t(), out_dtype=torch.float32)
            return out.bfloat16().float() if rounded else out

        return fn


@pytest.fixture
def plain_router(monkeypatch):
    from sglang_fp32gemm import backends as B

    monkeypatch.setattr(B, "default_backends", lambda: {})
    monkeypatch.setattr(B, "all_backends", lambda: [], raising=False)


@cuda
def test_tune_times_and_gates_on_the_gpu(tmp_path, plain_router):
    args = tune.parser().parse_args(["--m", "1", "16", "--n", "512", "--k", "4096", "--workers", "0",
                                     "--out", str(tmp_path / "t.csv"), "--log", str(tmp_path / "log.jsonl")])
    args.device_key = None
    good, bad = TorchFake("good"), TorchFake("bad", rounded=True)
    assert tune.run(args, backends=[good, bad], device=torch.device("cuda")) == 0
    recs = list(common.read_jsonl(str(tmp_path / "log.jsonl")))
    finals = [r for r in recs if r.get("phase") == "final" and r.get("status") == "ok"]
    assert finals and all(r["backend"] == "good" and r["rel_err"] < 1e-5 for r in finals)
    assert all(r["status"] == "rejected" for r in recs if r.get("backend") == "bad" and r.get("phase") == "check")
    torch_final = {r["M"]: r["us"] for r in recs if r.get("event") == "torch" and r["phase"] == "final"}
    assert sorted(torch_final) == [1, 16]
    for r in finals:  # the same cuBLAS kernel as torch, timed the same way: the same time within noise
        assert timing.floor_us(r["M"], 512, 4096, 5.0) < r["us"] < 50
        assert abs(r["us"] - torch_final[r["M"]]) <= 0.25 * torch_final[r["M"]], (r, torch_final)
    parse_csv((tmp_path / "t.csv").read_text(), "t.csv")  # cuBLAS against cuBLAS: rows or none, but valid


@cuda
@pytest.mark.parametrize("rank,setting", [("chain", "chain"), ("region", "region:flash:overlapped")])
def test_tune_rank_on_the_gpu(tmp_path, plain_router, rank, setting):
    """--rank chain/region: the finalists' per-call cost where SGLang runs them is logged and ranks the pick."""
    args = tune.parser().parse_args(["--m", "4", "--n", "512", "--k", "4096", "--workers", "0", "--rank", rank,
                                     "--out", str(tmp_path / "t.csv"), "--log", str(tmp_path / "log.jsonl")])
    args.device_key = None
    assert tune.run(args, backends=[TorchFake("good")], device=torch.device("cuda")) == 0
    recs = list(common.read_jsonl(str(tmp_path / "log.jsonl")))
    ranked = [r for r in recs if r.get("phase") == rank and r.get("status") == "ok"]
    torch_ranked = [r for r in recs if r.get("event") == "torch" and r.get("phase") == rank]
    assert len(ranked) == 2 and len(torch_ranked) == 1
    assert {r["setting"] for r in ranked + torch_ranked} == {setting}
    for r in ranked:  # cuBLAS there adds about what torch's cuBLAS adds (overlapped it may hide it all)
        assert r["us"] < 50 and (rank == "region" or r["us"] > 0) and r["isolated_us"] > 0 and len(r["rounds"]) == 3
        assert abs(r["us"] - torch_ranked[0]["us"]) <= 0.3 * torch_ranked[0]["us"] + 0.5, (r, torch_ranked)


class TorchPairFake(TorchFake):
    """With a pair form: cuBLAS twice (``rounded``: both rounded, the gate must reject it)."""

    def bind_pair(self, cfg, device, n, n2, k):
        one = self.bind(cfg, device, n, k)
        return lambda x, w1, w2: (one(x, w1), one(x, w2))


@cuda
def test_tune_pair_on_the_gpu(tmp_path, plain_router):
    """--pair: V4-Flash's pair (512 + 2048 at K=4096) ranked in its serial schedule; cuBLAS twice adds about what
    torch's two calls add, and the pair table names the kernel."""
    out = tmp_path / "t_pair.csv"
    args = tune.parser().parse_args(["--m", "4", "--k", "4096", "--workers", "0", "--rank", "serial", "--pair",
                                     "--out", str(out), "--log", str(tmp_path / "log.jsonl")])
    args.device_key = None
    assert tune.run(args, backends=[TorchPairFake("good"), TorchPairFake("bad", rounded=True), TorchFake("single")],
                    device=torch.device("cuda")) == 0
    recs = list(common.read_jsonl(str(tmp_path / "log.jsonl")))
    assert {r["backend"] for r in recs if r.get("event") == "candidate"} == {"good", "bad"}
    assert all(r["status"] == "rejected" for r in recs if r.get("backend") == "bad" and r.get("phase") == "check")
    ranked = [r for r in recs if r.get("phase") == "serial" and r.get("status") == "ok"]
    torch_ranked = [r for r in recs if r.get("event") == "torch" and r.get("phase") == "serial"]
    assert len(ranked) == 2 and len(torch_ranked) == 1 and all(r["N"] == 2560 for r in ranked)
    assert {r["setting"] for r in ranked + torch_ranked} == {"region:flash:serial:pair"}
    for r in ranked:
        assert 0 < r["us"] < 100 and r["isolated_us"] > 0
        assert abs(r["us"] - torch_ranked[0]["us"]) <= 0.3 * torch_ranked[0]["us"] + 0.5, (r, torch_ranked)
    rows = parse_csv(out.read_text(), str(out))
    assert [(r.M, r.N, r.K) for r in rows] in ([], [(4, 2560, 4096)])  # cuBLAS against cuBLAS: a row or a torch row


@cuda
def test_bench_every_mode_on_the_gpu(tmp_path, plain_router):
    out = tmp_path / "b"
    argv = ["--graph", "--deterministic", "--eager", "--decode-seq", "--m", "1,16", "--n", "512", "--k", "4096",
            "--det-m", "1", "--det-k", "4096", "--seq-k", "4096", "--eager-m", "1", "--eager-n", "512",
            "--eager-calls", "50", "--eager-runs", "2", "--decode-m", "4", "--decode-n", "512", "--layers", "4",
            "--no-peer", "--workers", "0", "--out-dir", str(out)]
    assert bench.main(argv, backends=[TorchFake("cols")]) == 0
    g = json.load(open(out / "bench.json"))["results"]
    for r in g:
        # No backend in the router: routed is torch, and "cols" is cuBLAS too: three times of one kernel.
        us = r["us"]
        assert set(us) == {"torch", "routed", "cols"} and r["route"] == "torch"
        assert all(timing.floor_us(r["M"], 512, 4096, 5.0) < v < 50 for v in us.values()), us
        assert max(us.values()) - min(us.values()) <= 0.25 * statistics.median(us.values()), us
        assert all(e < 1e-5 for e in r["rel_err"].values()) and all(r["allclose"].values())
    det = json.load(open(out / "bench_det.json"))["results"][0]
    assert det["repeatable"]["routed"] is True
    eager = json.load(open(out / "bench_eager.json"))["results"]
    # The fallback path is a hook and a route lookup in Python: about 1 us of host time, not tens. Only the
    # upper bound: a difference of two wall times goes far below zero when other processes share the GPU
    # (run 37c, the suite with 8 workers: -53.9 us); the benchmark's target line checks the 1 us.
    assert eager[1]["kind"] == "fallback" and eager[1]["added_us"] < 10, eager[1]
    dec = json.load(open(out / "bench_decode.json"))["results"][0]
    add = dec["add_per_layer_us"]
    assert set(add) == {"torch", "routed", "cols", "cols+pdl"} and dec["kernel"]["cols+pdl"] == "cols_a_pdl"
    # Each variant adds one cuBLAS call per layer: more than nothing, at most an isolated call's time
    # twice over (its weights may sit in L2 here), and the four agree within noise.
    iso = next(r["us"]["torch"] for r in g if r["M"] == 1)
    assert all(0.2 < v < 2 * iso for v in add.values()), (add, iso)
    assert max(add.values()) - min(add.values()) <= max(1.0, 0.25 * statistics.median(add.values())), add
    assert all(e < 1e-5 for e in dec["rel_err"].values()) and all(dec["allclose"].values())


@cuda
def test_precompile_workers_report_failures_without_stopping():
    got = precompile.precompile([("no-such-backend", "k", 1, 512, 4096)], workers=2)
    assert got["jobs"] == 1 and got["done"] == 1 and got["failed"] == 1


@cuda
def test_joint_times_every_subset_of_the_routed_shapes_on_the_gpu(tmp_path):
    from sglang_fp32gemm.table import TunedTables
    from sglang_fp32gemm.tools import joint

    out, eager, js = tmp_path / "j.csv", tmp_path / "j_eager.csv", tmp_path / "j.json"
    argv = ["--model", "flash", "--m", "1", "--rounds", "1", "--replays", "3", "--out", str(out),
            "--out-eager", str(eager), "--json", str(js)]
    assert joint.main(argv) == 0
    rec = json.load(open(js))["results"][0]
    assert rec["schedule"] == "overlapped" and len(rec["added_per_layer_us"]) == 2 ** len(rec["routed"])
    # 43 layers' worth of GEMMs: each subset adds something, and less than a millisecond per layer
    assert all(0 < v < 1000 for v in rec["added_per_layer_us"].values()), rec
    assert set(rec["kept"]) | set(rec["dropped"]) == {int(n) for n in rec["routed"]}
    t = TunedTables.load([str(out), str(eager)])  # what it wrote loads as a fast and an eager table
    mine = [r for r in t.fast.rows() if r.source.startswith(str(out))]
    assert sorted(r.N for r in mine) == sorted(rec["dropped"]) and all(r.libtype == "torch" for r in mine)
