"""The serial table: calls outside SGLang's multi-stream region take its rows; calls inside take the
fast table's (ranked beside the other streams); CPU, fake backends, the real router."""

from __future__ import annotations

import os

import pytest
import torch

from conftest import assert_fp32_close, rand_bf16
from fakes.fake_backends import (FAKE_KERNEL, FAKE_KEY, OTHER_KERNEL, DecliningFake, ExactFake, UnavailableFake,
                                 fake_table, make_router, rows_csv)
from sglang_fp32gemm import explain as explain_mod
from sglang_fp32gemm import routing
from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm.table import DeviceKey, TunedTable, TunedTables, parse_csv, table_of
from sglang_fp32gemm.tools import region

N, K = 32, 64
# Fast table: FAKE at M 1 and 2, torch at M 4 (torch won beside the other streams).
FAST = [(1, N, K, FAKE_KERNEL), (2, N, K, FAKE_KERNEL)]
# Serial table: OTHER at M 1 and 4 (a kernel where the fast table has torch), torch at M 2.
SERIAL_KERNELS = [(1, N, K, OTHER_KERNEL), (4, N, K, OTHER_KERNEL)]


def tables():
    """(fast, serial): one libtype per file, so the torch rows go into files of their own."""
    fast = TunedTable([("fake.csv", parse_csv(rows_csv(FAST), "fake.csv")),
                       ("pins.csv", parse_csv(rows_csv([(4, N, K)], libtype="torch", kernel=""), "pins.csv"))])
    serial = TunedTable([("fake_serial.csv", parse_csv(rows_csv(SERIAL_KERNELS), "fake_serial.csv")),
                         ("pins_serial.csv", parse_csv(rows_csv([(2, N, K)], libtype="torch", kernel=""),
                                                       "pins_serial.csv"))])
    return fast, serial


def fast_backend(cls=ExactFake, **kw):
    return cls(name="fast", kernels=(FAKE_KERNEL, OTHER_KERNEL), **kw)


def call(r, m: int, w) -> tuple[str, str]:
    x = rand_bf16(m, K)
    before = r.counters()
    out = r.call(x, w)
    assert_fp32_close(out, x, w)
    (key,) = [k for k, v in r.counters().items() if v != before.get(k, 0)]
    return key


@pytest.fixture
def capture(monkeypatch) -> list:
    state = [False]
    monkeypatch.setattr(routing, "capturing", lambda x: state[0])
    return state


@pytest.mark.parametrize("captured", [False, True])
def test_calls_outside_the_region_take_the_serial_rows_and_calls_inside_the_fast_rows(capture, captured):
    capture[0] = captured
    fast, serial = tables()
    r = make_router([fast_backend()], table=fast, serial_table=serial)
    w = rand_bf16(N, K)
    for _ in range(2):  # resolved once, then from the table
        assert call(r, 1, w) == ("fast", OTHER_KERNEL)
        assert call(r, 2, w)[0] == "torch"  # the serial table's torch row
        assert call(r, 4, w) == ("fast", OTHER_KERNEL)
        with routing.overlapped():
            assert routing.in_overlapped_region()
            assert call(r, 1, w) == ("fast", FAKE_KERNEL)
            assert call(r, 2, w) == ("fast", FAKE_KERNEL)
            assert call(r, 4, w)[0] == "torch"  # the fast table's torch row
        assert not routing.in_overlapped_region()


def test_without_a_serial_table_every_call_takes_the_fast_rows(capture):
    fast, _ = tables()
    r = make_router([fast_backend()], table=fast)
    assert r.serial_routes is None and r.route_tables() == [r.routes]
    w = rand_bf16(N, K)
    assert call(r, 1, w) == ("fast", FAKE_KERNEL)
    with routing.overlapped():
        assert call(r, 1, w) == ("fast", FAKE_KERNEL)


def test_deterministic_mode_ignores_the_serial_table(capture):
    fast, serial = tables()
    r = make_router([fast_backend()], table=fast, det_table=fast, deterministic=True, serial_table=serial)
    assert r.serial_routes is None
    assert call(r, 1, rand_bf16(N, K)) == ("fast", FAKE_KERNEL)


def test_a_router_made_where_the_region_is_unmarked_ignores_the_serial_table(monkeypatch):
    """Where the plugin could not hook SGLang's multi-stream prepares, nothing marks the region: the fast
    table's rows (what every call took before the serial table existed) serve every call."""
    fast, serial = tables()
    monkeypatch.setattr(routing, "serial_routes_allowed", False)
    r = make_router([fast_backend()], table=fast, serial_table=serial)
    assert r.serial_routes is None


@pytest.mark.parametrize("cls", [UnavailableFake, DecliningFake])
def test_a_serial_row_that_cannot_serve_leaves_the_call_on_the_fast_row(capture, cls):
    """A serial row whose backend is missing or declines the call: the fast row's kernel, not torch."""
    fast, _ = tables()
    other = cls(name="other", kernels=("other_serial_kernel",), libtype="cutedsl")
    serial = fake_table([(1, N, K, "other_serial_kernel")], name="fake_serial.csv", libtype="cutedsl")
    r = make_router([fast_backend(), other], table=fast, serial_table=serial)
    w = rand_bf16(N, K)
    assert call(r, 1, w) == ("fast", FAKE_KERNEL)
    assert "the serial row cannot serve" in r.resolve(torch.device("cpu"), 1, N, K, serial=True).reason


def test_a_kernel_disabled_at_run_time_is_retired_from_both_route_tables(capture):
    fast, serial = tables()
    f = fast_backend()
    r = make_router([f], table=fast, serial_table=fast)  # both tables route M=1 to FAKE
    w = rand_bf16(N, K)
    assert call(r, 1, w) == ("fast", FAKE_KERNEL)
    with routing.overlapped():
        assert call(r, 1, w) == ("fast", FAKE_KERNEL)
    (bound,) = [b for b in r.bound_kernels() if b.kernel_name == FAKE_KERNEL]
    r.kernels.disable(bound, torch.device("cpu"), RuntimeError("test"))
    assert call(r, 1, w)[0] == "torch"
    with routing.overlapped():
        assert call(r, 1, w)[0] == "torch"


def test_the_mark_nests_and_is_per_thread():
    import threading

    seen = []
    with routing.overlapped():
        with routing.overlapped():
            pass
        assert routing.in_overlapped_region()
        t = threading.Thread(target=lambda: seen.append(routing.in_overlapped_region()))
        t.start()
        t.join()
    assert seen == [False] and not routing.in_overlapped_region()


def test_explain_names_the_route_outside_the_region_where_it_differs():
    fast, serial = tables()
    r = make_router([fast_backend()], table=fast, serial_table=serial)
    text = explain_mod._shape_route(r, FAKE_KEY, None, 1, N, K)
    assert text.startswith(f"fast {FAKE_KERNEL}") and \
        f"; outside SGLang's multi-stream region: fast {OTHER_KERNEL}" in text
    assert "outside" not in explain_mod._shape_route(make_router([fast_backend()], table=fast, serial_table=fast),
                                                     FAKE_KEY, None, 1, N, K)


def test_serial_files_are_laid_over_the_fast_table_by_config_load(tmp_path):
    assert table_of("x/sm90_serial.csv") == "serial" and table_of("sm90_serial_deterministic.csv") == "deterministic"
    path = tmp_path / "mine_serial.csv"
    path.write_text(rows_csv([(1, 512, 7168)], libtype="torch", kernel="", gfx="sm90", cu_num=132))
    t = TunedTables.load([str(path)])
    assert t.serial.lookup(DeviceKey("sm90", 132), 1, 512, 7168).source == f"{path}:2"  # over the packaged one
    env = {"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1", "SGLANG_FLYDSL_FP32_GEMM_CONFIG": str(path)}
    cfg = config_mod.load(env)
    assert cfg.serial_table is not None and cfg.serial_table.files[-1] == str(path)
    key = DeviceKey("sm90", 132)
    assert cfg.serial_table.lookup(key, 1, 512, 7168).source == f"{path}:2"
    # Every key the serial files do not name keeps the fast table's row.
    named = {r.key for r in t.serial.rows()}
    for row in cfg.table.rows():
        if row.key not in named:
            assert cfg.serial_table.lookup(DeviceKey(row.gfx, row.cu_num), row.M, row.N, row.K) == row


def test_a_users_fast_file_overrides_the_packaged_serial_rows_outside_the_region(tmp_path):
    """README: later files override earlier ones and the packaged rows. A user's fast file (run 25f's rows,
    named without _serial) serves calls outside the multi-stream region too, over the packaged serial row of
    its key; among the user's files the later one wins, whichever table each feeds."""
    key = DeviceKey("sm90", 132)
    packaged = TunedTables.load([])
    assert packaged.serial.lookup(key, 1, 1024, 7168) is not None  # the row the user's file must beat
    mine = tmp_path / "mine.csv"
    mine.write_text(rows_csv([(1, 1024, 7168), (1, 2048, 7168)], libtype="torch", kernel="", gfx="sm90",
                             cu_num=132))
    cfg = config_mod.load({"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1", "SGLANG_FLYDSL_FP32_GEMM_CONFIG": str(mine)})
    assert cfg.serial_table.lookup(key, 1, 1024, 7168).source == f"{mine}:2"
    assert cfg.table.lookup(key, 1, 1024, 7168).source == f"{mine}:2"
    # Keys the user's file does not name keep the packaged serial rows.
    assert cfg.serial_table.lookup(key, 1, 2560, 7168) == packaged.serial.lookup(key, 1, 2560, 7168)
    # A user's serial file given after the fast one wins outside the region; given before it, it does not.
    mine_serial = tmp_path / "mine_serial.csv"
    mine_serial.write_text(rows_csv([(1, 1024, 7168)], libtype="torch", kernel="", gfx="sm90", cu_num=132))
    for order, winner in (((mine, mine_serial), mine_serial), ((mine_serial, mine), mine)):
        env = {"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1",
               "SGLANG_FLYDSL_FP32_GEMM_CONFIG": os.pathsep.join(str(p) for p in order)}
        assert config_mod.load(env).serial_table.lookup(key, 1, 1024, 7168).source == f"{winner}:2"


def test_explain_for_an_h200_shows_the_shipped_serial_rows():
    """Run 15's serial table: at M 1-2 outside the region V4-Pro's three GEMMs run the dot kernel or
    Triton, where the fast table (ranked beside SGLang's side streams) has other rows for N=512: torch's until
    run 26, Triton's split-K since (run 26e: it hides behind the other streams, the dot kernel does not)."""
    code, text = explain_mod.explain("sm90:132", max_m=4)
    assert code == 0, text
    block = text.split("N=512 K=7168 (V4-Pro indexer kv_score):")[1].split("  N=")[0]
    m1 = next(line for line in block.splitlines() if line.strip().startswith("M=1 "))
    assert m1.strip().startswith("M=1        triton triton_epoch_fp32_bm16_bn64_bk64_sk16_w4_s6 (row configs/sm90.csv:"), m1
    assert "; outside SGLang's multi-stream region: cutedsl-dot cutedsl_dot_m1_" in m1 and \
        "(row configs/sm90_serial.csv:" in m1, m1


def test_the_region_model_marks_its_overlapped_layers_as_sglang_does():
    """Each fp32 GEMM of an overlapped layer runs inside the mark, each of a serial one outside it."""
    spec = region.MODELS["tiny"]
    weights = region.make_weights(spec, "cpu")
    x = rand_bf16(2, spec.hidden)
    for schedule, want in (("overlapped", True), ("serial", False)):
        seen = []

        def gemm(a, b):
            seen.append(routing.in_overlapped_region())
            return a.float() @ b.float().t()

        region.run_layers(region.plan(spec, schedule), weights, x, {n: gemm for n, _ in region.fp32_shapes(spec)},
                          region.Streams("cpu"))
        assert seen and set(seen) == {want}, schedule
    assert not routing.in_overlapped_region()


def test_the_region_hook_traces_under_fullgraph_compile():
    """Dynamo cannot guard the thread-local mark: traced, the hook marks nothing (the GEMM's custom op then
    decides outside the mark, on the serial rows) and the traced function still runs, call after call."""
    from sglang_fp32gemm import hooks

    seen = []

    @torch.library.custom_op("sglang_fp32gemm_test::region_probe", mutates_args=())
    def region_probe(a: torch.Tensor) -> torch.Tensor:
        seen.append(routing.in_overlapped_region())
        return a * 2

    @region_probe.register_fake
    def _(a):
        return torch.empty_like(a)

    def prepare(self, a):
        return torch.ops.sglang_fp32gemm_test.region_probe(a) + 1

    f = torch.compile(lambda a: hooks.around_overlapped(prepare, None, a), fullgraph=True, backend="aot_eager")
    for _ in range(2):
        a = torch.randn(4)
        assert torch.equal(f(a), a * 2 + 1)
    assert seen == [False, False]
    # run eagerly, the hook marks the region around the call
    assert torch.equal(hooks.around_overlapped(prepare, None, a), a * 2 + 1) and seen[-1] is True


def test_the_packaged_pair_rows_route_v4_pro_and_v4_flash_at_m_1_to_64(monkeypatch):
    """configs/sm90_pair.csv: V4-Pro's ratio-4 pair (runs 23-24, M 1-16; run 31i, M 32 and 64) and V4-Flash's
    (run 25b, M 1-16; run 35a, M 32 and 64) are one launch at M 1-64 on a 132-SM sm90 device (the M between rows
    by aiter's bucketing), each call its own route above. V4-Pro: the dot pair at M 1-2 (M=2 an _lw placement,
    run 33f), Triton's above; V4-Flash: the dot pair at M 1-2 (M=2 a _bx form), Triton's above."""
    monkeypatch.delenv("SGLANG_FLYDSL_FP32_GEMM_CONFIG", raising=False)
    code, text = explain_mod.explain("sm90:132", max_m=128)
    assert code == 0, text
    assert "pair table: configs/sm90_pair.csv (" in text
    # Per K: the dot pair's rows from M=1 as (kernel, file line), then Triton's pair at M 17-32 and 33-64 as
    # (M, kernel, file line): V4-Pro's from run 31i, V4-Flash's from run 35a, each A/B-checked in the serial
    # schedule on an H100. No pair row from M=65.
    for k, dot, above16 in ((7168, [("cutedsl_dot_m1_t448_r1_pdl", 2), ("cutedsl_dot_m2_t224_r1_pdl_lw_bx_mb1", 3)],
                             [("17-32", "triton_epoch_fp32_bm32_bn64_bk64_sk8_w4_s4", 12),
                              ("33-64", "triton_epoch_fp32_bm64_bn64_bk64_sk8_w4_s4", 13)]),
                            (4096, [("cutedsl_dot_m1_t256_r1_pdl", 7), ("cutedsl_dot_m2_t256_r1_pdl_bx", 8)],
                             [("17-32", "triton_epoch_fp32_bm32_bn64_bk64_sk8_w4_s4", 14),
                              ("33-64", "triton_epoch_fp32_bm64_bn64_bk64_sk4_w4_s4", 15)])):
        block = text.split(f"N=512+2048 K={k}")[1].split("  N=")[0]
        lines = [line.strip() for line in block.splitlines()[1:] if line.strip().startswith("M=")]
        for m, (kernel, line_no) in enumerate(dot, 1):
            assert lines[m - 1].startswith(f"M={m:<9}cutedsl-dot {kernel} pair 512+2048 (row "
                                           f"configs/sm90_pair.csv:{line_no})"), lines
        assert all(" triton " in line for line in lines[len(dot):-1]), lines
        assert all(" triton triton_epoch_fp32_bm16_bn64_bk" in line for line in lines[len(dot):len(dot) + 3]), lines
        for ms, kernel, line_no in above16:
            assert f"M={ms:<9}triton {kernel} pair 512+2048 (row configs/sm90_pair.csv:{line_no})" in block, block
        assert lines[-1] == f"{'M=65-128':<11}each call its own route", lines


def test_a_pair_row_naming_a_capped_dot_form_stops_the_start_up_naming_its_line(tmp_path):
    """The dot kernel's ``_g`` forms have no pair form (stop 39): a pair file naming one is a bad configuration,
    one line naming the file, the line and why, while the same name in a fast file loads."""
    from sglang_fp32gemm.backends import default_backends, parsers
    from sglang_fp32gemm.errors import ConfigError

    name = "cutedsl_dot_m1_t448_r1_pdl_g132"
    backends = default_backends()
    for suffix, ok in (("_pair", False), ("", True)):
        path = tmp_path / f"mine{suffix}.csv"
        shape = (1, 2560, 7168, name) if suffix else (1, 2048, 7168, name)
        path.write_text(rows_csv([shape], libtype="cutedsl", gfx="sm90", cu_num=132))
        env = {"SGLANG_ENABLE_FLYDSL_FP32_GEMM": "1", "SGLANG_FLYDSL_FP32_GEMM_CONFIG": str(path)}
        if ok:
            config_mod.load(env, parsers=parsers(backends), pair_parsers=parsers(backends, pair=True))
            continue
        with pytest.raises(ConfigError) as e:
            config_mod.load(env, parsers=parsers(backends), pair_parsers=parsers(backends, pair=True))
        assert f"{path}:2" in str(e.value) and "a pair form takes no _g cap" in str(e.value), str(e.value)
        assert "\n" not in str(e.value)


def test_explain_with_a_pair_file_shows_its_pair_routes(tmp_path, monkeypatch):
    """A pair file: explain names it and, for V4-Pro's ratio-4 pair, the pair kernel at the M its row serves
    (aiter's lookup: the M=2 row serves M=2 alone) and each call its own route elsewhere. An sm90 device
    with 114 SMs (an H100 PCIe), which the packaged pair rows (132 SMs) do not serve."""
    path = tmp_path / "mine_pair.csv"
    path.write_text(rows_csv([(2, 2560, 7168, "cutedsl_dot_m2_t448_r2_pdl")], libtype="cutedsl", gfx="sm90",
                             cu_num=114))
    monkeypatch.setenv("SGLANG_FLYDSL_FP32_GEMM_CONFIG", str(path))
    code, text = explain_mod.explain("sm90:114", max_m=4)
    assert code == 0, text
    assert f"pair table: configs/sm90_pair.csv, {path} (" in text
    block = text.split("N=512+2048 K=7168")[1].split("  N=")[0]
    lines = [line.strip() for line in block.splitlines()[1:] if line.strip()]
    assert lines[0] == "M=1        each call its own route", lines
    assert lines[1].startswith(f"M=2        cutedsl-dot cutedsl_dot_m2_t448_r2_pdl pair 512+2048 (row {path}:2)"), lines
    assert lines[2] == "M=3-4      each call its own route", lines


def test_calls_outside_the_region_never_take_the_packaged_overlapped_rows_at_the_compressor_shapes():
    """Runs 30-31 shipped fast-table rows that win only beside SGLang's side streams (Triton grids of half a
    wave: 13.8-15.7 us alone at N=2048 where the rows before took 12.7-13.5, run 31). Calls outside the
    multi-stream region (serial steps, eager calls, isolated ones) read the packaged serial file first, so at
    V4-Pro's and V4-Flash's three compressor widths every M up to the multi-stream limit (64 on Hopper)
    takes a row of configs/sm90_serial.csv, never one of configs/sm90.csv."""
    tables = TunedTables.load([])
    key = DeviceKey("sm90", 132)
    for k in (7168, 4096):
        for n in (512, 1024, 2048):
            for m in range(1, 65):
                row = tables.outside.lookup(key, m, n, k)
                assert row is not None and row.source.startswith("configs/sm90_serial.csv:"), (m, n, k, row)
                fast = tables.fast.lookup(key, m, n, k)
                assert fast is not None and fast.source.startswith("configs/sm90.csv:"), (m, n, k, fast)
    # The half-wave grid the fast table ships at M=16 N=2048 K=7168 is not what calls outside the region run.
    assert tables.fast.lookup(key, 16, 2048, 7168).kernelName == "triton_epoch_fp32_bm16_bn64_bk256_sk2_w4_s3"
    assert tables.outside.lookup(key, 16, 2048, 7168).kernelName != "triton_epoch_fp32_bm16_bn64_bk256_sk2_w4_s3"
