"""The in-process start-up probe is ``exactness.check``: every call judged, allclose too."""

from __future__ import annotations

import torch

from sglang_fp32gemm import exactness
from sglang_fp32gemm.backends import probe as probe_mod

CPU = torch.device("cpu")


def test_the_probe_result_is_the_exactness_verdict():
    assert probe_mod.ProbeResult is exactness.Check and probe_mod.REL_TOL == exactness.REL_TOL
    r = probe_mod.run_probe(lambda x, w: exactness.reference(x, w).float(), CPU, 4, 32, 64)
    assert r.ok and r.shape == (4, 32, 64) and r.rel_err <= probe_mod.REL_TOL, r.describe()
    assert "2 calls" in r.detail


def test_a_kernel_right_only_on_its_first_call_fails():
    calls = []

    def flaky(x, w):
        calls.append(1)
        out = exactness.reference(x, w).float()
        return out if len(calls) == 1 else out.to(torch.bfloat16).float()

    r = probe_mod.run_probe(flaky, CPU, 4, 32, 64)
    assert not r.ok and "call 2" in r.detail, r.describe()


def test_one_element_outside_allclose_fails_even_within_the_norm_tolerance():
    def one_off(x, w):
        out = exactness.reference(x, w).float()
        out[0, 0] += 0.05  # rel. error (Frobenius) ~1e-5 at this size, but far outside atol/rtol
        return out

    m, n, k = 64, 512, 1024
    r = probe_mod.run_probe(one_off, CPU, m, n, k)
    assert not r.ok and "outside atol" in r.detail, r.describe()
