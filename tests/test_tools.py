"""The tuner, bench and targets tools on CPU: buckets, rows, logs, the targets check.

Fake backends and a fake timer stand in for kernels and CUDA graphs: the
fake timer calls each function once (so wrong results and exceptions
surface) and reports a time the test chose.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import os
import random
import time

import pytest
import torch

from sglang_fp32gemm.backends.base import OK, Backend
from sglang_fp32gemm.table import DeviceKey, TunedRow, TunedTable, format_rows, m_candidates, parse_csv
from sglang_fp32gemm import exactness
from sglang_fp32gemm.tools import (bench, buckets, cli, common, picks, region, stopping, targets, timing, tune,
                                    tune_rows, tuner)

KEY = DeviceKey("sm90", 132)
GRID = list(tune.M_DEFAULT)


# -- fakes ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Cfg:
    name: str
    split_k: int = 2

    @property
    def pdl(self) -> bool:
        return self.name.endswith("_pdl")


class FakeBackend(Backend):
    """Configs named in ``speeds``: {name: us}; behaviours by name prefix.

    ``bf16*``: rounds the result to bf16 (must be rejected); ``lowbad*``: wrong
    for M < 8; ``big*``: supports only M >= 9; ``flaky*``: claims determinism
    but adds a different tiny value each call.
    """

    def __init__(self, name: str, libtype: str, speeds: dict[str, float], det: bool = False, ok: bool = True):
        self.name, self.libtype = name, libtype
        self.speeds = dict(speeds)
        self.det = det
        self.ok = ok
        self.binds = 0
        self._calls = 0

    def available(self):
        return (True, "ok") if self.ok else (False, "no such library here")

    def parse(self, kernel_name: str):
        if kernel_name not in self.speeds:
            raise ValueError(f"{self.name}: unknown kernel {kernel_name!r}")
        return Cfg(kernel_name)

    def deterministic(self, cfg):
        return self.det

    def supports(self, cfg, m, n, k):
        if cfg.name.startswith("big") and m < 9:
            return False, "needs M >= 9"
        return OK

    def candidates(self, m, n, k):
        return [Cfg(name) for name in self.speeds]

    def bind(self, cfg, device, n, k):
        self.binds += 1
        name, us = cfg.name, self.speeds[cfg.name]

        def fn(x, w):
            out = x.float() @ w.float().t()
            if name.startswith("bf16"):
                out = out.bfloat16().float()
            if name.startswith("lowbad") and x.shape[0] < 8:
                out = out + 1.0
            if name.startswith("flaky"):  # exact, but the bits change from call to call
                self._calls += 1
                out[0, 0] = out[0, 0] + out[0, 0].abs() * 1e-6 * (self._calls % 2)
            return out

        fn.fake_us = us
        return fn


class FakeTimer:
    """Alone a call takes its fn's ``fake_us`` (torch: ``torch_us``); in a step each call adds ``step_call_us``."""

    def __init__(self, torch_us: float = 10.0, sleep: float = 0.0, step_call_us: float = 4.0):
        self.torch_us = torch_us
        self.sleep = sleep
        self.step_call_us = step_call_us
        self.per_call_calls = 0

    def per_call(self, fn, x, weights, replays=15):
        self.per_call_calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        out = fn(x, weights[0])
        assert out.shape == (x.shape[0], weights[0].shape[0])
        return getattr(fn, "fake_us", self.torch_us)

    def step(self, step, replays=20, refresh=None):
        if refresh is not None:  # the outputs of a replay after fresh inputs
            refresh()
        outs = step()
        return 100.0 + self.step_call_us * len(outs), outs

    def eager(self, fn, x, weights, calls=1000):
        fn(x, weights[0])
        return getattr(fn, "fake_us", self.torch_us) + 20.0, 20.0

    def weights(self, n, k, device):
        return [exactness.random_bf16(n, k, device=device) for _ in range(2)]


def tune_args(tmp_path, **over):
    args = tune.parser().parse_args([])
    args.device_key = KEY
    args.out = str(tmp_path / "sm90.csv")
    args.out_det = str(tmp_path / "sm90_deterministic.csv")
    args.summary = str(tmp_path / "summary.json")
    args.log = str(tmp_path / "tune_log.jsonl")
    args.workers = 0
    for k, v in over.items():
        setattr(args, k, v)
    return args


def log_lines(path):
    return list(common.read_jsonl(str(path)))


# -- buckets -------------------------------------------------------------------------
def test_grid_buckets_follow_aiters_lookup_order():
    b = buckets.grid_buckets(GRID)
    assert b[1] == [1] and b[2] == [2] and b[4] == [4] and b[8] == [8]
    assert b[16] == [3, 5, 6, 7] + list(range(9, 17))  # M=3 rounds up to 16 before the power of two
    assert b[32] == list(range(17, 33))
    assert b[48] == list(range(33, 49))
    assert b[64] == list(range(49, 65))
    assert b[96] == list(range(81, 97))
    assert b[128] == list(range(65, 81)) + list(range(97, 129))
    every = sorted(x for members in b.values() for x in members)
    assert every == list(range(1, 129))


def test_served_by_matches_the_table_lookup():
    for x in range(1, 200):
        got = buckets.served_by(x, GRID)
        expect = next((c for c in m_candidates(x) if c in GRID), None)
        assert got == expect


@pytest.mark.parametrize("fast,pins", [
    (set(GRID) - {48}, [48]),       # 33..48 would round up to the M=64 row
    (set(GRID) - {64}, []),         # 49..64 go to torch anyway
    (set(GRID) - {4}, [4]),         # M=4 would go to the M=16 row
    (set(GRID) - {16}, [16]),       # M=3 would go to the M=4 row, 5..7 to M=8
    (set(GRID) - {96}, [96]),       # 81..96 would round up to M=128
    (set(GRID) - {128}, []),
    (set(), []),
])
def test_torch_pins(fast, pins):
    assert buckets.torch_pins(GRID, fast) == pins


def test_with_pins_every_fast_row_serves_exactly_its_checked_bucket():
    rng = random.Random(1234)
    nominal = buckets.grid_buckets(GRID)
    for _ in range(300):
        fast = {m for m in GRID if rng.random() < 0.6}
        pins = buckets.torch_pins(GRID, fast)
        assert not set(pins) & fast
        present = fast | set(pins)
        for x in range(1, 257):
            r = buckets.served_by(x, present)
            if r in fast:
                assert x in nominal[r], (sorted(fast), pins, x, r)


def test_shape_order_puts_decode_sizes_and_the_first_k_first():
    order = buckets.shape_order([1, 64, 32], [1024, 512], [7168, 4096])
    assert order[:4] == [(1, 512, 7168), (32, 512, 7168), (1, 1024, 7168), (32, 1024, 7168)]
    assert order[4][2] == 4096 and all(m <= 32 for m, _, _ in order[:8])
    assert all(m == 64 for m, _, _ in order[8:])


# -- arguments -----------------------------------------------------------------------
def test_tune_defaults():
    a = tune.parser().parse_args([])
    assert a.m == [1, 2, 4, 8, 16, 32, 48, 64, 96, 128]
    assert a.n is None and a.k == [7168, 4096] and not a.pair  # N: common.N_DSV4, or with --pair the joined widths
    assert a.min_gain == 0.02 and tuner.parse_caps(a.max_per_backend) == {"cutedsl": 4} and a.rank == "isolated"
    a = tune.parser().parse_args(["--k", "4096", "--budget-s", "300", "--max-per-backend", "cutedsl=2", "x=1"])
    assert a.k == [4096] and a.budget_s == 300 and tuner.parse_caps(a.max_per_backend) == {"cutedsl": 2, "x": 1}
    with pytest.raises(ValueError):
        tuner.parse_caps(["cutedsl"])


def test_bench_arguments_and_m_ranges():
    a = bench.parser().parse_args([])
    assert a.m == list(range(1, 33)) + list(range(40, 129, 8))
    assert a.k == [7168, 4096] and a.det_m == list(range(1, 33)) and a.det_k == [7168]
    assert a.eager_m == [1, 8, 32] and a.decode_m == [1, 4, 8, 32] and a.layers == 61
    a = bench.parser().parse_args(["--m", "1-4,16", "--eager", "--decode-seq", "--peer-k", "7168"])
    assert a.m == [1, 2, 3, 4, 16] and a.eager and a.decode_seq and a.peer_k == [7168]
    assert cli.parse_ints("40-64:8,1") == [1, 40, 48, 56, 64]
    for bad in ("0-3", "5-2", "1-4:0"):
        with pytest.raises(ValueError):
            cli.parse_ints(bad)


# -- rows ----------------------------------------------------------------------------
def _pick(us, backend="fast", kernel="k_fast", det=False):
    return tune_rows.Pick(backend, "triton", kernel, us, 1e-6, 4, det)


def test_rows_round_trip_through_the_table_parser():
    results = [
        tune_rows.ShapeResult(1, 1024, 7168, 10.0, [1], _pick(7.0), _pick(8.0, "det", "k_det", True)),
        tune_rows.ShapeResult(2, 1024, 7168, 10.0, [2], _pick(9.9), _pick(9.81, "det", "k_det", True)),
        tune_rows.ShapeResult(16, 1024, 7168, 10.0, [3, 16], _pick(9.0), None),
    ]
    fast = tune_rows.build_rows(results, KEY, [1, 2, 16], 0.02, deterministic=False)
    det = tune_rows.build_rows(results, KEY, [1, 2, 16], 0.02, deterministic=True)
    # M=2: 9.9 us is only 1% under torch: no fast row; 9.81 * 1.02 = 10.006 > 10: no det row either.
    # Every tuned M torch won gets a torch row (else, laid over another table, that table's row
    # would serve it; here M=2 would also round up to the M=16 kernel).
    assert [(r.M, r.libtype, r.kernelName) for r in fast] == \
        [(1, "triton", "k_fast"), (2, "torch", ""), (16, "triton", "k_fast")]
    assert [(r.M, r.libtype, r.kernelName) for r in det] == [(1, "triton", "k_det"), (2, "torch", ""), (16, "torch", "")]
    for rows in (fast, det):
        back = parse_csv(format_rows(rows), "t.csv")
        assert [dataclasses.replace(r, source="") for r in back] == rows
    r = fast[0]
    assert (r.gfx, r.cu_num, r.N, r.K, r.dtype, r.outdtype, r.splitK, r.us) == \
        ("sm90", 132, 1024, 7168, "torch.bfloat16", "torch.float32", 4, 7.0)
    assert r.tflops == round(2 * 1 * 1024 * 7168 / 7.0 / 1e6, 3)


def test_a_dropped_row_that_would_leak_becomes_a_torch_pin():
    res = [tune_rows.ShapeResult(m, 512, 7168, 10.0, buckets.grid_buckets(GRID)[m], _pick(8.0 if m != 48 else 9.95), None)
           for m in GRID]
    rows = tune_rows.build_rows(res, KEY, GRID, 0.02, deterministic=False)
    pins = [r for r in rows if r.libtype == "torch"]
    assert [(r.M, r.kernelName, r.us) for r in pins] == [(48, "", 10.0)]
    assert parse_csv(format_rows(rows), "t.csv")[6].libtype == "torch"
    no_pin = tune_rows.build_rows(res, KEY, GRID, 0.02, deterministic=False, pin_torch=False)
    assert all(r.libtype == "triton" for r in no_pin) and len(no_pin) == len(GRID) - 1


def test_cutedsl_compile_count_covers_every_exact_m_served():
    def row(m, name):
        return TunedRow("sm90", 132, m, 1024, 7168, False, "torch.bfloat16", "torch.float32", False, False, "cutedsl",
                        0, 0, 1.0, name, 0.0, 0.0, 0.0)

    rows = [row(m, "cutedsl_warpsplitk_o16_t8_k256_s8_b1") for m in (1, 16, 32)]
    assert tune_rows.cutedsl_compiles(rows, GRID) == 1 + 12 + 16
    # The dot kernel compiles once per (N, K) when bound, whatever the M.
    assert tune_rows.cutedsl_compiles(rows + [row(2, "cutedsl_dot_m2_t128_r2_pdl")], GRID) == 1 + 12 + 16


# -- the tuner loop, on CPU ------------------------------------------------------------
def fakes():
    fast = FakeBackend("fast", "triton", {"bf16_fastest": 1.0, "lowbad_fast": 2.0, "big_only": 2.5,
                                          "plain_a": 4.0, "plain_b": 5.0})
    det = FakeBackend("det", "triton", {"flaky_det": 3.0, "det_a": 6.0, "det_b": 7.0}, det=True)
    gone = FakeBackend("gone", "cutedsl", {"never": 0.1}, ok=False)
    return fast, det, gone


def test_tuner_picks_the_fastest_exact_kernel_valid_for_its_whole_bucket(tmp_path, capsys):
    fast, det, gone = fakes()
    args = tune_args(tmp_path, m=[1, 2, 4, 8, 16, 32], n=[32, 64], k=[64, 128])
    assert tune.run(args, backends=[fast, det, gone], device=torch.device("cpu"), timer=FakeTimer(10.0)) == 0
    rows = {(r.M, r.N, r.K): r for r in parse_csv(open(args.out).read(), args.out)}
    drows = {(r.M, r.N, r.K): r for r in parse_csv(open(args.out_det).read(), args.out_det)}
    assert len(rows) == len(drows) == 6 * 2 * 2
    for (m, n, k), r in rows.items():
        # bf16_fastest is rejected (bf16 rounding); lowbad_fast is exact at M >= 8 only, so it may serve only
        # the rows whose bucket starts at 8 or above (not M=16: its bucket starts at 3); big_only takes M >= 9
        # only. flaky_det is exact but not repeatable: it stays a candidate for the fast table.
        if m in (8, 32):
            assert (r.kernelName, r.us) == ("lowbad_fast", 2.0), (m, r)
        else:
            assert (r.kernelName, r.us) == ("flaky_det", 3.0), (m, r)
        assert r.libtype == "triton"
    # flaky_det claims determinism but does not repeat: det_a (6 us) is the deterministic pick.
    assert {r.kernelName for r in drows.values()} == {"det_a"}
    recs = log_lines(args.log)
    assert any(r.get("kernel") == "bf16_fastest" and r.get("status") == "rejected" for r in recs)
    assert any(r.get("kernel") == "flaky_det" and r.get("status") == "not_repeatable" for r in recs)
    assert any(r.get("kernel") == "big_only" and r.get("status") == "unsupported" and r["M"] == 16 for r in recs)
    assert any(r.get("event") == "backend" and r["backend"] == "gone" and not r["available"] for r in recs)
    assert any(r.get("phase") == "verify M=3" and r.get("status") == "rejected" for r in recs)
    summary = json.load(open(args.summary))
    assert summary["stopped"] is None and summary["missing_shapes"] == [] and summary["rows"] == 24
    out = capsys.readouterr().out
    assert "UNAVAILABLE: no such library here" in out and "wrote 24 rows" in out


class CostedFakes:
    """For the ranks that time a step: a backend whose every call adds its config's cost to the step it
    runs in (alone plain_a is fastest, in a step plain_b adds least), torch adding 9, and a timer whose
    step takes 1000 + what its calls added (+ 50 on the step numbers in ``slow_steps``). On one stream a
    call cannot add much less than it takes alone (4 / 5 / 6 us, torch 10): no cost is below 0.85x that."""

    COST = {"plain_a": 9.0, "plain_b": 4.5, "plain_c": 7.0, "quick": 5.0}

    def __init__(self, only_w: tuple = (), slow_steps: tuple = (), torch_cost: float = 9.0):
        self.torch_cost = torch_cost
        self.added: list[float] = []
        self.steps: list[int] = []  # the fp32 outputs of each timed step
        fakes = self

        class Backend(FakeBackend):
            def bind(self, cfg, device, n, k):
                fn = super().bind(cfg, device, n, k)

                def run(x, w):
                    assert not only_w or tuple(w.shape) == only_w  # only the shape under test runs
                    fakes.added.append(fakes.COST[cfg.name])
                    return fn(x, w)

                run.fake_us = fn.fake_us
                return run

        class Timer(FakeTimer):
            def step(self, step, replays=20, refresh=None):
                if refresh is not None:  # the outputs of a replay after fresh inputs
                    refresh()
                fakes.added.clear()
                outs = step()
                fakes.steps.append(len(outs))
                return 1000.0 + sum(fakes.added) + (50.0 if len(fakes.steps) in slow_steps else 0.0), outs

        self.backend = Backend("fast", "triton", {"plain_a": 4.0, "plain_b": 5.0, "plain_c": 6.0})
        self.timer = Timer(10.0)

    def torch_fn(self, x, w):
        self.added.append(self.torch_cost)
        return x.float() @ w.float().t()


@pytest.mark.parametrize("rank,winner,us,torch_us", [("isolated", "plain_a", 4.0, 10.0), ("chain", "plain_b", 4.5, 9.0)])
def test_rank_chain_orders_the_finalists_by_what_they_add_to_the_serial_chain(tmp_path, rank, winner, us, torch_us):
    """Alone plain_a wins; in the chain (every layer: bf16 GEMM, the call, bf16 GEMM) plain_b adds least."""
    f = CostedFakes()
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, top=3, rank=rank, torch_fn=f.torch_fn)
    r = t.shape(8, 32, 64, [8], tuner.gather_candidates([f.backend], 8, 32, 64, [8], {}, log))
    assert (r.fast.kernel, r.fast.us, r.torch_us) == (winner, us, torch_us)
    chain = {x["kernel"]: (x["us"], x["isolated_us"]) for x in log_lines(tmp_path / "log.jsonl")
             if x.get("phase") == "chain" and "kernel" in x}
    assert chain == ({} if rank == "isolated" else {"plain_a": (9.0, 4.0), "plain_b": (4.5, 5.0), "plain_c": (7.0, 6.0)})
    with pytest.raises(ValueError, match="one of isolated, chain, region"):
        tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, rank="fastest")


@pytest.mark.parametrize("rank", ["isolated", "chain"])
def test_ranked_where_sglang_runs_it_each_backends_best_form_with_and_without_pdl_is_a_finalist(tmp_path, rank):
    """Alone, one backend's three PDL forms are fastest (replayed back to back, a PDL form overlaps its own
    launch); in the chain they add the most. With top=2, ranked in the chain the finalists still hold each
    backend's fastest form with and without PDL, and the plain form wins; ranked alone, only the top 2."""
    f = CostedFakes()
    f.COST = {"a_pdl": 9.0, "b_pdl": 9.0, "c_pdl": 9.0, "plain": 3.5, "o_pdl": 8.0, "o_plain": 6.0}
    fast = type(f.backend)("fast", "triton", {"a_pdl": 1.0, "b_pdl": 1.1, "c_pdl": 1.2, "plain": 4.0})
    other = type(f.backend)("other", "cutedsl", {"o_pdl": 2.0, "o_plain": 5.0})
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([fast, other], torch.device("cpu"), f.timer, log, top=2, rank=rank, torch_fn=f.torch_fn)
    r = t.shape(8, 32, 64, [8], tuner.gather_candidates([fast, other], 8, 32, 64, [8], {}, log))
    final = {x["kernel"] for x in log_lines(tmp_path / "log.jsonl") if x.get("phase") == "final" and "kernel" in x}
    if rank == "isolated":
        assert (r.fast.kernel, final) == ("a_pdl", {"a_pdl", "b_pdl"})
    else:
        assert (r.fast.kernel, r.fast.us) == ("plain", 3.5)
        assert final == {"a_pdl", "b_pdl", "plain", "o_pdl", "o_plain"}


@pytest.mark.parametrize("m,rank,schedule", [(8, "region", "overlapped"), (96, "region", "serial"),
                                             (8, "serial", "serial")])
def test_rank_region_times_the_finalists_in_the_region_model_of_the_shape(tmp_path, monkeypatch, m, rank, schedule):
    """The tiny model's N=128 GEMM (its one ratio-4 compressor): each finalist alone in that slot, the
    other fp32 GEMM (N=64) left out; one slow round (plain_b's first, the 4th step of 15) does not decide.
    --rank serial: the serial schedule at every M (what SGLang runs outside its multi-stream region)."""
    tiny = region.MODELS["tiny"]
    monkeypatch.setattr(region, "spec_for", lambda n, k: tiny if (n, k) == (128, 64) else None)
    f = CostedFakes(only_w=(128, 64), slow_steps=(4,))
    primed = []  # a serial setting comes after one overlapped capture (region.overlapped_first; CUDA only)
    monkeypatch.setattr(region, "overlapped_first", lambda timer, spec, *a: primed.append((timer, spec.name)))
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, top=3, rank=rank, torch_fn=f.torch_fn)
    r = t.shape(m, 128, 64, [m], tuner.gather_candidates([f.backend], m, 128, 64, [m], {}, log))
    assert (r.fast.kernel, r.fast.us, r.torch_us) == ("plain_b", 4.5, 9.0)
    assert primed == ([(f.timer, "tiny")] if schedule == "serial" else [])
    # 3 rounds of none, torch and the 3 finalists (1 call each), each round starting one later
    assert f.steps == [0, 1, 1, 1, 1] + [1, 1, 1, 1, 0] + [1, 1, 1, 0, 1]
    lines = log_lines(tmp_path / "log.jsonl")
    ranked = {x["kernel"]: (x["us"], x["setting"]) for x in lines if x.get("phase") == rank and "kernel" in x}
    assert ranked == {c: (CostedFakes.COST[c], f"region:tiny:{schedule}") for c in ("plain_a", "plain_b", "plain_c")}
    # no model has the shape: the chain ranks it
    t.shape(m, 32, 64, [m], tuner.gather_candidates([f.backend], m, 32, 64, [m], {}, log))
    torch_lines = [x for x in log_lines(tmp_path / "log.jsonl") if x.get("event") == "torch" and "setting" in x]
    assert torch_lines[-1]["setting"] == "chain"


@pytest.mark.parametrize("other,label", [("plain_c", "fast:plain_c"), ("bf16_other", "torch"), (None, "torch")])
def test_rank_region_runs_the_models_other_fp32_gemms_as_shipped_in_every_step(tmp_path, monkeypatch, other, label):
    """With ``others``, the tiny model's N=64 GEMM (2 calls a step) runs its shipped kernel in the base step and
    beside every finalist of the N=128 shape (1 call): what a finalist adds is still its own cost. A shipped
    kernel that fails the exactness gate, or a torch row (None), runs torch there."""
    monkeypatch.setattr(region, "spec_for", lambda n, k: region.MODELS["tiny"] if (n, k) == (128, 64) else None)
    f = CostedFakes()
    f.COST = {**CostedFakes.COST, "bf16_other": 1.0}
    backend = type(f.backend)("fast", "triton", {"plain_a": 4.0, "plain_b": 5.0, "plain_c": 6.0, "bf16_other": 9.0})
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    asked = []

    def others(m, n, k):
        asked.append((m, n, k))
        return None if other is None else tuner.Candidate(backend, Cfg(other), other, False)

    t = tuner.Tuner([backend], torch.device("cpu"), f.timer, log, top=3, rank="region", torch_fn=f.torch_fn,
                    others=others)
    cands = [c for c in tuner.gather_candidates([backend], 8, 128, 64, [8], {}, log) if c.kernel != "bf16_other"]
    r = t.shape(8, 128, 64, [8], cands)
    assert (r.fast.kernel, r.fast.us, r.torch_us) == ("plain_b", 4.5, 9.0)
    assert asked == [(8, 64, 64)]  # bound once a shape
    # 3 rounds of the base (the 2 N=64 calls), torch and the 3 finalists (2 + 1 outputs each)
    assert f.steps == [2, 3, 3, 3, 3] + [3, 3, 3, 3, 2] + [3, 3, 3, 2, 3]
    lines = log_lines(tmp_path / "log.jsonl")
    assert [x["others"] for x in lines if x.get("event") == "others"] == [{"64": label}]
    assert any(x.get("phase") == "other" and x.get("status") == "rejected" for x in lines) == (other == "bf16_other")


class PairFakes:
    """For ``--pair``: a backend with a pair form (``bind_pair``) whose one launch adds ``PAIR_COST`` to the
    serial step it runs in and takes ``ALONE`` alone (alone plain_a is fastest, in the step plain_b adds least);
    torch adds 9 a call there (18 a pair) and takes 10 a call alone. ``bf16_q`` rounds its products (the gate
    must reject it) and ``wide`` does not take the narrower width (never offered)."""

    ALONE = {"plain_a": 4.0, "plain_b": 5.0, "plain_c": 6.0, "bf16_q": 1.0, "wide": 1.0}
    PAIR_COST = {"plain_a": 12.0, "plain_b": 6.0, "plain_c": 8.0, "bf16_q": 1.0, "wide": 1.0}

    def __init__(self):
        self.added: list[float] = []  # what each call made in a step adds to it
        self.alone: list[float] = []  # what each call takes alone
        self.pair_binds: list[tuple] = []
        fakes = self

        class Backend(FakeBackend):
            def supports(self, cfg, m, n, k):
                return (False, "too narrow") if cfg.name == "wide" and n < 128 else OK

            def bind_pair(self, cfg, device, n, n2, k):
                fakes.pair_binds.append((cfg.name, n, n2, k))

                def pair(x, w1, w2):
                    assert (w1.shape[0], w2.shape[0]) == (n, n2)
                    fakes.added.append(fakes.PAIR_COST[cfg.name])
                    fakes.alone.append(fakes.ALONE[cfg.name])
                    outs = tuple(x.float() @ w.float().t() for w in (w1, w2))
                    return tuple(o.bfloat16().float() for o in outs) if cfg.name.startswith("bf16") else outs
                return pair

        class Timer(FakeTimer):
            def per_call(self, fn, x, weights, replays=15):
                fakes.alone.clear()
                out = fn(x, weights[0])
                assert [o.shape for o in out] == [(x.shape[0], 64), (x.shape[0], 128)]  # timed as one launch
                return sum(fakes.alone)

            def step(self, step, replays=20, refresh=None):
                if refresh is not None:
                    refresh()
                fakes.added.clear()
                outs = step()
                return 1000.0 + sum(fakes.added), outs

        self.backend = Backend("fast", "triton", self.ALONE)
        self.single = FakeBackend("single", "cutedsl", {"only_single": 1.0})  # no pair form: not offered
        self.timer = Timer()

    def torch_fn(self, x, w):
        self.added.append(9.0)
        self.alone.append(10.0)
        return x.float() @ w.float().t()


def tiny_pairs(monkeypatch):
    """The tiny model's ratio-4 layer pairs N=64 and N=128 at K=64 (joined 192), as V4-Pro's pairs 512 and 2048."""
    tiny = region.MODELS["tiny"]
    assert region.pair_widths(tiny) == (64, 128)
    monkeypatch.setattr(region, "pair_spec_for", lambda n, k: tiny if (n, k) == (192, 64) else None)


def test_rank_pairs_by_what_one_launch_of_both_adds_to_the_serial_schedule(tmp_path, monkeypatch):
    """--pair: the candidates are the pair forms at the joined width (the backend without one, the config that does
    not take both widths and the rounding one are not offered or rejected); each is timed alone as one launch, then
    as the tiny model's one ratio-4 layer's two GEMMs in the serial schedule, the other fp32 GEMM left out, against
    torch's two calls. plain_b adds least there (6 against torch's 18); the row names its single kernel."""
    tiny_pairs(monkeypatch)
    f = PairFakes()
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    forms = tuner.pair_forms([f.backend, f.single], 64, 128)
    assert [b.name for b in forms] == ["fast"]
    cands = tuner.gather_candidates(forms, 1, 192, 64, [1], {}, log)
    assert sorted(c.kernel for c in cands) == ["bf16_q", "plain_a", "plain_b", "plain_c"]
    t = tuner.Tuner(forms, torch.device("cpu"), f.timer, log, top=3, rank="serial", torch_fn=f.torch_fn, pair=True)
    primed = []  # the pair's model gets one overlapped capture before the shape is timed (CUDA only)
    monkeypatch.setattr(region, "overlapped_first", lambda timer, spec, *a: primed.append(spec.name))
    r = t.shape(1, 192, 64, [1], cands)
    assert primed == ["tiny"]
    assert (r.fast.backend, r.fast.kernel, r.fast.us, r.torch_us, r.torch_alone_us) == ("fast", "plain_b", 6.0, 18.0,
                                                                                        20.0)
    assert {b[1:] for b in f.pair_binds} == {(64, 128, 64)}
    lines = log_lines(tmp_path / "log.jsonl")
    assert {x["kernel"]: x["status"] for x in lines if x.get("phase") == "check"} == {"bf16_q": "rejected"}
    ranked = {x["kernel"]: (x["us"], x["isolated_us"], x["setting"]) for x in lines if x.get("phase") == "serial"
              and "kernel" in x}
    assert ranked == {c: (f.PAIR_COST[c], f.ALONE[c], "region:tiny:serial:pair") for c in ("plain_a", "plain_b",
                                                                                          "plain_c")}
    with pytest.raises(ValueError, match="serial schedule only"):
        tuner.Tuner(forms, torch.device("cpu"), f.timer, log, rank="region", pair=True)


def test_tune_pair_writes_the_pair_table_and_refuses_widths_no_model_pairs(tmp_path, monkeypatch, capsys):
    tiny_pairs(monkeypatch)
    f = PairFakes()
    args = tune_args(tmp_path, m=[1, 8], n=[192], k=[64], rank="serial", pair=True, out=None, out_det=None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(timing, "torch_fn", lambda device: f.torch_fn)
    assert tune.run(args, backends=[f.backend, f.single], device=torch.device("cpu"), timer=f.timer) == 0
    assert sorted(p.name for p in tmp_path.glob("*.csv")) == ["sm90_pair.csv"]
    rows = parse_csv(open(tmp_path / "sm90_pair.csv").read(), "sm90_pair.csv")
    assert [(r.M, r.N, r.K, r.libtype, r.kernelName) for r in rows] == [(1, 192, 64, "triton", "plain_b"),
                                                                       (8, 192, 64, "triton", "plain_b")]
    args = tune_args(tmp_path, m=[1], n=[128], k=[64], rank="serial", pair=True)
    assert tune.run(args, backends=[f.backend], device=torch.device("cpu"), timer=f.timer) == 2
    assert "no model's ratio-4 layer pairs" in capsys.readouterr().err
    assert region.joined_widths([7168, 4096]) == [2560] and region.joined_widths([5120]) == []
    with pytest.raises(SystemExit):
        tune.main(["--pair"])  # the serial schedule is where pairs run: --rank serial too
    assert "--rank serial" in capsys.readouterr().err


@pytest.mark.parametrize("rank,schedule", [("serial", "serial"), ("region", "overlapped")])
def test_a_one_stream_rank_below_the_weights_read_keeps_the_isolated_order(tmp_path, monkeypatch, rank, schedule):
    """On one stream no call can add less than reading its weight at the device's peak bandwidth takes (run 20:
    torch's N=2048 call added 4.65 us in the serial schedule against 6.0). Peak set so that the tiny N=128
    K=64 weight takes 5 us: in the serial schedule plain_b's 4.5 is below it, the rank is logged as suspect and
    the shape keeps its isolated order (plain_a, torch alone); beside other streams a call may add less than
    its read, and plain_b wins as before."""
    tiny = region.MODELS["tiny"]
    monkeypatch.setattr(region, "spec_for", lambda n, k: tiny if (n, k) == (128, 64) else None)
    monkeypatch.setattr(timing, "peak_bandwidth_tbs", lambda device: 128 * 64 * 2 / 5.0 / 1e6)
    f = CostedFakes(only_w=(128, 64))
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, top=3, rank=rank, torch_fn=f.torch_fn)
    r = t.shape(8, 128, 64, [8], tuner.gather_candidates([f.backend], 8, 128, 64, [8], {}, log))
    suspect = [x for x in log_lines(tmp_path / "log.jsonl") if x.get("event") == "rank_suspect"]
    if schedule == "serial":
        assert (r.fast.kernel, r.fast.us, r.torch_us) == ("plain_a", 4.0, 10.0)
        assert [(x["setting"], x["below"], x["floor_us"]) for x in suspect] == [
            ("region:tiny:serial", {"fast:plain_b": 4.5}, 5.0)]
    else:
        assert (r.fast.kernel, r.fast.us, r.torch_us) == ("plain_b", 4.5, 9.0) and suspect == []


@pytest.mark.parametrize("rank", ["serial", "chain"])
def test_a_one_stream_rank_where_a_call_adds_far_less_than_it_takes_alone_keeps_the_isolated_order(tmp_path,
                                                                                                   monkeypatch, rank):
    """Above its weight's read (no peak known here) but at 0.6x its 5 us alone, plain_b's 3.0 cannot be what one
    stream ran (run 20c2: PDL forms at 0.29-0.38x): the rank is suspect, the shape keeps its isolated order."""
    tiny = region.MODELS["tiny"]
    monkeypatch.setattr(region, "spec_for", lambda n, k: tiny if (n, k) == (128, 64) else None)
    monkeypatch.setattr(timing, "peak_bandwidth_tbs", lambda device: None)
    f = CostedFakes()
    f.COST = {**CostedFakes.COST, "plain_b": 3.0}
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, top=3, rank=rank, torch_fn=f.torch_fn)
    n = 128 if rank == "serial" else 32
    r = t.shape(8, n, 64, [8], tuner.gather_candidates([f.backend], 8, n, 64, [8], {}, log))
    assert (r.fast.kernel, r.fast.us, r.torch_us) == ("plain_a", 4.0, 10.0)
    suspect = [x for x in log_lines(tmp_path / "log.jsonl") if x.get("event") == "rank_suspect"]
    assert [(x["below"], x["alone"], x["floor_us"]) for x in suspect] == [({"fast:plain_b": 3.0}, {"fast:plain_b": 5.0},
                                                                           0.0)]


@pytest.mark.parametrize("stale,winner", [("plain_b", "plain_c"), ("torch", "plain_a")])
def test_a_rank_drops_calls_that_its_graph_did_not_run(tmp_path, stale, winner):
    """A call that computes from the x it first saw (as a kernel launched outside the capture: run once, at
    capture time) gives a wrong output once x gets fresh values before the checked replay. A finalist that
    does is dropped from the chain's rank (plain_b would win it: plain_c does); if torch does, nothing is
    ranked and the shape keeps its isolated order (plain_a)."""
    f = CostedFakes()
    first_seen: dict = {}  # id(x) -> (x, its first values); x kept alive so that no id is reused

    def from_the_first_x(fn):
        def run(x, w):
            return fn(first_seen.setdefault(id(x), (x, x.clone()))[1], w)
        run.fake_us = getattr(fn, "fake_us", None)
        return run

    torch_fn = from_the_first_x(f.torch_fn) if stale == "torch" else f.torch_fn
    if stale != "torch":
        bind = f.backend.bind
        f.backend.bind = lambda cfg, *a: from_the_first_x(bind(cfg, *a)) if cfg.name == stale else bind(cfg, *a)
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, top=3, rank="chain", torch_fn=torch_fn)
    r = t.shape(8, 32, 64, [8], tuner.gather_candidates([f.backend], 8, 32, 64, [8], {}, log))
    assert r.fast.kernel == winner
    errors = [x for x in log_lines(tmp_path / "log.jsonl") if x.get("phase") == "chain" and x.get("status") == "error"]
    assert errors and all(x["kernel"].endswith(stale) and "StaleOutputs" in x["error"] for x in errors), errors


def test_rank_region_offers_each_backends_lightest_launches(tmp_path, monkeypatch):
    """Alone a wide form (256 CTAs) is fastest; beside the other streams a light one (32 CTAs, slowest
    alone) adds least. With top=1 only the lightest-launch offering makes it a finalist, and it wins."""
    monkeypatch.setattr(region, "spec_for", lambda n, k: region.MODELS["tiny"] if (n, k) == (128, 64) else None)
    f = CostedFakes(only_w=(128, 64))
    f.COST = {**CostedFakes.COST, "wide": 9.5, "light": 1.0}
    lite = type(f.backend)("lite", "cutedsl", {"wide": 2.0, "light": 8.0})
    sizes = {"wide": 256, "light": 32}
    lite.ctas = lambda cfg, m, n, k: sizes[cfg.name]
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend, lite], torch.device("cpu"), f.timer, log, top=1, rank="region", torch_fn=f.torch_fn)
    r = t.shape(8, 128, 64, [8], tuner.gather_candidates([f.backend, lite], 8, 128, 64, [8], {}, log))
    assert (r.fast.backend, r.fast.kernel, r.fast.us) == ("lite", "light", 1.0)
    ranked = {x["kernel"] for x in log_lines(tmp_path / "log.jsonl") if x.get("phase") == "region" and "kernel" in x}
    # the fastest alone (wide), each backend's lightest (fast: one K split, so its fastest; lite: light)
    assert ranked == {"wide", "plain_a", "light"}


def test_eager_calls_get_the_fastest_eager_capable_kernel_alone_where_the_region_ranks_another(tmp_path, monkeypatch):
    """torch adds least in the region: the fast table's row is torch; the eager table's row is the
    fastest kernel alone whose backend launches cheaply outside a graph (not the slow-launch one)."""
    monkeypatch.setattr(region, "spec_for", lambda n, k: region.MODELS["tiny"])
    f = CostedFakes(torch_cost=2.0)
    slow_launch = type(f.backend)("slow", "cutedsl", {"quick": 1.0})
    slow_launch.eager_ok = False
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend, slow_launch], torch.device("cpu"), f.timer, log, top=3, rank="region",
                    torch_fn=f.torch_fn)
    r = t.shape(8, 128, 64, [8], tuner.gather_candidates([f.backend, slow_launch], 8, 128, 64, [8], {}, log))
    assert (r.fast.kernel, r.fast.us, r.torch_us) == ("plain_b", 4.5, 2.0)
    assert (r.eager.kernel, r.eager.us, r.torch_alone_us) == ("plain_a", 4.0, 10.0)
    assert [(x.M, x.libtype) for x in tune_rows.build_rows([r], KEY, [8], 0.02, False)] == [(8, "torch")]
    assert [(x.M, x.kernelName, x.us) for x in tune_rows.build_eager_rows([r], KEY, 0.02)] == [(8, "plain_a", 4.0)]
    # where the ranked winner (plain_b, 5 us alone) beats torch, eager calls get another kernel only where
    # it is faster alone by the minimum gain; the same kernel needs no eager row
    won = dataclasses.replace(r, torch_us=6.0)
    assert won.fast_alone_us == 5.0
    assert [(x.M, x.kernelName, x.us) for x in tune_rows.build_eager_rows([won], KEY, 0.02)] == [(8, "plain_a", 4.0)]
    assert tune_rows.build_eager_rows([dataclasses.replace(won, fast_alone_us=4.05)], KEY, 0.02) == []
    assert tune_rows.build_eager_rows([dataclasses.replace(won, fast_alone_us=0.0)], KEY, 0.02) == []
    assert tune_rows.build_eager_rows([dataclasses.replace(won, eager=won.fast)], KEY, 0.02) == []
    isolated = tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, top=3, torch_fn=f.torch_fn)
    assert isolated.shape(8, 128, 64, [8], tuner.gather_candidates([f.backend], 8, 128, 64, [8], {}, log)).eager is None


@pytest.mark.parametrize("rank", ["isolated", "chain"])
def test_tune_writes_the_eager_table_only_when_it_ranks_elsewhere(tmp_path, capsys, rank):
    """In the fake chain every call adds the same 10 us, torch's too (what torch takes alone; on one stream
    no call adds much less than it takes alone): torch rows; alone the fastest kernel exact over the M=8
    row's bucket (lowbad_fast is wrong below 8) is flaky_det at 3 us against torch's 10: the eager table's
    row. Ranked alone, there is no eager table."""
    fast, det, _ = fakes()
    args = tune_args(tmp_path, m=[8], n=[32], k=[64], rank=rank)
    timer = FakeTimer(10.0, step_call_us=10.0)
    assert tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=timer) == 0
    eager = tmp_path / "sm90_eager.csv"
    if rank == "isolated":
        assert not eager.exists() and "sm90_eager.csv" not in capsys.readouterr().out
        return
    assert [(r.M, r.libtype) for r in parse_csv(open(args.out).read(), args.out)] == [(8, "torch")]
    assert [(r.M, r.kernelName, r.us) for r in parse_csv(eager.read_text(), str(eager))] == [(8, "flaky_det", 3.0)]
    assert f"1 rows to {eager}" in capsys.readouterr().out
    assert json.load(open(args.summary))["shapes"][0]["eager"]["row"] is True


def test_tune_rank_serial_writes_only_the_serial_table_and_pins_no_unreached_m(tmp_path, capsys):
    """The serial table lies over the fast one: its rows are the shapes tuned (a torch row where torch
    won there), with no pins for grid M the budget did not reach, and no deterministic or eager table."""
    fast, det, _ = fakes()
    args = tune_args(tmp_path, m=[1, 8, 16], n=[32], k=[64], rank="serial", out=str(tmp_path / "sm90_serial.csv"),
                     out_det=None)
    timer = FakeTimer(2.05, step_call_us=8.0)  # no call adds less than it takes alone (at most 7 us)
    assert tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=timer) == 0
    # no model has (32, 64): the fake chain, where every call adds the same 8 us, torch's too: torch rows
    assert [(r.M, r.libtype) for r in parse_csv(open(args.out).read(), args.out)] == \
        [(1, "torch"), (8, "torch"), (16, "torch")]
    assert sorted(p.name for p in tmp_path.glob("*.csv")) == ["sm90_serial.csv"]
    assert "deterministic" not in capsys.readouterr().out.split("wrote")[-1]
    # M=16 not reached: the fast tune pins it (M 9-16 would round up to another row's kernel); the serial
    # table leaves the fast table's row there
    win = tune_rows.Pick("fast", "triton", "lowbad_fast", 1.0, 0.0, 2, False)
    reached = [tune_rows.ShapeResult(1, 32, 64, 2.0, [1], None, None),
               tune_rows.ShapeResult(8, 32, 64, 2.0, [8], win, None)]
    assert [r.M for r in tune_rows.build_rows(reached, KEY, [1, 8, 16], 0.02, False)] == [1, 8, 16]
    assert [r.M for r in tune_rows.build_rows(reached, KEY, [1, 8, 16], 0.02, False, pin_unreached=False)] == [1, 8]


def test_tune_serial_table_ranked_alone_writes_only_the_serial_table_against_its_shipped_rows(tmp_path, capsys):
    """--serial-table with --rank isolated (run 32: serial rows no serial step reads, ranked alone): the tune
    compares with the serial table's shipped rows, as calls outside the region read them, not the fast
    table's, and writes the serial file alone, as --rank serial does."""
    args = tune_args(tmp_path, rank="isolated", serial_table=True)
    # V4-Pro's M=16 N=2048: the fast table ships a half-wave grid that only overlapped calls take (run 31)
    fast_row = tune.shipped_table(tune_args(tmp_path)).lookup(KEY, 16, 2048, 7168)
    row = tune.shipped_table(args).lookup(KEY, 16, 2048, 7168)
    assert fast_row.source.startswith("configs/sm90.csv:") and row.source.startswith("configs/sm90_serial.csv:")
    assert row.kernelName != fast_row.kernelName
    fast, det, _ = fakes()
    args = tune_args(tmp_path, m=[1, 8], n=[32], k=[64], rank="isolated", serial_table=True,
                     out=str(tmp_path / "sm90_serial.csv"), out_det=None, vs_shipped=False)
    assert tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=FakeTimer(2.05)) == 0
    assert [r.M for r in parse_csv(open(args.out).read(), args.out)] == [1, 8]
    assert sorted(p.name for p in tmp_path.glob("*.csv")) == ["sm90_serial.csv"]
    assert "deterministic" not in capsys.readouterr().out.split("wrote")[-1]
    with pytest.raises(SystemExit):
        tune.main(["--rank", "serial", "--pair", "--serial-table"])
    assert "--pair writes the pair table, --serial-table the serial table" in capsys.readouterr().err


def test_the_shipped_rows_kernel_is_always_a_finalist_so_a_new_row_must_beat_it_in_the_rank(tmp_path):
    """Ranked in the chain with top=1, the finalists are plain_a (fastest alone) and nothing else, and it adds
    9 us there; the shipped row's kernel (plain_b, 4.5 in the chain) is a finalist too and keeps its row."""
    f = CostedFakes()
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    t = tuner.Tuner([f.backend], torch.device("cpu"), f.timer, log, top=1, rank="chain", torch_fn=f.torch_fn)
    cands = tuner.gather_candidates([f.backend], 8, 32, 64, [8], {}, log)
    alone = t.shape(8, 32, 64, [8], cands)
    assert (alone.fast.kernel, alone.fast.us, alone.shipped, alone.shipped_us) == ("plain_a", 9.0, None, None)
    plain_b = next(c for c in cands if c.kernel == "plain_b")
    # offered apart from the candidates (another backend's, or past --max-per-backend): screened, then ranked
    r = t.shape(8, 32, 64, [8], [c for c in cands if c is not plain_b], plain_b)
    assert (r.fast.kernel, r.fast.us, r.shipped, r.shipped_us) == ("plain_b", 4.5, "fast:plain_b", 4.5)


def shipped_rows(*rows: tuple) -> TunedTable:
    """A shipped table for the tune tests: (N, libtype, kernelName) rows at sm90:132, M=8, K=64."""
    return TunedTable([("shipped.csv", parse_csv(format_rows(
        [TunedRow("sm90", 132, 8, n, 64, False, "torch.bfloat16", "torch.float32", False, False, libtype, 0, 0, 1.0,
                  name, 0.0, 0.0, 0.0) for n, libtype, name in rows]), "shipped.csv"))])


def test_tune_times_the_shipped_kernel_of_each_shape_whichever_backend_serves_it(tmp_path, capsys):
    """--backends fast leaves det out, but the shipped table's row at M=8 N=32 names det's det_a: it is timed
    beside fast's candidates (6 us alone; fast's plain_a, 4 us, wins). A row naming a kernel no backend
    parses is logged; a torch row adds nothing (torch is always timed). --no-vs-shipped times none of them."""
    fast, det, _ = fakes()
    shipped = shipped_rows((32, "triton", "det_a"), (64, "triton", "no_such_kernel"), (96, "torch", ""))
    for vs in (True, False):
        args = tune_args(tmp_path, m=[8], n=[32, 64, 96], k=[64], backends=["fast"], vs_shipped=vs)
        assert tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=FakeTimer(10.0),
                        shipped=shipped if vs else None) == 0
        recs = {r["N"]: r for r in json.load(open(args.summary))["shapes"]}
        assert [recs[n]["fast"]["kernel"] for n in (32, 64, 96)] == ["plain_a"] * 3
        out = capsys.readouterr().out
        lines = log_lines(args.log)
        if vs:
            assert recs[32]["shipped"] == {"kernel": "det:det_a", "us": 6.0}
            assert "shipped" not in recs[64] and "shipped" not in recs[96]
            assert "| shipped det:det_a 6.00" in out
            assert [(x["N"], x["kernel"]) for x in lines if x.get("event") == "shipped"] == [(64, "no_such_kernel")]
        else:
            assert all("shipped" not in x for x in recs.values()) and "| shipped" not in out
            assert not any(x.get("kernel") == "det_a" for x in lines)


def test_tune_rank_region_runs_the_other_fp32_gemms_as_the_shipped_table_routes_them(tmp_path, monkeypatch):
    """tune --rank region on the tiny model's N=128 shape: its N=64 GEMM runs the shipped row's kernel (det's
    det_a, a backend --backends leaves out) in every step; --no-vs-shipped leaves it out."""
    monkeypatch.setattr(region, "spec_for", lambda n, k: region.MODELS["tiny"] if (n, k) == (128, 64) else None)
    fast, det, _ = fakes()
    shipped = shipped_rows((64, "triton", "det_a"))
    for vs in (True, False):
        args = tune_args(tmp_path, m=[8], n=[128], k=[64], backends=["fast"], rank="region", rounds=1, vs_shipped=vs)
        assert tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=FakeTimer(10.0),
                        shipped=shipped if vs else None) == 0
        assert [x["others"] for x in log_lines(args.log) if x.get("event") == "others"] == \
            ([{"64": "det:det_a"}] if vs else [])


def test_every_packaged_sm90_row_resolves_to_a_candidate_of_the_backend_that_serves_it(tmp_path):
    """What the tune times as the shipped row: each kernel of the packaged sm90 fast, serial (over fast) and
    pair tables parses back to itself in one of the real backends and serves every M its row serves."""
    from sglang_fp32gemm import backends as registry
    from sglang_fp32gemm.table import TunedTables

    every, tables = registry.all_backends(), TunedTables.load()
    log = common.JsonLog(str(tmp_path / "log.jsonl"))
    resolved = 0
    for table, pair in ((tables.fast, False), (tables.outside, False), (tables.pair, True)):
        rows = [r for r in table.rows() if r.gfx == "sm90"]
        for r in rows:
            if r.libtype == "torch":
                continue
            bucket = buckets.grid_buckets([x.M for x in rows if (x.N, x.K) == (r.N, r.K)])[r.M]
            pool = tuner.pair_forms(every, *region.pair_widths(region.pair_spec_for(r.N, r.K))) if pair else every
            c = tuner.shipped_candidate(r, pool, r.M, r.N, r.K, bucket, log)
            assert c is not None and c.kernel == r.kernelName, (r.source, r.kernelName)
            resolved += 1
    assert resolved > 100 and not log_lines(tmp_path / "log.jsonl")


def test_tuner_writes_a_torch_row_where_torch_wins(tmp_path):
    fast, det, _ = fakes()
    args = tune_args(tmp_path, m=[1, 8, 16], n=[32], k=[64])
    tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=FakeTimer(2.05))
    rows = parse_csv(open(args.out).read(), args.out)
    # M=8 (serving only 8 with this grid): lowbad_fast at 2.0 us beats 2.05 by 2.5%: a row. M=1: the best
    # exact kernel (flaky_det, 3.0 us) loses: a torch row. M=16 serves 2-7 and 9-16: lowbad_fast fails at
    # M=2, the rest lose to torch: a torch row (without it, M=5-7 would round up to the M=8 kernel).
    assert [(r.M, r.libtype, r.kernelName) for r in rows] == \
        [(1, "torch", ""), (8, "triton", "lowbad_fast"), (16, "torch", "")]
    assert [(r.M, r.libtype, r.us) for r in parse_csv(open(args.out_det).read(), args.out_det)] == \
        [(1, "torch", 2.05), (8, "torch", 2.05), (16, "torch", 2.05)]


class ClockedTimer(FakeTimer):
    """A FakeTimer on a fake monotonic clock: each timed candidate takes ``tick`` seconds of it, whatever the
    machine's load (a real sleep made the budget test depend on how busy the CPU was)."""

    def __init__(self, *a, tick: float, **kw):
        super().__init__(*a, **kw)
        self.tick = tick
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def per_call(self, fn, x, weights, replays=15):
        self.now += self.tick
        return super().per_call(fn, x, weights, replays)


def test_tuner_budget_stops_cleanly_and_keeps_finished_shapes(tmp_path, monkeypatch):
    fast, det, _ = fakes()
    args = tune_args(tmp_path, m=[1, 2, 4, 8], n=[32], k=[64], budget_s=0.25)
    timer = ClockedTimer(10.0, tick=0.01)
    monkeypatch.setattr(stopping, "time", timer)
    tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=timer)
    summary = json.load(open(args.summary))
    assert summary["stopped"] and summary["missing_shapes"] and summary["shapes"]
    done = {(s["M"], s["N"], s["K"]) for s in summary["shapes"]}
    rows = parse_csv(open(args.out).read(), args.out)
    assert {(r.M, r.N, r.K) for r in rows if r.libtype != "torch"} <= done
    assert log_lines(args.log)[-1]["event"] == "end"


def test_tuner_log_can_be_gzipped(tmp_path):
    fast, det, _ = fakes()
    args = tune_args(tmp_path, m=[4], n=[32], k=[64], log=str(tmp_path / "log.jsonl.gz"))
    tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=FakeTimer(10.0))
    with gzip.open(args.log, "rt") as f:
        assert any(json.loads(line).get("phase") == "final" for line in f)


# -- bench ---------------------------------------------------------------------------------
def test_picks_from_a_tune_log(tmp_path):
    fast, det, _ = fakes()
    path = tmp_path / "log.jsonl"
    lines = [
        {"m": 1, "n": 32, "cfg": "old-format", "us": 0.1},  # the previous tuner's lines are ignored
        {"event": "candidate", "phase": "screen", "status": "ok", "M": 16, "N": 32, "K": 64, "backend": "fast",
         "kernel": "plain_b", "us": 3.0},
        {"event": "candidate", "phase": "final", "status": "ok", "M": 16, "N": 32, "K": 64, "backend": "fast",
         "kernel": "plain_a", "us": 4.0},
        {"event": "candidate", "phase": "final", "status": "ok", "M": 16, "N": 32, "K": 64, "backend": "fast",
         "kernel": "plain_b", "us": 4.5},
        {"event": "candidate", "phase": "check", "status": "rejected", "M": 32, "N": 32, "K": 64, "backend": "fast",
         "kernel": "bf16_fastest"},
        {"event": "candidate", "phase": "final", "status": "ok", "M": 32, "N": 32, "K": 64, "backend": "fast",
         "kernel": "big_only", "us": 2.5},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"truncated")
    p = picks.Picks.load([str(path)], [fast, det])
    assert p.choose(fast, 3, 32, 64)[1:] == ("plain_a", "tuned at M=16")   # final beats screen
    assert p.choose(fast, 20, 32, 64)[1:] == ("big_only", "tuned at M=32")
    # M=1 rounds up to 16 like aiter's lookup; M=40 reaches no tuned M: the first candidate that fits.
    assert p.choose(fast, 1, 32, 64)[1:] == ("plain_a", "tuned at M=16")
    assert p.choose(fast, 40, 32, 64)[1:] == ("bf16_fastest", "first candidate")
    assert p.choose(det, 16, 32, 64)[1:] == ("flaky_det", "first candidate")
    csv = tmp_path / "t.csv"
    csv.write_text(format_rows([TunedRow("sm90", 132, 8, 32, 64, False, "torch.bfloat16", "torch.float32", False,
                                         False, "triton", 0, 2, 1.0, "det_b", 0.0, 0.0, 0.0)]))
    p = picks.Picks.load([str(csv)], [fast, det])
    assert p.choose(det, 8, 32, 64)[1:] == ("det_b", "tuned at M=8")
    assert p.choose(fast, 8, 32, 64)[2] == "first candidate"  # det_b is not a kernel of "fast"


@pytest.fixture
def router_without_backends(monkeypatch):
    """The real router, with no fast backend (CPU tensors stay on torch in any case)."""
    from sglang_fp32gemm import backends as B

    monkeypatch.setattr(B, "default_backends", lambda: {})
    monkeypatch.setattr(B, "all_backends", lambda: [], raising=False)


def test_bench_every_mode_on_cpu_writes_what_targets_reads(tmp_path, capsys, router_without_backends):
    fast = FakeBackend("triton", "triton", {"plain_a": 4.0})
    cute = FakeBackend("cutedsl", "cutedsl", {"t0": 5.0}, det=True)
    out = tmp_path / "out"
    argv = ["--graph", "--deterministic", "--eager", "--decode-seq", "--m", "1,2", "--n", "32", "--k", "64",
            "--det-m", "1", "--det-k", "64", "--seq-k", "64", "--eager-m", "1", "--eager-n", "32", "--eager-runs", "2",
            "--eager-calls", "3", "--fallback-m", "5", "--decode-m", "2", "--decode-n", "32", "--layers", "3",
            "--out-dir", str(out)]
    assert bench.main(argv, backends=[fast, cute], device=torch.device("cpu"), timer=FakeTimer(9.0)) == 0
    g = json.load(open(out / "bench.json"))
    assert g["mode"] == "graph" and g["args"] == argv and g["argv"] and g["versions"]["torch"] == torch.__version__
    r = g["results"][0]
    assert r["us"] == {"torch": 9.0, "routed": 9.0, "triton": 4.0, "cutedsl": 5.0}
    assert r["route"] and all(v <= 1e-5 for v in r["rel_err"].values()) and all(r["allclose"].values())
    assert r["kernel"] == {"triton": "plain_a", "cutedsl": "t0"}
    d = json.load(open(out / "bench_det.json"))
    assert d["mode"] == "deterministic" and d["results"][0]["repeatable"]["routed"] is True
    e = json.load(open(out / "bench_eager.json"))["results"]
    assert [x["kind"] for x in e] == ["routed", "fallback"] and e[1]["M"] == 5 and e[1]["added_us"] == 0.0
    assert set(e[0]["us"]) == {"torch", "routed", "hooked", "triton", "cutedsl"}
    dec = json.load(open(out / "bench_decode.json"))["results"][0]
    assert dec["layers"] == 3 and dec["add_per_layer_us"]["triton"] == 4.0  # (100 + 4*3 - 100) / 3
    # one stream: every column adds 4 us a layer; alone torch and routed take 9, cutedsl 5, triton 4
    assert dec["alone_us"] == {"torch": 9.0, "routed": 9.0, "triton": 4.0, "cutedsl": 5.0}
    assert sorted(dec["suspect"]) == ["cutedsl", "routed", "torch"] and "0.44x" in dec["suspect"]["torch"]
    assert "Suspect" in (out / "bench_decode.md").read_text()
    assert dec["note"]["triton+pdl"] == "no PDL variant (its config has no pdl field)"
    for name in ("bench.md", "bench_det.md", "bench_eager.md", "bench_decode.md"):
        assert (out / name).read_text().startswith("# ")
    text = capsys.readouterr().out
    assert text.rstrip().splitlines()[-1].startswith("precision:")  # the summary comes last
    verdicts = targets.check(targets.load([str(out)]))
    assert {v.status for v in verdicts} <= {"PASS", "FAIL", "NODATA"}
    assert next(v for v in verdicts if v.name.startswith("every result")).status == "PASS"


def test_bench_decode_seq_checks_outputs_after_x_gets_fresh_values(tmp_path, router_without_backends):
    """A graph whose fp32 outputs were computed once at capture time (a kernel launched outside the capture)
    is wrong once x changes before the checked replay: every column not exact."""

    class StaleTimer(FakeTimer):
        def step(self, step, replays=20, refresh=None):
            us, outs = super().step(step, replays)
            if refresh is not None:
                refresh()
            return us, outs

    argv = ["--decode-seq", "--decode-m", "2", "--decode-n", "32", "--seq-k", "64", "--layers", "3",
            "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StaleTimer()) == 0
    dec = json.load(open(tmp_path / "bench_decode.json"))["results"][0]
    assert dec["allclose"] == {"torch": False, "routed": False}


def test_peer_source_names_the_vllm_release_from_its_split_k_file(tmp_path, monkeypatch):
    """``versions()`` records which vLLM release the peer columns time, read from the split-K file on the path
    without importing anything."""
    import hashlib
    import sys

    from sglang_fp32gemm.tools import common, vllm_peer

    if importlib.util.find_spec("vllm") is None:
        assert vllm_peer.source() is None and common.versions()["vllm_ll"] is None
    body = b"a split-K kernel\n"
    d = tmp_path / "vllm" / "model_executor" / "kernels" / "linear" / "cute_dsl"
    d.mkdir(parents=True)
    (d / "_ll_bf16_splitk.py").write_bytes(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    sha = hashlib.sha256(body).hexdigest()[:12]
    assert vllm_peer.source() == f"unknown (sha256 {sha})"
    monkeypatch.setitem(vllm_peer.SPLITK_SOURCES, sha, "9.9.9")
    assert vllm_peer.source() == "9.9.9" and common.versions()["vllm_ll"] == "9.9.9"
    assert not any(n == "vllm" or n.startswith("vllm.") for n in sys.modules)


def test_bench_graph_times_the_peer_at_the_best_exact_config_of_its_sweep(tmp_path, monkeypatch,
                                                                        router_without_backends):
    """The vllm_ll column: the fastest config of the sweep that is exact (a faster inexact one is passed
    over, and the record says so), timed beside the others and checked against float64."""
    from sglang_fp32gemm.backends import torch_ref
    from sglang_fp32gemm.tools import vllm_peer

    class Peer(vllm_peer.VllmLL):
        def configs(self, m):
            return ["fast_bf16", "exact"]

        def fn(self, cfg, m, k):
            if cfg == "fast_bf16":  # rounds its output to bf16: fails the exactness check
                f = lambda x, w: torch_ref.mm_fp32(x, w).bfloat16().float()  # noqa: E731
                f.fake_us = 2.0
            else:
                f = lambda x, w: torch_ref.mm_fp32(x, w)  # noqa: E731
                f.fake_us = 3.0
            return f

    seen = []
    monkeypatch.setattr(vllm_peer, "load", lambda device=None: (seen.append(device) or Peer(None), "ok"))
    argv = ["--graph", "--m", "1", "--n", "32", "--k", "64", "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=FakeTimer(9.0)) == 0
    r = json.load(open(tmp_path / "bench.json"))["results"][0]
    assert seen == [torch.device("cpu")]
    assert r["us"] == {"torch": 9.0, "routed": 9.0, "vllm_ll": 3.0} and r["kernel"]["vllm_ll"] == "exact"
    assert r["peer_sweep"]["32"]["exact"] == 3.0 and r["peer_sweep"]["32"]["fast_bf16"].startswith("not exact")
    assert r["rel_err"]["vllm_ll"] <= 1e-5 and r["allclose"]["vllm_ll"]
    # --no-peer: no column, and the record says why
    argv += ["--no-peer"]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=FakeTimer(9.0)) == 0
    r = json.load(open(tmp_path / "bench.json"))["results"][0]
    assert "vllm_ll" not in r["us"] and r["note"]["vllm_ll"] == "not asked"


def test_the_peer_sweeps_vllms_prefetching_dot_kernel_at_m_1():
    """vLLM's ll_bf16_gemm launches its dot-product kernel with W loaded before the PDL wait at M=1
    (prefetch_pdl_weights=True): the sweep has that instance's configs at M=1 only, each compiled on it."""
    from dataclasses import dataclass

    from sglang_fp32gemm.tools import vllm_peer

    class Gemm:
        @dataclass(frozen=True)
        class CompileKey:
            backend: str
            M: int = 0
            K: int = 0
            bs: int = 0
            split_k: int = 0
            num_stages: int = 0

        def __init__(self, prefetch_pdl_weights=False):
            self.prefetch = prefetch_pdl_weights
            self._compiled_cache, self._splitk_cache, self.compiled = {}, {}, []

        def compile(self, key):
            self.compiled.append(key)
            self._compiled_cache[(key.M, key.K, key.bs, torch.float32)] = object()

    plain, prefetching = Gemm(), Gemm(prefetch_pdl_weights=True)
    peer = vllm_peer.VllmLL(plain, prefetching)
    assert [c for c in peer.configs(1) if c.startswith("dotprod")] == [
        "dotprod_bs128", "dotprod_bs256", "dotprod_bs128_pdl", "dotprod_bs256_pdl"]
    assert [c for c in peer.configs(2) if c.startswith("dotprod")] == ["dotprod_bs128", "dotprod_bs256"]
    assert callable(peer.fn("dotprod_bs256_pdl", 1, 64)) and callable(peer.fn("dotprod_bs128", 1, 64))
    assert [(k.M, k.K, k.bs) for k in prefetching.compiled] == [(1, 64, 256)]
    assert [(k.M, k.K, k.bs) for k in plain.compiled] == [(1, 64, 128)]
    # A release without the option: no _pdl configs.
    assert not any(c.endswith("_pdl") for c in vllm_peer.VllmLL(plain).configs(1))


# -- targets ---------------------------------------------------------------------------------
def synthetic(tmp_path, *, slow=None, imprecise=None, eager_factor=0.75, fallback_add=0.4, decode_add=5.2,
              region_m4=None):
    """Bench JSON files that meet every target, except what the arguments break."""
    graph = []
    for k in (7168, 4096):
        for n in targets.NS:
            for m in list(range(1, 33)) + [48, 64, 128]:
                peer = {512: 5.0, 1024: 6.0, 2048: 9.0, 2560: 11.2}[n]
                routed = 0.94 * peer
                rec = {"M": m, "N": n, "K": k, "route": "triton",
                       "us": {"torch": peer * 1.3, "routed": routed, "triton": peer, "cutedsl": peer + 0.2,
                              "vllm_ll": peer},
                       "rel_err": {"torch": 2e-6, "routed": 1e-6}, "allclose": {"torch": True, "routed": True}}
                if (m, n, k) == slow:
                    rec["us"]["routed"] = 20.0
                if (m, n, k) == imprecise:
                    rec["rel_err"]["routed"] = 3e-3
                graph.append(rec)
    det = [{"M": m, "N": n, "K": 7168, "route": "cutedsl", "us": {"torch": 9.0, "routed": 6.0, "cutedsl": 6.02},
            "rel_err": {"routed": 1e-6}, "allclose": {"routed": True}, "repeatable": {"routed": True}}
           for n in targets.NS for m in range(1, 33)]
    eager = [{"M": m, "N": n, "K": 7168, "kind": "routed", "route": "triton:t", "rel_err": {}, "allclose": {},
              "us": {"torch": 20.0, "routed": 20.0 * eager_factor}} for n in (1024, 2560) for m in (1, 8, 32)]
    # a shape the table leaves on torch: no eager host-time target
    eager.append({"M": 2, "N": 512, "K": 7168, "kind": "routed", "route": "torch:no row", "rel_err": {},
                  "allclose": {}, "us": {"torch": 20.0, "routed": 21.0}})
    eager += [{"M": 200, "N": n, "K": 7168, "kind": "fallback", "us": {"direct": 20.0, "fallback": 20.0 + fallback_add},
               "added_us": fallback_add, "rel_err": {}, "allclose": {}} for n in (1024, 2560)]
    decode = [{"M": 4, "N": 1024, "K": 7168, "add_per_layer_us": {"torch": 8.5, "routed": decode_add},
               "rel_err": {"routed": 1e-6}, "allclose": {"routed": True}}]
    region = [{"model": "pro", "M": m, "N": "512/1024/2048", "K": 7168, "schedule": "overlapped",
               "add_per_layer_us": {"torch": 5.0, "routed": 2.4 if m <= 8 else 3.1 if m <= 32 else 3.4}}
              for m in (1, 2, 4, 8, 16, 32, 64)]
    region += [{"model": "pro", "M": m, "N": "512/1024/2048", "K": 7168, "schedule": "serial",
                "add_per_layer_us": {"torch": 15.0, "routed": 8.9, "vllm_ll": 10.0}} for m in (1, 2, 4, 8, 16, 32)]
    region += [{"model": "flash", "M": m, "N": "512/1024/2048", "K": 4096, "schedule": "overlapped",
                "add_per_layer_us": {"torch": 3.0, "routed": 3.0}} for m in (1, 2, 4, 8, 16, 32, 64)]
    region += [{"model": "flash", "M": m, "N": "512/1024/2048", "K": 4096, "schedule": "serial",
                "add_per_layer_us": {"torch": 12.0, "routed": 6.2, "vllm_ll": 7.0}} for m in (1, 2, 4, 8, 16, 32)]
    if region_m4 is not None:  # what routed adds at M=4 in V4-Pro's region, overlapped and serial
        for r in region:
            if r["M"] == 4 and r["model"] == "pro":
                r["add_per_layer_us"]["routed"] = region_m4
    for name, mode, res in (("bench.json", "graph", graph), ("bench_det.json", "deterministic", det),
                            ("bench_eager.json", "eager", eager), ("bench_decode.json", "decode", decode),
                            ("bench_region.json", "region", region)):
        (tmp_path / name).write_text(json.dumps({"mode": mode, "results": res}))
    (tmp_path / "fuzz.json").write_text(json.dumps({"summary": {"cases": 300, "failures": 0, "max_rel_err": 5e-6}}))
    return str(tmp_path)


def statuses(path):
    return {v.name.split(",")[0].split(" (")[0]: v.status for v in targets.check(targets.load([path]))}


def test_targets_all_pass_on_a_run_that_meets_them(tmp_path, capsys):
    path = synthetic(tmp_path)
    assert set(statuses(path).values()) == {"PASS"}
    assert targets.main([path]) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith(("FAIL", "NODATA"))]
    assert out.rstrip().endswith("targets: 18 PASS, 0 FAIL, 0 NODATA")


def test_eager_host_target_reads_the_host_time_not_the_wall():
    """Run 29d (an H100): where the GPU is the limit the wall time is the kernel's; the target is host time."""
    def rec(wall, host):
        return {"M": 8, "N": 2560, "K": 7168, "kind": "routed", "route": "triton:t",
                "us": {"torch": 18.5, "routed": wall}, "enqueue_us": {"torch": 17.3, "routed": host}}

    gpu_bound = targets.eager_host_vs_torch([rec(wall=16.7, host=11.0)])
    assert gpu_bound.status == "PASS", gpu_bound
    host_bound = targets.eager_host_vs_torch([rec(wall=14.0, host=14.0)])
    assert host_bound.status == "FAIL" and "eager routed 14.00 us > 0.8 x torch 17.30" in host_bound.misses[0]
    wall_only = rec(wall=16.7, host=11.0)
    del wall_only["enqueue_us"]
    assert targets.eager_host_vs_torch([wall_only]).status == "FAIL"


def test_targets_fail_with_the_numbers(tmp_path, capsys):
    path = synthetic(tmp_path, slow=(4, 1024, 7168), imprecise=(64, 2048, 4096), eager_factor=1.2,
                     fallback_add=1.6, decode_add=6.1)
    assert targets.main([path]) == 1
    out = capsys.readouterr().out
    assert "FAIL   routed <= 0.95x min(cutedsl, triton alone)" in out
    assert "M=4 N=1024: routed 20.00 us > 0.95 x triton 6.00 = 5.70" in out
    assert "FAIL   routed <= 6.0 us at N=1024" in out
    assert "M=4 N=1024 K=7168: routed 20.00 > torch 7.80" in out
    assert "graph M=64 N=2048 K=4096 routed: rel. error 0.003" in out
    assert "eager routed 24.00 us > 1.05 x torch 20.00" in out
    assert "FAIL   isolated: routed <= 1.02x min(torch, cutedsl, vllm_ll), measured M in 1..32 (1,2,3" in out
    assert "M=4 N=1024: routed 20.00 us > 1.02 x vllm_ll 6.00 = 6.12 (3.333x; route triton)" in out
    assert "FAIL   eager routed host time <= 0.8x torch.mm's, measured M in 1..32, routed shapes: 6 of 6 shapes" in out
    assert "M=1 N=1024 K=7168: eager routed 24.00 us > 0.8 x torch 20.00 (1.200x; route triton:t)" in out
    assert "adds 1.60 us" in out
    assert "routed adds 6.10 us per layer" in out
    assert "PASS   deterministic routed" in out


def test_the_serial_target_holds_v4_flash_too(tmp_path, capsys):
    """The issue's serial target names no model: V4-Flash's serial steps (run 24a: 1.08x at M=2) are checked
    against it beside V4-Pro's, each model its own line."""
    path = synthetic(tmp_path)
    r = json.load(open(os.path.join(path, "bench_region.json")))
    for x in r["results"]:
        if x["model"] == "flash" and x["schedule"] == "serial" and x["M"] == 2:
            x["add_per_layer_us"]["routed"] = 7.5
    (tmp_path / "bench_region.json").write_text(json.dumps(r))
    assert targets.main([path]) == 1
    out = capsys.readouterr().out
    assert "PASS   region, serial: routed adds <= 0.9x" in out
    assert "FAIL   region (flash), serial: routed adds <= 0.9x what vLLM's ll_bf16 (best config) adds: 1 of 6 M miss" \
        in out
    assert "M=2: routed adds 7.50 us > 6.30" in out


def test_region_targets_fail_with_the_numbers_and_say_what_was_not_measured(tmp_path, capsys):
    path = synthetic(tmp_path, region_m4=6.0)
    assert targets.main([path]) == 1
    out = capsys.readouterr().out
    assert "FAIL   region, overlapped: routed never adds more than torch (+1% noise): 1 of 7 M miss" in out
    assert "M=4: routed adds 6.00 us > 5.05 (torch 5.00, routed 6.00)" in out
    assert "FAIL   region, overlapped: routed adds <= 0.7x what torch adds: 1 of 7 M miss" in out
    assert "M=4: routed adds 6.00 us > 2.50" in out
    assert "M=4: routed adds 6.00 us > 9.00 (torch 15.00, routed 6.00" not in out  # serial 6.0 <= 9.0
    assert "PASS   region, serial" in out
    assert "PASS   region (flash), overlapped: routed never adds more than torch (+1% noise): all 7 M met" in out
    assert "PASS   region (flash), serial: routed adds <= 0.9x what vLLM's ll_bf16 (best config) adds" in out
    r = json.load(open(os.path.join(path, "bench_region.json")))
    r["results"] = [x for x in r["results"] if x["M"] != 2]
    for x in r["results"]:
        x["add_per_layer_us"].pop("vllm_ll", None)
    (tmp_path / "bench_region.json").write_text(json.dumps(r))
    verdicts = {v.name: v for v in targets.check(targets.load([path]))}
    assert verdicts["region, overlapped: routed never adds more than torch (+1% noise)"].status == "FAIL"  # M=4
    serial = verdicts["region, serial: routed adds <= 0.9x what vLLM's ll_bf16 (best config) adds"]
    assert serial.status == "NODATA" and "M=2: not measured" in serial.misses and "M=1: no vllm_ll column" in serial.misses
    for x in r["results"]:
        if x["model"] == "flash" and x["M"] == 16:
            x["add_per_layer_us"]["routed"] = 3.3  # 10% over torch's 3.0
    (tmp_path / "bench_region.json").write_text(json.dumps(r))
    flash = {v.name: v for v in targets.check(targets.load([path]))}[
        "region (flash), overlapped: routed never adds more than torch (+1% noise)"]
    assert flash.status == "FAIL" and flash.misses == ["M=16: routed adds 3.30 us > 3.03 (torch 3.00, routed 3.30)"]


def test_targets_nodata_when_a_shape_or_column_is_missing(tmp_path):
    path = synthetic(tmp_path)
    g = json.load(open(os.path.join(path, "bench.json")))
    g["results"] = [r for r in g["results"] if not (r["M"] == 7 and r["N"] == 512)]
    for r in g["results"]:
        r["us"].pop("cutedsl")
    (tmp_path / "bench.json").write_text(json.dumps(g))
    os.remove(os.path.join(path, "bench_decode.json"))
    s = statuses(path)
    assert s["routed <= 0.95x min(cutedsl"] == "NODATA"
    assert s["decode sequence N=1024 M=4: the routed call adds <= 5.5 us per layer"] == "NODATA"
    iso = targets.routed_vs_best(g["results"])
    assert iso.status == "NODATA" and "M=1 N=512: no cutedsl column" in iso.misses
    assert targets.main([path]) == 1


def test_targets_count_a_suspect_decode_row_as_not_measured():
    row = {"M": 4, "N": 1024, "K": 7168, "add_per_layer_us": {"torch": 8.5, "routed": 5.2}}
    assert targets.decode_add([row]).status == "PASS"
    row["suspect"] = {"routed": "added 5.20 us, 0.50x its calls' time alone (10.40)"}
    v = targets.decode_add([row])
    assert v.status == "NODATA" and "0.50x" in v.detail


def test_targets_deterministic_fails_when_not_repeatable_or_slower(tmp_path):
    path = synthetic(tmp_path)
    d = json.load(open(os.path.join(path, "bench_det.json")))
    d["results"][0]["repeatable"]["routed"] = False
    d["results"][1]["us"]["routed"] = 6.2  # 3% over cutedsl's 6.02
    (tmp_path / "bench_det.json").write_text(json.dumps(d))
    v = next(v for v in targets.check(targets.load([path])) if v.name.startswith("deterministic"))
    assert v.status == "FAIL" and len(v.misses) == 2
    assert any("not bitwise repeatable" in m for m in v.misses)


def test_a_stop_mid_mode_keeps_the_finished_shapes_and_says_what_is_incomplete(tmp_path, capsys,
                                                                               router_without_backends):
    from sglang_fp32gemm.tools.stopping import Stop

    class StoppingTimer(FakeTimer):
        """SIGTERM (or the budget) arrives during the third timing."""

        def per_call(self, fn, x, weights, replays=15):
            if self.per_call_calls == 2:
                raise Stop("SIGTERM after 1s")
            return super().per_call(fn, x, weights, replays)

    out = tmp_path / "out"
    argv = ["--graph", "--m", "1,2,3", "--n", "32", "--k", "64", "--out-dir", str(out)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StoppingTimer(9.0)) == 0
    g = json.load(open(out / "bench.json"))
    assert [r["M"] for r in g["results"]] == [1]   # M=1: torch and routed timed; M=2 stopped in its torch timing
    text = capsys.readouterr().out
    assert "stopped (SIGTERM after 1s); partial results written" in text
    assert text.rstrip().splitlines()[-1] == "(mode graph incomplete)"


# -- one stop scheme, one writer, the shared table lookup ------------------------------------
def test_budget_and_sigterm_raise_stop_which_no_except_exception_swallows():
    import signal

    from sglang_fp32gemm.tools.stopping import Budget, Stop

    b = Budget(0.01)
    assert b.left() is not None and not isinstance(Stop(), Exception)
    time.sleep(0.02)
    assert b.expired() and b.left() == 0.0
    with pytest.raises(Stop, match="budget of 0s reached"):
        try:
            b.check()
        except Exception:  # a kernel's failure handler must not hide the stop
            pytest.fail("Stop caught as an Exception")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stop, match="SIGTERM"):
        with Budget(None).sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) is before
    assert not Budget(None).expired() and Budget(0).deadline is None


def test_write_text_is_atomic_and_makes_the_folder(tmp_path):
    path = tmp_path / "a" / "b.json"
    common.write_json(str(path), {"x": 1})
    common.write_text(str(path), "replaced")
    assert path.read_text() == "replaced" and os.listdir(path.parent) == ["b.json"]


def test_table_jobs_are_what_the_table_lookup_routes_to():
    from sglang_fp32gemm import backends as B
    from sglang_fp32gemm.table import TunedTables

    tables = TunedTables.load()
    shapes = [(m, n, 7168) for m in (1, 3, 20, 200) for n in (512, 1024, 2048, 2560)]
    jobs = picks.table_jobs(shapes, B.all_backends(), KEY)
    assert jobs
    want = set()
    for m, n, k in shapes:
        for t in (tables.fast, tables.deterministic):
            row = t.lookup(KEY, m, n, k)
            if row is not None and row.libtype != "torch":
                want.add((row.kernelName, m, n, k))
    assert {(kern, m, n, k) for _, kern, m, n, k in jobs} == want
    for name, kern, *_ in jobs:
        B.by_name(name).parse(kern)  # each job names the backend that parses its kernel


# -- progress ---------------------------------------------------------------------------------
class _Stream:
    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, s):
        self.text += s

    def flush(self):
        pass


def test_progress_without_a_terminal_prints_a_plain_line_every_few_seconds_or_percent():
    from sglang_fp32gemm.tools.progress import Progress

    now = [100.0]
    s = _Stream(tty=False)
    p = Progress(40, "tune", stream=s, every_s=5.0, every_pct=10.0, clock=lambda: now[0])
    for i in range(3):  # 7.5% and under 5 s: nothing yet
        now[0] += 1.0
        p.update(1, 4)
    assert s.text == ""
    now[0] += 1.0
    p.update(1, 4)       # 10%: a line
    assert s.text == "tune: 4/40 shapes, 16 candidates timed, 4s elapsed, ~36s left\n"
    now[0] += 6.0
    p.update(1, 0)       # 6 s later: a line even under the next 10%
    assert s.text.splitlines()[-1].startswith("tune: 5/40 shapes, 16 candidates timed, 10s elapsed")
    p = Progress(2, "bench", stream=s, left_s=lambda: 3.0, clock=lambda: now[0])
    assert p.line().endswith("~3s left")   # before the first shape: the budget's end
    p.update(2)
    assert s.text.splitlines()[-1].startswith("bench: 2/2 shapes")  # the last shape always prints


def test_progress_on_a_terminal_is_a_tqdm_bar():
    pytest.importorskip("tqdm")
    from sglang_fp32gemm.tools.progress import Progress

    s = _Stream(tty=True)
    p = Progress(3, "tune", stream=s)
    p.update(1, 5)
    p.close()
    assert p._bar is None and "tune" in s.text and "5 timed" in s.text and "shapes, " not in s.text


def test_tune_reports_progress_on_stderr(tmp_path, capsys):
    fast, det, _ = fakes()
    args = tune_args(tmp_path, m=[1, 8], n=[32], k=[64])
    tune.run(args, backends=[fast, det], device=torch.device("cpu"), timer=FakeTimer(10.0))
    timed = sum(s["timed"] for s in json.load(open(args.summary))["shapes"])
    err = capsys.readouterr().err
    assert timed and err.splitlines()[-1].startswith(f"tune: 2/2 shapes, {timed} candidates timed, ")


# -- the command line ---------------------------------------------------------------------------
def _main(argv):
    from sglang_fp32gemm.__main__ import main

    return main(argv)


def _one_line_error(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err and "error" in err


def test_top_level_help_exits_0_and_names_every_command(capsys):
    assert _main(["--help"]) == 0 and _main(["-h"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and all(c in out for c in ("explain", "demo", "bench", "tune", "fuzz"))
    assert "searches Triton" not in out and "every backend" in out   # tune times all backends and torch


@pytest.mark.parametrize("argv", [[], ["nonsense"], ["--nonsense"]])
def test_a_missing_or_unknown_command_exits_2_with_one_line(argv, capsys):
    assert _main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and _one_line_error(err)


@pytest.mark.parametrize("cmd", ["explain", "demo", "bench", "tune", "fuzz"])
def test_every_command_help_exits_0(cmd, capsys):
    assert _main([cmd, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: python -m sglang_fp32gemm {cmd}") and err == ""


@pytest.mark.parametrize("argv", [
    ["fuzz", "--cases", "0"], ["fuzz", "--cases", "-1"], ["fuzz", "--cases", "x"], ["demo", "--m", "-1"],
    ["demo", "--m", "8", "0"], ["bench", "--m", "0-3"], ["bench", "--layers", "0"], ["bench", "--bogus"],
    ["bench", "--tune-log", "/no/such/log.jsonl"],
    ["tune", "--m", "0"], ["tune", "--max-per-backend", "cutedsl"], ["explain", "--max-m", "x"],
])
def test_bad_arguments_exit_2_with_one_line(argv, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the arguments fail before any GPU use
    assert _main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and _one_line_error(err), err
    assert err.startswith(f"python -m sglang_fp32gemm {argv[0]}: error: ")


@pytest.mark.parametrize("cmd", ["fuzz", "bench", "tune"])
def test_gpu_commands_without_a_gpu_say_so_in_one_line(cmd, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _main([cmd, "--help"]) == 0
    capsys.readouterr()
    extra = ["--out", str(tmp_path / "f.json")] if cmd == "fuzz" else []
    assert _main([cmd, *extra]) == 2
    out, err = capsys.readouterr()
    assert err == f"{cmd} needs a CUDA GPU\n" and not (tmp_path / "f.json").exists()


def test_the_module_help_in_a_process_exits_0():
    import subprocess
    import sys

    from conftest import REPO_ROOT, subprocess_env

    p = subprocess.run([sys.executable, "-m", "sglang_fp32gemm", "--help"], capture_output=True, text=True,
                       timeout=120, env=subprocess_env(), cwd=str(REPO_ROOT))
    assert (p.returncode, p.stderr) == (0, "") and p.stdout.startswith("usage: python -m sglang_fp32gemm")


def test_versions_say_whether_the_tree_differs_from_its_git_head(tmp_path, monkeypatch):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("no git")
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    monkeypatch.chdir(tmp_path)
    v = common.versions()
    assert v["git"] and v["git_tracked_changes"] == 0
    (tmp_path / "a.txt").write_text("2\n")  # as a copied tree over an older .git
    (tmp_path / "new.txt").write_text("untracked files are not counted\n")
    assert common.versions()["git_tracked_changes"] == 1


def test_the_cuda_timers_methods_are_not_shadowed_by_its_attributes():
    """Stop 39 named a method ``capture``, which ``__init__``'s ``self.capture`` (the capture way) hid: every
    ``step`` raised on the GPU. Built without a GPU, each public method must still be a method."""
    from sglang_fp32gemm.tools import timing

    for way in timing.CAPTURES:
        t = timing.CudaTimer(way)
        for name, member in vars(timing.CudaTimer).items():
            if callable(member) and not name.startswith("__"):
                assert callable(getattr(t, name)), name
