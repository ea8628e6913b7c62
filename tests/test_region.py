"""bench --region on CPU: the region model's plan as data, one eager run of it, the bench mode.

The plan must say what SGLang 0.5.23's DeepSeek-V4 decode attention-prepare region runs
(tools/region.py's docstring names the functions): which GEMMs, of which shapes, on which
stream, in which order, with which waits; the eager run must give fp32 outputs that are exact
by ``exactness``; ``bench --region`` must time every mode, check the routed kernels through the
router's counters and write its files. No GPU: streams are no-ops, a fake timer stands in.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from fakes.fake_backends import FAKE_KERNEL, ExactFake, FakeCfg, PairFake, fake_table, make_router
from sglang_fp32gemm import exactness, routing
from sglang_fp32gemm.backends import torch_ref
from sglang_fp32gemm.tools import bench, region, timing

B, F = region.GEMM_BF16, region.GEMM_FP32
MAIN, KV, COMP, IDX, IDX_Q, IDX_W = region.MAIN, region.KV, region.COMPRESSOR, region.INDEXER, \
    region.INDEXER_Q, region.INDEXER_WEIGHTS


# -- the plan ------------------------------------------------------------------------------------
def test_models_layer_counts_ratios_and_k():
    pro, flash = region.MODELS["pro"], region.MODELS["flash"]
    assert (pro.layers, pro.hidden, flash.layers, flash.hidden) == (61, 7168, 43, 4096)
    assert pro.compress_ratios[:6] == (128, 128, 4, 128, 4, 128) and pro.compress_ratios[-1] == 4
    assert (pro.compress_ratios.count(128), pro.compress_ratios.count(4)) == (31, 30)
    assert flash.compress_ratios[:5] == (0, 0, 4, 128, 4) and flash.compress_ratios[-2:] == (128, 4)
    assert [flash.compress_ratios.count(r) for r in (0, 4, 128)] == [2, 21, 20]
    assert region.fp32_shapes(pro) == [(512, 7168), (1024, 7168), (2048, 7168)]
    assert region.fp32_shapes(flash) == [(512, 4096), (1024, 4096), (2048, 4096)]
    assert region.fp32_calls(pro) == 31 + 2 * 30 and region.fp32_calls(flash) == 20 + 2 * 21


def test_pro_gemms_of_an_hca_and_a_csa_layer():
    pro = region.MODELS["pro"]
    assert region.gemms(region.layer_plan(pro, 0, "overlapped")) == [
        ("wqkv_a", B, MAIN, 1536 + 512, 7168),
        ("compressor.wkv_gate", F, COMP, 1024, 7168),
        ("q_b", B, MAIN, 128 // 8 * 512, 1536),
    ]
    assert region.gemms(region.layer_plan(pro, 2, "overlapped")) == [
        ("wqkv_a", B, MAIN, 2048, 7168),
        ("indexer.compressor.wkv_gate", F, IDX, 512, 7168),
        ("indexer.weights_proj", B, IDX_W, 64, 7168),
        ("indexer.wq_b", B, IDX_Q, 64 * 128, 1536),
        ("compressor.wkv_gate", F, COMP, 2048, 7168),
        ("q_b", B, MAIN, 8192, 1536),
    ]
    # serial (_forward_prepare's order): the q path, the indexer, the compressor; one stream
    assert region.gemms(region.layer_plan(pro, 2, "serial")) == [
        ("wqkv_a", B, MAIN, 2048, 7168), ("q_b", B, MAIN, 8192, 1536),
        ("indexer.weights_proj", B, MAIN, 64, 7168), ("indexer.wq_b", B, MAIN, 8192, 1536),
        ("indexer.compressor.wkv_gate", F, MAIN, 512, 7168), ("compressor.wkv_gate", F, MAIN, 2048, 7168),
    ]


def test_flash_gemms_sliding_window_csa_and_hca_layers():
    flash = region.MODELS["flash"]
    assert region.gemms(region.layer_plan(flash, 0, "overlapped")) == [
        ("wqkv_a", B, MAIN, 1024 + 512, 4096), ("q_b", B, MAIN, 64 // 8 * 512, 1024)]
    fp32 = [(g[0], g[3], g[4]) for i in (2, 3) for g in region.gemms(region.layer_plan(flash, i, "serial"))
            if g[1] == F]
    assert fp32 == [("indexer.compressor.wkv_gate", 512, 4096), ("compressor.wkv_gate", 2048, 4096),
                    ("compressor.wkv_gate", 1024, 4096)]


def _order(steps):
    return [(s.kind, s.stream, s.name) for s in steps]


def test_overlapped_waits_and_joins_follow_sglang():
    steps = _order(region.layer_plan(region.MODELS["pro"], 2, "overlapped"))
    pos = {t: i for i, t in enumerate(steps)}
    ws, rec, we = region.WAIT_STREAM, region.RECORD, region.WAIT_EVENT
    # the three side streams fork from main before wqkv_a is issued; main joins them before attention
    forks = [pos[(ws, s, MAIN)] for s in (KV, COMP, IDX)]
    assert max(forks) < pos[(B, MAIN, "wqkv_a")]
    joins = [pos[(ws, MAIN, s)] for s in (KV, COMP, IDX)]
    assert pos[(B, MAIN, "q_b")] < min(joins) and max(joins) < pos[("pointwise", MAIN, "attention")]
    # kv waits for wqkv_a's event; the indexer's q waits for q_lora and the weights; indexer joins it
    assert pos[(B, MAIN, "wqkv_a")] < pos[(rec, MAIN, "qkv_a_ready")] < pos[(we, KV, "qkv_a_ready")] \
        < pos[("pointwise", KV, "kv_norm_rope_store")]
    assert pos[(rec, MAIN, "q_lora_ready")] < pos[(we, IDX_Q, "q_lora_ready")] < pos[(B, IDX_Q, "indexer.wq_b")]
    assert pos[(rec, IDX_W, "weights_ready")] < pos[(we, IDX_Q, "weights_ready")] < pos[(B, IDX_Q, "indexer.wq_b")]
    assert pos[(ws, IDX_Q, IDX)] < pos[(B, IDX_Q, "indexer.wq_b")] < pos[(ws, IDX, IDX_Q)] < pos[(ws, MAIN, IDX)]
    assert pos[(ws, IDX_W, IDX)] < pos[(B, IDX_W, "indexer.weights_proj")]
    # every kernel on a side stream comes after that stream's first wait
    for i, (kind, stream, _) in enumerate(steps):
        if stream != MAIN and kind not in (ws, rec, we):
            assert any(k in (ws, we) and s == stream for k, s, _ in steps[:i]), steps[i]
    # an HCA layer forks and joins the indexer stream too (SGLang always does), with nothing on it
    hca = _order(region.layer_plan(region.MODELS["pro"], 0, "overlapped"))
    assert (ws, IDX, MAIN) in hca and (ws, MAIN, IDX) in hca and not any(s in (IDX_Q, IDX_W) for _, s, _ in hca)


def test_serial_is_one_stream_without_waits():
    for i in (0, 2):
        steps = region.layer_plan(region.MODELS["pro"], i, "serial")
        assert {s.stream for s in steps} == {MAIN}
        assert not [s for s in steps if s.kind in (region.WAIT_STREAM, region.RECORD, region.WAIT_EVENT)]


def test_bad_schedule_and_ratio():
    with pytest.raises(ValueError, match="schedule"):
        region.layer_plan(region.MODELS["pro"], 0, "parallel")
    v41 = region.ModelSpec("v41", 64, 16, 32, 48, 4, 16, (1, 4))
    with pytest.raises(ValueError, match="ratio 1/2"):
        region.layer_plan(v41, 0, "serial")


# -- one eager run --------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", region.SCHEDULES)
def test_eager_run_gives_exact_fp32_outputs(schedule):
    spec = region.MODELS["tiny"]
    weights = region.make_weights(spec, "cpu")
    x = exactness.random_bf16(3, spec.hidden)
    gemm = {n: torch_ref.mm_fp32 for n, _ in region.fp32_shapes(spec)}
    fp32, where, keep = region.run_layers(region.plan(spec, schedule), weights, x, gemm, region.Streams("cpu"))
    assert where == [(1, "compressor.wkv_gate"), (2, "indexer.compressor.wkv_gate"), (2, "compressor.wkv_gate")]
    for out, (layer, name) in zip(fp32, where):
        assert out.dtype == torch.float32 and exactness.measure(out, exactness.reference(x, weights[layer][name])).ok
    assert all(t.shape[0] == 3 for t in keep)


def test_eager_run_catches_a_rounded_gemm_and_leaves_gemms_out_with_none():
    spec = region.MODELS["tiny"]
    weights = region.make_weights(spec, "cpu")
    x = exactness.random_bf16(2, spec.hidden)
    rounded = {n: (lambda a, b: torch_ref.mm_fp32(a, b).bfloat16().float()) for n, _ in region.fp32_shapes(spec)}
    fp32, where, _ = region.run_layers(region.plan(spec, "serial"), weights, x, rounded, region.Streams("cpu"))
    assert not exactness.measure(fp32[0], exactness.reference(x, weights[where[0][0]][where[0][1]])).ok
    holders = {n: torch.zeros(2, n) for n, _ in region.fp32_shapes(spec)}
    fp32, where, keep = region.run_layers(region.plan(spec, "serial"), weights, x, None, region.Streams("cpu"),
                                          holders)
    assert fp32 == [] and where == [] and any(t is holders[128] for t in keep)


def _counting_pair(calls):
    def pair(x, w1, w2):
        calls.append((w1.shape[0], w2.shape[0]))
        return torch_ref.mm_fp32(x, w1), torch_ref.mm_fp32(x, w2)
    return pair


def test_a_pair_entry_makes_each_serial_ratio4_layer_one_call_with_both_outputs_exact():
    spec = region.MODELS["tiny"]
    weights = region.make_weights(spec, "cpu")
    x = exactness.random_bf16(2, spec.hidden)
    calls = []
    gemm = {n: torch_ref.mm_fp32 for n, _ in region.fp32_shapes(spec)}
    gemm["pair"] = _counting_pair(calls)
    plans = region.plan(spec, "serial")
    fp32, where, _ = region.run_layers(plans, weights, x, gemm, region.Streams("cpu"))
    # tiny's layer 2 is its one ratio-4 layer: one pair call for its two GEMMs, the others alone.
    assert region.pairs(plans) == 1 and calls == [(region.indexer_compressor_n(spec), region.compressor_n(spec, 4))]
    assert where == [(1, "compressor.wkv_gate"), (2, "indexer.compressor.wkv_gate"), (2, "compressor.wkv_gate")]
    for out, (layer, name) in zip(fp32, where):
        assert exactness.measure(out, exactness.reference(x, weights[layer][name])).ok
    # A layer whose second GEMM reads the first's output cannot take the pair: its x is not there yet.
    steps = list(plans[2])
    i = next(j for j, s in enumerate(steps) if s.name == region.PAIR[1])
    steps[i] = steps[i]._replace(src=region.PAIR[0])
    assert region.paired(plans[2]) and not region.paired(steps)


def test_overlapped_layers_put_the_pair_on_two_streams_and_never_fuse_it():
    spec = region.MODELS["pro"]
    plans = region.plan(spec, "overlapped")
    assert region.pairs(plans) == 0 and region.pairs(region.plan(spec, "serial")) == spec.compress_ratios.count(4)
    tiny = region.MODELS["tiny"]
    calls = []
    gemm = {n: torch_ref.mm_fp32 for n, _ in region.fp32_shapes(tiny)}
    gemm["pair"] = _counting_pair(calls)
    region.run_layers(region.plan(tiny, "overlapped"), region.make_weights(tiny, "cpu"),
                      exactness.random_bf16(1, tiny.hidden), gemm, region.Streams("cpu"))
    assert calls == []


# -- the bench mode ---------------------------------------------------------------------------------
class ColumnFake(ExactFake):
    def candidates(self, m, n, k):
        return [FakeCfg(FAKE_KERNEL)]


class StepTimer:
    """Runs each step twice (warm-up, then 'capture' after before_capture) and reports 100 us + 4 per fp32 output.
    ``refresh`` comes before the 'capture', so that its outputs are those of the fresh inputs, as a graph's
    replay after ``refresh`` gives them (run again after it, the step would count its routed calls twice)."""

    def __init__(self):
        self.steps = 0

    def step(self, step, replays=20, before_capture=None, refresh=None):
        self.steps += 1
        step()
        if before_capture is not None:
            before_capture()
        if refresh is not None:
            refresh()
        outs = step()
        return 100.0 + 4.0 * len(outs), outs

    def per_call(self, fn, x, weights, replays=15):
        return 1.0

    def weights(self, n, k, device):
        return [exactness.random_bf16(n, k, device=device)]


@pytest.fixture
def fake_router(monkeypatch):
    """A router whose table sends tiny's fp32 shapes to ExactFake on CPU (M 1-2)."""
    shapes = [(m, n, k) for m in (1, 2) for n, k in region.fp32_shapes(region.MODELS["tiny"])]
    routed = ExactFake()
    monkeypatch.setattr(routing, "build_router", lambda: make_router([routed], shapes=shapes))
    return routed


def test_bench_region_on_cpu_times_every_mode_and_checks_the_routes(tmp_path, capsys, fake_router):
    out = tmp_path / "out"
    argv = ["--region", "--region-model", "tiny", "--region-m", "1,2", "--out-dir", str(out)]
    timer = StepTimer()
    assert bench.main(argv, backends=[ColumnFake(name="col")], device=torch.device("cpu"), timer=timer) == 0
    doc = json.load(open(out / "bench_region.json"))
    assert doc["mode"] == "region" and doc["models"]["tiny"]["fp32_calls"] == 3
    rs = doc["results"]
    assert [(r["M"], r["schedule"]) for r in rs] == [(1, "overlapped"), (1, "serial"), (2, "overlapped"), (2, "serial")]
    r = rs[0]
    assert set(r["step_us"]) == {"none", "torch", "routed", "col"}
    assert r["rounds_step_us"]["none"] == [100.0] * 3  # --region-rounds defaults to 3
    assert r["add_per_layer_us"] == {"torch": 4.0, "routed": 4.0, "col": 4.0}  # 3 calls x 4 us / 3 layers
    assert all(v <= exactness.REL_TOL for v in r["rel_err"].values()) and all(r["allclose"].values())
    assert r["kernel"]["col"] == {"64": f"{FAKE_KERNEL} (first candidate)", "128": f"{FAKE_KERNEL} (first candidate)"}
    assert "vllm_ll" in r["note"]  # the peer column is absent on CPU, and the record says why
    chk = r["route_check"]
    assert chk["ok"] and chk["counted"] == {f"fake:{FAKE_KERNEL}": 3} == chk["expected"]
    assert timer.steps == 4 * 3 * 4  # 4 rows, 3 rounds of none, torch, routed, col
    assert (out / "bench_region.md").read_text().startswith("# Region")
    assert "route check: 4/4" in capsys.readouterr().out


class OneTokenPairFake(PairFake):
    """ColumnFake's candidates with a pair form that takes M=1 only."""

    def candidates(self, m, n, k):
        return [FakeCfg(FAKE_KERNEL)]

    def supports(self, cfg, m, n, k):
        return (True, "ok") if m == 1 else (False, f"M={m}: the pair form takes M=1")


def test_serial_rows_time_the_routed_column_with_each_ratio4_pair_as_one_launch(tmp_path, fake_router):
    from sglang_fp32gemm.tools.region_bench import PAIRED

    spec = region.MODELS["tiny"]
    n1, n2 = region.pair_widths(spec)
    pf = OneTokenPairFake(name="col")
    argv = ["--region", "--region-model", "tiny", "--region-m", "1,2", "--region-rounds", "1",
            "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[pf], device=torch.device("cpu"), timer=StepTimer()) == 0
    rs = {(r["M"], r["schedule"]): r for r in json.load(open(tmp_path / "bench_region.json"))["results"]}
    r = rs[(1, "serial")]
    assert PAIRED in r["step_us"] and r["allclose"][PAIRED] and r["rel_err"][PAIRED] <= exactness.REL_TOL
    assert pf.pair_binds == [(n1, n2, spec.hidden)]
    assert r["kernel"][PAIRED]["pair"].startswith(f"col {FAKE_KERNEL} (first candidate at N={n1 + n2})")
    # Timed alone: the pair's call, and the calls it does not cover (tiny's ratio-128 layer's N=64).
    assert set(r["isolated_us"][PAIRED]) == {"pair", "64"}
    assert r["isolated_per_layer_us"][PAIRED] == pytest.approx((1.0 + 1.0) / spec.layers, abs=1e-3)
    # Warm-up and capture: one pair call each for tiny's one ratio-4 layer; then its alone timing.
    assert pf.pair_runs >= 2
    # Overlapped rows put the two GEMMs on two streams: no pair column; at M=2 the form does not take the shape.
    assert PAIRED not in rs[(1, "overlapped")]["step_us"] and PAIRED not in rs[(1, "overlapped")]["note"]
    assert PAIRED not in rs[(2, "serial")]["step_us"] and "no candidate" in rs[(2, "serial")]["note"][PAIRED]


def test_the_pair_column_takes_the_serial_tables_row_at_the_joined_width_where_its_backend_has_a_pair_form(
        tmp_path, monkeypatch):
    spec = region.MODELS["tiny"]
    n1, n2 = region.pair_widths(spec)
    routed = OneTokenPairFake(name="fake")
    shapes = [(1, n, k) for n, k in region.fp32_shapes(spec)] + [(1, n1 + n2, spec.hidden)]
    monkeypatch.setattr(routing, "build_router", lambda: make_router([routed], shapes=shapes))
    other = OneTokenPairFake(name="col")
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--region-rounds", "1", "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[other], device=torch.device("cpu"), timer=StepTimer()) == 0
    from sglang_fp32gemm.tools.region_bench import PAIRED

    r = json.load(open(tmp_path / "bench_region.json"))["results"][0]
    assert r["kernel"][PAIRED]["pair"].startswith(f"fake {FAKE_KERNEL} (the serial table's row at N={n1 + n2})")
    assert routed.pair_binds == [(n1, n2, spec.hidden)] and other.pair_binds == []
    assert r["allclose"][PAIRED]


def test_the_routed_column_takes_the_plugins_pair_table_on_serial_layers(tmp_path, monkeypatch):
    """With a pair table the routed column makes each serial ratio-4 layer's two GEMMs as the plugin does (one
    pair launch), and the route check expects both calls under the pair's kernel."""
    spec = region.MODELS["tiny"]
    n1, n2 = region.pair_widths(spec)
    routed = PairFake(name="fake")
    shapes = [(1, n, k) for n, k in region.fp32_shapes(spec)]
    pair_table = fake_table([(1, n1 + n2, spec.hidden)], name="sm90_pair.csv")
    monkeypatch.setattr(routing, "build_router", lambda: make_router([routed], shapes=shapes, pair_table=pair_table))
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-rounds", "1",
            "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StepTimer()) == 0
    rs = {r["schedule"]: r for r in json.load(open(tmp_path / "bench_region.json"))["results"]}
    key = f"fake:{FAKE_KERNEL} pair {n1}+{n2}"
    serial, over = rs["serial"]["route_check"], rs["overlapped"]["route_check"]
    assert serial["ok"] and serial["expected"] == {f"fake:{FAKE_KERNEL}": 1, key: 2} == serial["counted"]
    assert over["ok"] and key not in over["counted"]  # two streams: each call its own route
    assert routed.pair_runs > 0 and rs["serial"]["allclose"]["routed"]


class SlowCaptureTimer(StepTimer):
    """As StepTimer, but the captures numbered in ``slow`` (1-based) run 50 us slower, as an overlapped
    region's capture now and then does on the H200 (docs/benchmarks/README.md)."""

    def __init__(self, slow):
        super().__init__()
        self.slow = set(slow)

    def step(self, step, replays=20, before_capture=None, refresh=None):
        us, outs = super().step(step, replays, before_capture, refresh)
        return us + (50.0 if self.steps in self.slow else 0.0), outs


def test_bench_region_counts_the_median_capture_of_interleaved_rounds(tmp_path, capsys, fake_router):
    # 5 rounds, each starting one mode later: (none, torch, routed), (torch, routed, none), (routed, none, torch), ...
    # captures 1 (none, round 1), 5 (routed, round 2) and 9 (torch, round 3) are slow
    timer = SlowCaptureTimer(slow={1, 5, 9})
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "overlapped",
            "--region-rounds", "5", "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=timer) == 0
    r = json.load(open(tmp_path / "bench_region.json"))["results"][0]
    assert timer.steps == 5 * 3
    assert r["rounds_step_us"] == {"none": [150.0] + [100.0] * 4, "torch": [112.0, 112.0, 162.0, 112.0, 112.0],
                                   "routed": [112.0, 162.0, 112.0, 112.0, 112.0]}
    assert r["step_us"] == {"none": 100.0, "torch": 112.0, "routed": 112.0}
    assert r["add_per_layer_us"] == {"torch": 4.0, "routed": 4.0}
    assert r["route_check"]["ok"] and all(r["allclose"].values())
    md = (tmp_path / "bench_region.md").read_text()
    assert "| 50.0 |" in md  # the widest spread of a mode's captures, in %
    assert "captures spread 50.0%" in capsys.readouterr().out


class StaleTimer(StepTimer):
    """As a graph that does not hold the fp32 kernels (launched outside the capture, they ran once, at capture
    time): x gets fresh values, and the outputs stay those of the capture."""

    def step(self, step, replays=20, before_capture=None, refresh=None):
        us, outs = super().step(step, replays, before_capture)
        if refresh is not None:
            refresh()
        return us, outs


def test_bench_region_checks_outputs_after_x_gets_fresh_values(tmp_path, capsys, fake_router):
    """An output computed once at capture time, not in the replays, is wrong after x changes: not exact."""
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--region-rounds", "1", "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StaleTimer()) == 0
    r = json.load(open(tmp_path / "bench_region.json"))["results"][0]
    assert r["allclose"] == {"torch": False, "routed": False}
    assert all(e > exactness.REL_TOL for e in r["rel_err"].values())
    assert "precision: 0/2 results exact; FAILED" in capsys.readouterr().out


@pytest.mark.parametrize("alone_us,suspect", [(1.0, False), (10.0, True)])
def test_a_serial_row_whose_columns_add_less_than_their_calls_alone_is_suspect(tmp_path, capsys, fake_router,
                                                                                alone_us, suspect):
    """Serial (one stream): each column's calls are timed alone at every fp32 shape. tiny has 3 calls in 3
    layers, each adding 4 us a layer in the step: against 1 us a call alone that fits; against 10 us a call
    alone (10 a layer) that is not their cost (run 22: the rest of the step ran faster than the base), the row
    says so, and the serial target is not measured at that M rather than met or missed."""
    from sglang_fp32gemm.tools import targets

    class Timer(StepTimer):
        def per_call(self, fn, x, weights, replays=15):
            return alone_us

    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--region-rounds", "1", "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=Timer()) == 0
    r = json.load(open(tmp_path / "bench_region.json"))["results"][0]
    assert r["isolated_per_layer_us"] == {"torch": alone_us, "routed": alone_us}
    assert r["isolated_us"]["routed"] == {"64": alone_us, "128": alone_us}
    assert sorted(r["suspect"]) == (["routed", "torch"] if suspect else [])
    out = capsys.readouterr().out
    assert ("SUSPECT" in out) is suspect and ("Suspect" in (tmp_path / "bench_region.md").read_text()) is suspect
    r["model"], r["add_per_layer_us"]["vllm_ll"] = "pro", 5.0  # as if V4-Pro with the peer's column
    v = targets.region_added([r], "serial", (1,), "t", lambda m, added: 0.9 * added["vllm_ll"], "vllm_ll")
    assert v.status == ("NODATA" if suspect else "PASS"), v
    assert not suspect or "M=1: suspect (routed added less than their calls alone)" in v.misses


def test_bench_region_leaves_a_mode_that_raises_out_of_the_later_rounds(tmp_path, fake_router, monkeypatch):
    from sglang_fp32gemm.tools import region_bench

    real = region_bench._fp32_modes

    def with_a_broken_column(bench_, ctx, m, schedule, rec):
        def broken(x, w):
            raise RuntimeError("kernel fault")

        return {**real(bench_, ctx, m, schedule, rec), "broken": {n: broken for n, _ in region.fp32_shapes(ctx.spec)}}

    monkeypatch.setattr(region_bench, "_fp32_modes", with_a_broken_column)
    timer = StepTimer()
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--region-rounds", "3", "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=timer) == 0
    r = json.load(open(tmp_path / "bench_region.json"))["results"][0]
    assert timer.steps == 3 * 3 + 1  # none, torch, routed in every round; broken once
    assert "broken" not in r["rounds_step_us"] and "kernel fault" in r["note"]["broken"]
    assert r["add_per_layer_us"] == {"torch": 4.0, "routed": 4.0}


def test_rotated_rounds_start_one_label_later_each_round():
    assert "".join(timing.rotated_rounds("abc", 4)) == "abc" "bca" "cab" "abc"
    assert list(timing.rotated_rounds({"none": 1, "torch": 2}, 2)) == ["none", "torch", "torch", "none"]
    assert list(timing.rotated_rounds([], 3)) == []
    labels = {"none": [], "torch": [], "routed": []}
    got = []
    for label in timing.rotated_rounds(labels, 3):  # a step that raises is dropped by its caller
        got.append(label)
        if label == "torch":
            del labels["torch"]
    assert got == ["none", "torch", "routed", "routed", "none", "routed", "none"]


def test_the_timer_captures_privately_or_as_sglang_does(monkeypatch):
    """private: a fresh stream and no shared pool per graph; sglang (the default): one stream and one pool
    for every graph."""
    made = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: made.append("stream") or object())
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: made.append("pool") or ("pool", len(made)))
    private = timing.CudaTimer("private")
    (s1, p1), (s2, p2) = private._capture_on(), private._capture_on()
    assert s1 is not s2 and p1 is None and p2 is None
    shared = timing.CudaTimer()
    assert shared.capture == "sglang"
    assert shared._capture_on() == shared._capture_on() and shared._capture_on()[1] is not None
    assert made == ["stream", "stream", "stream", "pool"]
    with pytest.raises(ValueError, match="one of sglang, private"):
        timing.CudaTimer("shared")


def test_bench_passes_the_capture_setting_to_its_timer_and_records_it(tmp_path, monkeypatch, fake_router):
    made = []

    class Recorder(StepTimer):
        def __init__(self, capture):
            super().__init__()
            self.capture = capture
            made.append(capture)

    monkeypatch.setattr(timing, "CudaTimer", Recorder)
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--region-rounds", "1", "--out-dir", str(tmp_path)]
    for capture in ("private", "sglang"):
        d = tmp_path / capture
        assert bench.main(argv + ["--capture", capture, "--out-dir", str(d)], backends=[],
                          device=torch.device("cpu")) == 0
        assert json.load(open(d / "bench_region.json"))["capture"] == capture
    assert bench.main(argv, backends=[], device=torch.device("cpu")) == 0  # the default: SGLang's way
    assert made == ["private", "sglang", "sglang"]


def test_route_check_fails_when_a_call_is_not_where_the_table_says(tmp_path, fake_router, monkeypatch):
    from sglang_fp32gemm.tools import region_bench

    real = region_bench._route_check
    # a captured call counted under another key (as if it had run on torch) must fail the check
    monkeypatch.setattr(region_bench, "_route_check",
                        lambda ctx, x, counted, schedule: real(ctx, x, {("torch", "x"): 1, **counted}, schedule))
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StepTimer()) == 0
    assert json.load(open(tmp_path / "bench_region.json"))["results"][0]["route_check"]["ok"] is False


def test_route_check_failing_in_one_capture_fails_the_row(tmp_path, fake_router, monkeypatch):
    from sglang_fp32gemm.tools import region_bench

    real, calls = region_bench._route_check, []

    def second_capture_off(ctx, x, counted, schedule):  # the routed step's second capture ran torch once
        calls.append(1)
        return real(ctx, x, {("torch", "x"): 1, **counted} if len(calls) == 2 else counted, schedule)

    monkeypatch.setattr(region_bench, "_route_check", second_capture_off)
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StepTimer()) == 0
    assert len(calls) == 3
    chk = json.load(open(tmp_path / "bench_region.json"))["results"][0]["route_check"]
    assert chk["ok"] is False and chk["counted"]["torch:x"] == 1


def test_schedule_follows_sglangs_multi_stream_limit(monkeypatch):
    """Overlapped up to bs 64 on Hopper (and off CUDA), up to 128 where SGLang sees Blackwell."""
    assert [region.schedule_for(m) for m in (1, 64, 65)] == ["overlapped", "overlapped", "serial"]
    for major, limit in ((9, 64), (10, 128), (12, 128)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
        assert region.schedule_for(limit, "cuda:0") == "overlapped"
        assert region.schedule_for(limit + 1, "cuda:0") == "serial"
        assert region.schedule_for(limit + 1, "cpu") == "serial"


def test_route_check_passes_torch_rows(tmp_path, monkeypatch):
    """A libtype torch row (the tuner writes one where torch wins) names no kernel: its calls on torch pass."""
    shapes = [(m, n, k) for m in (1, 2) for n, k in region.fp32_shapes(region.MODELS["tiny"])]
    table = fake_table(shapes, libtype="torch", kernel="")
    monkeypatch.setattr(routing, "build_router", lambda: make_router([ExactFake()], table=table))
    argv = ["--region", "--region-model", "tiny", "--region-m", "1", "--region-schedule", "serial",
            "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StepTimer()) == 0
    chk = json.load(open(tmp_path / "bench_region.json"))["results"][0]["route_check"]
    assert chk["ok"] is True and set(chk["table"].values()) == {"torch:row fake.csv:2: libtype torch is served by torch",
                                                                  "torch:row fake.csv:3: libtype torch is served by torch"}


@pytest.mark.parametrize("args, what", [
    (["--region-model", "ultra"], "unknown model ultra"),
    (["--region-schedule", "overlapped,parallel"], "unknown schedule parallel"),
    (["--region-m", "0"], "--region-m"),
    (["--region-replays", "0"], "--region-replays"),
])
def test_region_argument_errors_are_one_line_and_exit_2(args, what, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--region", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and what in err


def test_region_defaults():
    a = bench.parser().parse_args(["--region"])
    assert a.region and a.region_model == ["pro"] and a.region_m == [1, 2, 4, 8, 16, 32, 64]
    assert a.region_schedule == ["overlapped", "serial"] and a.peer
    a = bench.parser().parse_args(["--region", "--region-model", "pro,flash", "--region-schedule", "serial"])
    assert a.region_model == ["pro", "flash"] and a.region_schedule == ["serial"]


def test_a_process_first_serial_capture_comes_after_one_overlapped_capture(monkeypatch, caplog):
    """region.overlapped_first: on CUDA, before any overlapped step was made in the process, one is captured
    (torch at every fp32 GEMM) through the timer; then, or once any overlapped step was made, nothing."""
    spec = region.MODELS["tiny"]
    x = torch.randn(1, spec.hidden).bfloat16()
    weights = region.make_weights(spec, "cpu")
    streams = region.Streams("cpu")
    captured = []

    class Timer:
        def step(self, fn, replays):
            captured.append(replays)
            return 1.0, []

    monkeypatch.setattr(region, "_overlapped_made", False)
    assert region.overlapped_first(Timer(), spec, weights, x, streams, timing.torch_mm) is False  # off CUDA
    streams.cuda = True  # as on a GPU; the fake timer never runs the step
    assert region.overlapped_first(Timer(), spec, weights, x, streams, timing.torch_mm) is True
    assert captured == [3] and region._overlapped_made
    assert region.overlapped_first(Timer(), spec, weights, x, streams, timing.torch_mm) is False
    monkeypatch.setattr(region, "_overlapped_made", False)
    region.Steps(spec, region.plan(spec, "serial"), weights, x, streams).of(None)  # a serial step: not it
    assert not region._overlapped_made
    region.Steps(spec, region.plan(spec, "overlapped"), weights, x, streams).of(None)  # made by a bench's row
    assert region._overlapped_made and captured == [3]
    assert region.overlapped_first(Timer(), spec, weights, x, streams, timing.torch_mm) is False

    class Failing:
        def step(self, fn, replays):
            raise RuntimeError("out of memory")

    monkeypatch.setattr(region, "_overlapped_made", False)
    with caplog.at_level(logging.WARNING, logger="sglang_fp32gemm.tools.region"):
        assert region.overlapped_first(Failing(), spec, weights, x, streams, timing.torch_mm) is False
    assert "serial steps are timed without it" in caplog.text and "out of memory" in caplog.text


def test_bench_region_captures_one_overlapped_step_before_a_process_first_serial_row(tmp_path, monkeypatch,
                                                                                      fake_router):
    """Serial rows ask region.overlapped_first (with the bench's timer and torch); the row says when it captured
    one, which on CUDA is the process's first serial row unless an overlapped row came first (run 22)."""
    asked = []

    def first(timer, spec, weights, x, streams, torch_fn):
        asked.append((spec.name, torch_fn is timing.torch_fn(torch.device("cpu"))))
        return len(asked) == 1

    monkeypatch.setattr(region, "overlapped_first", first)
    argv = ["--region", "--region-model", "tiny", "--region-m", "1,2", "--region-schedule", "overlapped,serial",
            "--region-rounds", "1", "--out-dir", str(tmp_path)]
    assert bench.main(argv, backends=[], device=torch.device("cpu"), timer=StepTimer()) == 0
    rows = json.load(open(tmp_path / "bench_region.json"))["results"]
    assert asked == [("tiny", True), ("tiny", True)]  # the two serial rows, not the overlapped ones
    assert [("overlapped_first" in r["note"]) for r in rows if r["schedule"] == "serial"] == [True, False]
    assert not any("overlapped_first" in r["note"] for r in rows if r["schedule"] == "overlapped")
