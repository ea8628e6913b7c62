"""Run 19 (device): cutedsl-mma's two cluster reductions, the same forms, one process.

Launched without PDL our CuTe-DSL forms are 0.7-1.1 us slower alone than Triton's split-K (runs 17-18), and
the serial schedule sees that. One suspect is the kernel's end: the pull reduction waits at a cluster
barrier, reads every peer's partial sums through distributed shared memory, and waits at a second barrier
before any CTA may leave. The push reduction (``MmaConfig.push``, kernelName ``_push``) stores each CTA's
sums into the share owner's shared memory and waits once. For each form below (the fastest plain and PDL
forms of runs 17-18's logs), both reductions are

- checked: exact against float64 on NaN-poisoned outputs (the tuner's gate), and the same bits as each other
  at M 1, 3 and the form's largest (the same sums in the same order);
- timed alone (CUDA-graph replay, weights past the L2; the median of rotated rounds), and in the V4-Pro
  region model's serial schedule (``tune --rank serial``'s rerank: what a call adds there, with torch).

    python3 docs/benchmarks/h200/run19/push_ab.py OUT_DIR [--rounds 3]

Writes OUT_DIR/push_ab.json and prints one line per form. Ran as run 19a (docs/benchmarks/README.md, run 19).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from sglang_fp32gemm import exactness  # noqa: E402
from sglang_fp32gemm.backends.cutedsl_mma import CuteDSLMmaBackend, MmaConfig  # noqa: E402
from sglang_fp32gemm.tools import common, timing  # noqa: E402
from sglang_fp32gemm.tools.tuner import Candidate, Tuner  # noqa: E402

K = 7168
#: (M, N, pull forms): the fastest plain and PDL forms of each shape in runs 17-18's tune logs.
FORMS = [
    (4, 512, ["cutedsl_mma_m8_w8_r1_c2_pdl", "cutedsl_mma_m8_w4_r2_c8", "cutedsl_mma_m8_w4_r1_c8_s"]),
    (8, 1024, ["cutedsl_mma_m8_w8_r1_c2_pdl", "cutedsl_mma_m8_w8_r2_c2_p4_pdl", "cutedsl_mma_m8_w4_r1_c8_s",
               "cutedsl_mma_m8_w2_r1_c8"]),
    (16, 1024, ["cutedsl_mma_m16_w4_r1_c8_pdl", "cutedsl_mma_m16_w4_r2_c8_s"]),
    (8, 2048, ["cutedsl_mma_m8_w8_r1_c4", "cutedsl_mma_m8_w8_r2_c2_p4_pdl"]),
]


def pushed(name: str) -> str:
    return dataclasses.replace(MmaConfig.parse(name), push=True).name


def same_bits(fa, fb, m_values, n: int, device) -> bool:
    w = exactness.random_bf16(n, K, device=device)
    for m in m_values:
        x = exactness.random_bf16(m, K, device=device)
        outs = []
        for fn in (fa, fb):
            exactness.poison(device, m * n)
            outs.append(fn(x, w))
        if not torch.equal(outs[0], outs[1]):
            return False
    return True


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    b = CuteDSLMmaBackend()
    ok, why = b.available()
    if not ok:
        print(f"cutedsl-mma unavailable: {why}")
        return 2
    log = common.JsonLog(str(out / "push_ab_log.jsonl.gz"))
    tuner = Tuner([b], device, timing.CudaTimer(), log, rank="serial", rounds=args.rounds)
    results = []
    for m, n, names in FORMS:
        cands, checks = [], {}
        for name in names:
            for kernel in (name, pushed(name)):
                c = Candidate(b, MmaConfig.parse(kernel), kernel, True)
                res = tuner.check(c, m, n, K, "check")
                if res is not None:
                    cands.append(c)
                    checks[kernel] = res
        x = exactness.random_bf16(m, K, device=device)
        alone: dict[str, list[float]] = {c.kernel: [] for c in cands}
        by_label = {c.kernel: c for c in cands}
        for kernel in timing.rotated_rounds(list(alone), args.rounds):
            us = tuner.time(by_label[kernel], m, n, K, x, tuner.final_replays)
            if us is not None:
                alone[kernel].append(us)
        final = [(statistics.median(alone[c.kernel]), c, checks[c.kernel]) for c in cands if alone[c.kernel]]
        torch_us, ranked = tuner.rerank(m, n, K, x, final)
        serial = {c.kernel: us for us, c, _ in ranked}
        for name in names:
            push = pushed(name)
            fa, fb = (tuner._fn(by_label[k_], n, K) if k_ in by_label else None for k_ in (name, push))
            bits = fa is not None and fb is not None and same_bits(fa, fb, sorted({1, 3, m}), n, device)
            rec = dict(M=m, N=n, K=K, pull=name, push=push, same_bits=bits,
                       exact={k_: k_ in checks for k_ in (name, push)},
                       rel_err={k_: checks[k_].rel_err for k_ in (name, push) if k_ in checks},
                       alone_us={k_: alone.get(k_) for k_ in (name, push)},
                       serial_us={k_: serial.get(k_) for k_ in (name, push)}, torch_serial_us=torch_us)
            results.append(rec)

            def med(d, k_):
                v = d.get(k_)
                return f"{statistics.median(v):.2f}" if isinstance(v, list) and v else \
                    f"{v:.2f}" if isinstance(v, float) else "-"

            print(f"M={m} N={n} {name}: alone pull {med(rec['alone_us'], name)} push {med(rec['alone_us'], push)}; "
                  f"serial pull {med(rec['serial_us'], name)} push {med(rec['serial_us'], push)} "
                  f"(torch {torch_us:.2f}); same bits {bits}; exact {rec['exact']}", flush=True)
            common.write_json(str(out / "push_ab.json"), {"versions": common.versions(), "rounds": args.rounds,
                                                          "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
