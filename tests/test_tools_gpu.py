"""The tools' CUDA paths on a real NVIDIA GPU, with torch-based fake backends (skipped elsewhere).

What the CPU tests cannot reach: CUDA-graph timing of calls and of a whole
decode step, eager wall-time loops, the exactness check with synchronisation,
the spawned precompile workers. Small shapes: a few seconds in all.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from sglang_fp32gemm.backends.base import OK, Backend
from sglang_fp32gemm.table import parse_csv
from sglang_fp32gemm.tools import bench, common, tune

cuda = pytest.mark.skipif(not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
                          reason="needs an NVIDIA GPU")


@dataclasses.dataclass(frozen=True)
class Cfg:
    name: str


class TorchFake(Backend):
    """cuBLAS under a backend's interface; ``rounded`` rounds to bf16 (the tuner must reject it)."""

    def __init__(self, name: str, rounded: bool = False, pdl: bool = False):
        self.name, self.libtype, self.rounded, self.pdl = name, "triton", rounded, pdl

    def available(self):
        return OK

    def parse(self, kernel_name):
        if not kernel_name.startswith(self.name):
            raise ValueError(kernel_name)
        return Cfg(kernel_name)

    def deterministic(self, cfg):
        return True

    def supports(self, cfg, m, n, k):
        return OK

    def candidates(self, m, n, k):
        return [Cfg(f"{self.name}_a"), Cfg(f"{self.name}_b")]

    def bind(self, cfg, device, n, k, **kw):
        if kw and not self.pdl:
            raise TypeError("no pdl")
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
    assert finals and all(r["backend"] == "good" and 0.5 < r["us"] < 500 and r["rel_err"] < 1e-5 for r in finals)
    assert all(r["status"] == "rejected" for r in recs if r.get("backend") == "bad" and r.get("phase") == "check")
    torch_us = [r["us"] for r in recs if r.get("event") == "torch"]
    assert torch_us and all(0.5 < u < 500 for u in torch_us)
    parse_csv((tmp_path / "t.csv").read_text(), "t.csv")  # cuBLAS against cuBLAS: rows or none, but valid


@cuda
def test_bench_every_mode_on_the_gpu(tmp_path, plain_router):
    out = tmp_path / "b"
    argv = ["--graph", "--deterministic", "--eager", "--decode-seq", "--m", "1,16", "--n", "512", "--k", "4096",
            "--det-m", "1", "--det-k", "4096", "--seq-k", "4096", "--eager-m", "1", "--eager-n", "512",
            "--eager-calls", "50", "--eager-runs", "2", "--decode-m", "4", "--decode-n", "512", "--layers", "4",
            "--workers", "0", "--out-dir", str(out)]
    assert bench.main(argv, backends=[TorchFake("cols", pdl=True)]) == 0
    g = json.load(open(out / "bench.json"))["results"]
    for r in g:
        assert set(r["us"]) == {"torch", "routed", "cols"} and all(0.5 < v < 500 for v in r["us"].values())
        assert all(e < 1e-5 for e in r["rel_err"].values()) and all(r["allclose"].values())
    det = json.load(open(out / "bench_det.json"))["results"][0]
    assert det["repeatable"]["routed"] is True
    eager = json.load(open(out / "bench_eager.json"))["results"]
    assert eager[1]["kind"] == "fallback" and abs(eager[1]["added_us"]) < 100
    dec = json.load(open(out / "bench_decode.json"))["results"][0]
    assert set(dec["add_per_layer_us"]) == {"torch", "routed", "cols", "cols+pdl"}
    assert all(0 < v < 100 for v in dec["add_per_layer_us"].values())
    assert all(e < 1e-5 for e in dec["rel_err"].values()) and all(dec["allclose"].values())


@cuda
def test_precompile_workers_report_failures_without_stopping():
    got = tune.precompile([("no-such-backend", "k", 1, 512, 4096)], workers=2)
    assert got["jobs"] == 1 and got["done"] == 1 and got["failed"] == 1
