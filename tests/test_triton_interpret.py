"""The Triton split-K kernel itself, on CPU under TRITON_INTERPRET=1, and its config names.

The interpreter must be chosen before triton is imported, and this pytest
process may already have imported it (SGLang imports triton), so the kernel
runs in one subprocess that reports every case as JSON.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_python, subprocess_env
from sglang_fp32gemm.backends.triton_splitk import SplitKConfig

# (bm, bn, bk, split_k, warps, stages), and (M, N, K) shapes for it.
CASES = [
    ((16, 32, 16, 1, 4, 1), (1, 64, 48)),
    ((16, 32, 16, 1, 4, 1), (37, 32, 16)),
    ((16, 16, 16, 2, 4, 1), (5, 48, 64)),
    ((16, 16, 32, 2, 2, 3), (16, 32, 128)),
    ((32, 16, 16, 7, 4, 2), (33, 32, 224)),
    ((16, 64, 16, 7, 8, 1), (2, 64, 112)),
    ((32, 32, 16, 3, 4, 1), (70, 64, 96)),
]

_SCRIPT = r'''
import json, os, sys
assert os.environ.get("TRITON_INTERPRET") == "1"
assert "triton" not in sys.modules
import torch
from sglang_fp32gemm.backends import triton_splitk as T
from sglang_fp32gemm.backends.triton_splitk import SplitKConfig, TritonSplitKBackend

cases = json.loads(sys.argv[1])
g = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
report = {"cases": []}

def rel(out, ref):
    return float((out.double() - ref).norm() / ref.norm())

for cfg_t, (m, n, k) in cases:
    cfg = SplitKConfig(*cfg_t)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    ref = x.double() @ w.double().t()
    out = torch.full((m, n), float("nan"))
    ws = torch.full((max(1, cfg.workspace_floats(m, n)),), float("nan"))
    cnt = torch.zeros(cfg.counters(m, n), dtype=torch.int32)
    T.launch(x, w, cfg, out, ws, cnt)
    first = out.clone()
    out2 = torch.full((m, n), float("nan"))
    T.launch(x, w, cfg, out2, ws, cnt)  # reuses the counters the first launch left
    report["cases"].append({
        "name": cfg.name, "shape": [m, n, k],
        "rel": rel(first, ref) if bool(torch.isfinite(first).all()) else float("inf"),
        "nan": int(torch.isnan(first).sum()),
        "close": bool(torch.allclose(first.double(), ref, atol=1e-2, rtol=1e-4)),
        "dtype": str(first.dtype),
        "counters_zero": int(cnt.abs().sum()) == 0,
        "repeat_equal": bool(torch.equal(first, out2)),
    })

# Through the router: a real TritonSplitKBackend whose run uses CPU buffers.
from fakes.fake_backends import make_router

class CpuTriton(TritonSplitKBackend):
    def available(self):
        return (True, "ok")
    def prepare(self, device, rows):
        pass  # the real one sizes CUDA workspaces
    def supports(self, x, w, row):
        if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16 or not (x.is_contiguous() and w.is_contiguous()):
            return (False, "needs contiguous bf16")
        return self.config(row).check_shape(x.shape[0], w.shape[0], x.shape[1])
    def run(self, x, w, row):
        cfg = self.config(row)
        m, n = x.shape[0], w.shape[0]
        out = torch.full((m, n), float("nan"))
        ws = torch.full((max(1, cfg.workspace_floats(m, n)),), float("nan"))
        cnt = torch.zeros(cfg.counters(m, n), dtype=torch.int32)
        self.last_counters = cnt
        return T.launch(x, w, cfg, out, ws, cnt)

from sglang_fp32gemm.table import TunedTable, parse_csv
from fakes.fake_backends import rows_csv
name = SplitKConfig(16, 16, 16, 2, 4, 1).name
table = TunedTable([("t.csv", parse_csv(rows_csv([(8, 32, 64), (16, 32, 64)], kernel=name), "t.csv"))])
b = CpuTriton()
r = make_router([b], table=table)
routed = []
for m in (3, 8, 13):
    x = torch.randn(m, 64, generator=g).to(torch.bfloat16)
    w = torch.randn(32, 64, generator=g).to(torch.bfloat16)
    out = r.call(x, w)
    routed.append({"m": m, "rel": rel(out, x.double() @ w.double().t()),
                   "counters_zero": int(b.last_counters.abs().sum()) == 0})
report["routed"] = routed
report["counters"] = {f"{a}|{b_}": v for (a, b_), v in r.counters().items()}
report["probe_ok"] = [p.ok for p in r.probes().values()]
print("REPORT " + json.dumps(report))
'''


@pytest.fixture(scope="module")
def report():
    proc = run_python(_SCRIPT, json.dumps(CASES), env=subprocess_env(TRITON_INTERPRET="1"), timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("REPORT "):])


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{SplitKConfig(*c).name}-M{s[0]}N{s[1]}K{s[2]}"
                                                     for c, s in CASES])
def test_interpreted_kernel_is_fp32_exact_and_writes_every_element(report, i):
    c = report["cases"][i]
    assert c["shape"] == list(CASES[i][1]) and c["name"] == SplitKConfig(*CASES[i][0]).name
    assert c["dtype"] == "torch.float32"
    assert c["nan"] == 0, c  # output was poisoned with NaN: every element is written
    assert c["rel"] <= 1e-5, c
    assert c["close"], c


@pytest.mark.parametrize("i", range(len(CASES)))
def test_interpreted_kernel_leaves_counters_at_zero_and_repeats_bitwise(report, i):
    c = report["cases"][i]
    assert c["counters_zero"], c
    assert c["repeat_equal"], c


def test_cases_cover_split_k_1_2_7_and_partial_m_tiles():
    cfgs = [SplitKConfig(*c) for c, _ in CASES]
    assert {1, 2, 7} <= {c.split_k for c in cfgs}
    assert any(s[0] % c.bm for c, (_, s) in zip(cfgs, CASES))


def test_router_reaches_the_real_kernel_and_it_passes_the_probe(report):
    assert report["probe_ok"] == [True]
    assert report["counters"] == {"triton|ok": 3}
    for r in report["routed"]:
        assert r["rel"] <= 1e-5 and r["counters_zero"], r


# -- config names ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [SplitKConfig(16, 32, 64, 8, 4, 5), SplitKConfig(64, 32, 256, 2, 4, 4),
                                 SplitKConfig(16, 16, 16, 1, 1, 1), SplitKConfig(128, 256, 512, 13, 16, 7)])
def test_split_k_config_name_round_trips(cfg):
    assert SplitKConfig.parse(cfg.name) == cfg
    assert cfg.name.startswith("triton_splitk_fp32_")


def test_packaged_sm90_kernel_names_parse():
    from sglang_fp32gemm.table import TunedTable

    rows = [r for r in TunedTable.load().rows() if r.libtype == "triton"]
    assert rows
    for r in rows:
        cfg = SplitKConfig.parse(r.kernelName)
        assert cfg.name == r.kernelName
        assert cfg.check_shape(r.M, r.N, r.K) == (True, "ok"), r
        assert cfg.split_k == r.splitK, r


@pytest.mark.parametrize("name", [
    "", "triton_splitk_fp32_bm16_bn32_bk64_sk8_w4", "triton_splitk_fp16_bm16_bn32_bk64_sk8_w4_s5",
    "triton_splitk_fp32_bm16_bn32_bk64_sk8_w4_s5_extra", "flydsl_hgemm_abf16_wbf16_fp32_t16x64x128x4",
    "triton_splitk_fp32_bmX_bn32_bk64_sk8_w4_s5", "TRITON_SPLITK_FP32_BM16_BN32_BK64_SK8_W4_S5",
])
def test_malformed_names_are_rejected_with_the_expected_form(name):
    with pytest.raises(ValueError, match="is not of the form"):
        SplitKConfig.parse(name)


@pytest.mark.parametrize("name", [
    "triton_splitk_fp32_bm24_bn32_bk64_sk8_w4_s5",   # BM not a power of two
    "triton_splitk_fp32_bm8_bn32_bk64_sk8_w4_s5",    # BM < 16
    "triton_splitk_fp32_bm16_bn32_bk64_sk0_w4_s5",   # split_k 0
    "triton_splitk_fp32_bm16_bn32_bk64_sk8_w3_s5",   # 3 warps
    "triton_splitk_fp32_bm16_bn32_bk64_sk8_w4_s0",   # 0 stages
])
def test_names_with_impossible_values_are_rejected(name):
    with pytest.raises(ValueError):
        SplitKConfig.parse(name)


def test_check_shape_reasons_and_buffer_sizes():
    cfg = SplitKConfig(16, 32, 64, 8, 4, 5)
    assert cfg.check_shape(1, 512, 7168) == (True, "ok")
    ok, why = cfg.check_shape(1, 500, 7168)
    assert not ok and "N=500" in why and "BN=32" in why
    ok, why = cfg.check_shape(1, 512, 7000)
    assert not ok and "K=7000" in why and "512" in why
    assert cfg.grid(17, 512) == (16, 8, 2)
    assert cfg.workspace_floats(17, 512) == 8 * 2 * 16 * 512
    assert cfg.counters(17, 512) == 16 * 2
    assert SplitKConfig(16, 32, 64, 1, 4, 5).workspace_floats(17, 512) == 0


def test_backend_unavailable_without_cuda_says_why():
    import torch

    from sglang_fp32gemm.backends.triton_splitk import TritonSplitKBackend

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    ok, why = TritonSplitKBackend().available()
    assert not ok and why == "no CUDA device"
