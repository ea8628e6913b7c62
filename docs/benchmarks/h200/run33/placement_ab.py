"""Run 33 (device): where a cutedsl-dot form puts PDL's wait and release, the same forms otherwise, one process.

Stop 45 read our M=2 forms and vLLM's dot kernel in sm_90a SASS (docs/backends/cutedsl_dot.md, "Why M=2 is
slower alone"): the same W in flight and the same occupancy; what differs is where PDL sits. Ours loads W
before ``griddepcontrol.wait`` and releases its dependents right after the multiply-adds; vLLM's waits before
any load and releases after the store. ``DotConfig.placement`` (stop 46) makes both knobs a name suffix:
``_ls`` releases after the store, ``_lw`` also waits first. For each form below (the shipped rows and the
tune's next best at the isolated misses of run 32e) the three placements are

- checked: exact against float64 on NaN-poisoned outputs, three calls the same bits (the tuner's gate), and
  the same bits as each other at M 1 and the form's M (the same sums in the same order);
- timed alone (CUDA-graph replay, weights past the L2), the median of ``--rounds`` rotated rounds, beside
  torch.mm and vLLM's ll_bf16 at its best config (its sweep; ``tools/vllm_peer.py``), all in this process;
- at the shapes of ``--serial`` also in the V4-Pro region model's serial schedule (``tune --rank serial``'s
  rerank: what a call adds there), where the serial table's rows serve every serial step (N=1024).

    python3 docs/benchmarks/h200/run33/placement_ab.py OUT_DIR [--rounds 5] [--shapes 2x2048,...]
        [--serial 2x1024] [--forms dot|triton]

``--forms triton`` (stop 46; ran as 34e on an H200 at eecea8a; the ``_pdl_ls`` names it builds were removed at
stop 47, after it, so it runs only on a tree before that): Triton's ``_pdl`` forms and their ``_pdl_ls`` twins (the release after
the output's writes), at the shapes where the isolated target still missed in run 33d (N=2048 M 8-16) and at
N=1024 M 4-16 (the serial rows; ``--serial`` ranks them in the serial schedule, with the best ``_lw`` dot
forms at M=4). The epoch kernel's atomics make its bits run-dependent: no bits check for those.

Writes OUT_DIR/placement_ab.json (rewritten after every shape) and prints one line per form.
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
from sglang_fp32gemm.backends.cutedsl_dot import PLACEMENTS, CuteDSLDotBackend, DotConfig  # noqa: E402
from sglang_fp32gemm.backends.triton import TritonEpochBackend  # noqa: E402
from sglang_fp32gemm.tools import common, timing, vllm_peer  # noqa: E402
from sglang_fp32gemm.tools.tuner import Candidate, Tuner  # noqa: E402

K = 7168
#: (M, N) -> forms: the shipped row first (configs/sm90_serial.csv at d7eda6d), then run 32's next best alone.
FORMS = {
    (1, 2048): ["cutedsl_dot_m1_t448_r1_pdl"],  # the control: within 1% of vLLM's dot kernel alone (run 32)
    (2, 1024): ["cutedsl_dot_m2_t448_r4_pdl", "cutedsl_dot_m2_t896_r2_pdl_bx"],
    (2, 2048): ["cutedsl_dot_m2_t448_r4_pdl_bx_g264", "cutedsl_dot_m2_t448_r1_pdl_bx",
                "cutedsl_dot_m2_t448_r1_pdl_bx_mb1", "cutedsl_dot_m2_t224_r1_pdl_bx_mb1"],
    (2, 2560): ["cutedsl_dot_m2_t448_r1_pdl_bx", "cutedsl_dot_m2_t448_r1_pdl_bx_mb1",
                "cutedsl_dot_m2_t224_r1_pdl_bx_mb1"],
    (4, 2048): ["cutedsl_dot_m4_t224_r1_pdl_bx", "cutedsl_dot_m4_t448_r2_pdl_bx_mb1",
                "cutedsl_dot_m4_t224_r1_pdl_bx_mb1"],
}


#: --forms triton: (M, N) -> Triton PDL forms (each also as _pdl_ls) and dot forms (their three placements).
TRITON_FORMS = {
    (8, 2048): ["triton_epoch_fp32_bm16_bn64_bk64_sk7_w4_s4_pdl", "triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s4_pdl"],
    (16, 2048): ["triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s4_pdl", "triton_epoch_fp32_bm16_bn64_bk64_sk7_w4_s4_pdl"],
    (4, 1024): ["triton_epoch_fp32_bm16_bn64_bk64_sk14_w4_s6_pdl", "triton_epoch_fp32_bm16_bn128_bk128_sk28_w4_s3_pdl",
                "cutedsl_dot_m4_t224_r2_pdl_bx", "cutedsl_dot_m4_t224_r4_pdl_bx_mb1"],
    (8, 1024): ["triton_epoch_fp32_bm16_bn64_bk64_sk16_w4_s4_pdl", "triton_epoch_fp32_bm16_bn128_bk128_sk28_w4_s3_pdl"],
    (16, 1024): ["triton_epoch_fp32_bm16_bn64_bk64_sk14_w4_s6_pdl", "triton_epoch_fp32_bm16_bn128_bk128_sk28_w4_s3_pdl"],
}


def placed(name: str, placement: str) -> str:
    return dataclasses.replace(DotConfig.parse(name), placement=placement).name


def variants(name: str) -> list[str]:
    """A form in each placement its backend has: the dot kernel's three, Triton's ``_pdl`` and ``_pdl_ls``."""
    if name.startswith("cutedsl_dot_"):
        return [placed(name, p) for p in PLACEMENTS]
    return [name, name + "_ls"]


def placement_of(name: str) -> str:
    return DotConfig.parse(name).placement if name.startswith("cutedsl_dot_") else "ls" * name.endswith("_ls")


def backend_of(name: str, dot, triton):
    return dot if name.startswith("cutedsl_dot_") else triton


def shapes_arg(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",") if item]  # type: ignore[misc]


def same_bits(fns: list, m_values: list[int], n: int, device) -> bool:
    w = exactness.random_bf16(n, K, device=device)
    for m in m_values:
        x = exactness.random_bf16(m, K, device=device)
        outs = []
        for fn in fns:
            exactness.poison(device, m * n)
            outs.append(fn(x, w).clone())
        if not all(torch.equal(outs[0], o) for o in outs[1:]):
            return False
    return True


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--forms", choices=("dot", "triton"), default="dot")
    ap.add_argument("--shapes", type=shapes_arg, default=None, help="default: every shape of --forms")
    ap.add_argument("--serial", type=shapes_arg, default=None, help="default: 2x1024 (dot), 4x1024 (triton)")
    args = ap.parse_args(argv)
    forms = FORMS if args.forms == "dot" else TRITON_FORMS
    args.shapes = args.shapes or list(forms)
    args.serial = args.serial if args.serial is not None else [(2, 1024) if args.forms == "dot" else (4, 1024)]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    b, tb = CuteDSLDotBackend(), TritonEpochBackend()
    for be in (b, tb) if args.forms == "triton" else (b,):
        ok, why = be.available()
        if not ok:
            print(f"{be.name} unavailable: {why}")
            return 2
    peer, why_peer = vllm_peer.load(device)
    print(f"vLLM ll_bf16: {'ok ' + str(vllm_peer.source()) if peer else why_peer}", flush=True)
    log = common.JsonLog(str(out / "placement_ab_log.jsonl.gz"))
    timer = timing.CudaTimer()
    tuner = Tuner([b, tb], device, timer, log, rank="isolated")
    serial = Tuner([b, tb], device, timer, log, rank="serial", rounds=3)
    serial.binds = tuner.binds  # one compile a form
    results, sweeps = [], {}
    for m, n in args.shapes:
        names = [v for base in forms[(m, n)] for v in variants(base)]
        cands, checks = {}, {}
        for kernel in names:
            be = backend_of(kernel, b, tb)
            cfg = be.parse(kernel)
            c = Candidate(be, cfg, kernel, be.deterministic(cfg))
            res = tuner.check(c, m, n, K, "check")
            if res is not None and (res.repeatable or not c.deterministic):
                cands[kernel], checks[kernel] = c, res
            elif res is not None:
                print(f"  {kernel}: exact but not the same bits three times running; left out", flush=True)
        x = exactness.random_bf16(m, K, device=device)
        weights = tuner.weights(n, K)
        others = {"torch": timing.torch_fn(device)}
        peer_cfg = None
        if peer is not None:
            peer_cfg, peer_fn, sweeps[f"{m}x{n}"] = peer.pick(m, n, K, timer, weights, device)
            if peer_fn is not None:
                others[f"vllm:{peer_cfg}"] = peer_fn
        alone: dict[str, list[float]] = {label: [] for label in [*cands, *others]}
        for label in timing.rotated_rounds(list(alone), args.rounds):
            if label in cands:
                us = tuner.time(cands[label], m, n, K, x, tuner.final_replays)
            else:
                us = timer.per_call(others[label], x, weights, replays=tuner.final_replays)
            if us is not None:
                alone[label].append(us)
        med = {label: statistics.median(v) for label, v in alone.items() if v}
        serial_us, torch_serial = {}, None
        if (m, n) in args.serial:
            final = [(med[k_], cands[k_], checks[k_]) for k_ in cands if k_ in med]
            ranked = serial.rerank(m, n, K, x, final, med.get("torch"))
            if ranked is not None:
                torch_serial, rows = ranked
                serial_us = {c.kernel: us for us, c, _ in rows}
        peer_us = med.get(f"vllm:{peer_cfg}") if peer_cfg else None
        print(f"M={m} N={n}: torch {med.get('torch', float('nan')):.2f}, vLLM {peer_cfg} "
              f"{peer_us if peer_us is None else round(peer_us, 2)}"
              + (f"; serial torch {torch_serial:.2f}" if torch_serial is not None else ""), flush=True)
        for base in forms[(m, n)]:
            forms_of = variants(base)
            fns = [tuner._fn(cands[v], n, K) for v in forms_of if v in cands]
            bits = (len(fns) == len(forms_of) and all(cands[v].deterministic for v in forms_of)
                    and same_bits(fns, sorted({1, m}), n, device))
            rec = dict(M=m, N=n, K=K, base=base, same_bits=bits,
                       exact={v: v in checks for v in forms_of},
                       rel_err={v: checks[v].rel_err for v in forms_of if v in checks},
                       alone_us={v: alone.get(v) for v in forms_of}, serial_us={v: serial_us.get(v) for v in forms_of},
                       torch_us=med.get("torch"), peer=peer_cfg, peer_us=peer_us, torch_serial_us=torch_serial)
            results.append(rec)
            cells = []
            for v in forms_of:
                t = f"{med[v]:.2f}" if v in med else "-"
                if peer_us and v in med:
                    t += f" ({med[v] / peer_us:.3f}x)"
                if v in serial_us:
                    t += f" serial {serial_us[v]:.2f}"
                cells.append(f"{placement_of(v) or 'plain'} {t}")
            print(f"  {base.removeprefix('cutedsl_dot_')}: " + "; ".join(cells) + f"; same bits {bits}; "
                  f"exact {sum(rec['exact'].values())}/{len(forms_of)}", flush=True)
        common.write_json(str(out / "placement_ab.json"),
                          {"versions": common.versions(), "rounds": args.rounds, "results": results,
                           "peer_sweeps": sweeps})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
