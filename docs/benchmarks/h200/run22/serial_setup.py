"""What run 22's serial diagnoses share (device): V4-Pro's serial schedule at M=4, its weights and streams, and
the fp32 GEMM modes they compare (one kernel at N=2048, or torch at every N). Imported by serial_why.py,
serial_gaps.py and position.py, which run from this folder's path (``python3 docs/.../run22/X.py``).
``SERIAL_MODEL`` (pro or flash), ``SERIAL_M`` and ``SERIAL_LL`` (ll_bf16's config) choose another model, M and
peer config (run 24: V4-Flash's serial steps stayed SUSPECT after an overlapped capture in run 23d); unset,
each is what runs 22-23 ran."""

import os

import torch

from sglang_fp32gemm import backends, exactness
from sglang_fp32gemm.tools import region, timing, vllm_peer

M = int(os.environ.get("SERIAL_M", "4"))
spec = region.MODELS[os.environ.get("SERIAL_MODEL", "pro")]
dev = torch.device("cuda")
x = exactness.random_bf16(M, spec.hidden, device="cuda")
weights = region.make_weights(spec, "cuda")
streams = region.Streams("cuda")
plans = region.plan(spec, "serial")
tm = timing.torch_fn("cuda")
#: Triton's form at N=2048 M=4 (launched with and without PDL).
TRITON = "triton_epoch_fp32_bm16_bn64_bk64_sk8_w4_s6"


def bound(backend: str, form: str, n: int):
    be = backends.by_name(backend)
    return be.bind(be.parse(form), dev, n, spec.hidden)


def modes() -> dict:
    """none, torch at N=2048 and at every N, Triton's form with and without PDL, ll_bf16 where it loads
    (``SERIAL_LL``, default its split-K 2x4), and at M 1-2 our dot kernel's PDL form."""
    out = {"none": None, "torch2048": {2048: tm}, "torch_all": {512: tm, 1024: tm, 2048: tm},
           "triton_pdl2048": {2048: bound("triton", TRITON + "_pdl", 2048)},
           "triton2048": {2048: bound("triton", TRITON, 2048)}}
    if M in (1, 2):
        threads = 448 if spec.hidden % (8 * 448) == 0 else 256
        out["dot_pdl2048"] = {2048: bound("cutedsl-dot", f"cutedsl_dot_m{M}_t{threads}_r1_pdl", 2048)}
    peer, why = vllm_peer.load(dev)
    if peer is not None:
        out["ll2048"] = {2048: peer.fn(os.environ.get("SERIAL_LL", "splitk_2x4"), M, spec.hidden)}
    else:
        print("ll_bf16 unavailable:", why, flush=True)
    return out


def warmed(gemm, stream: "torch.cuda.Stream"):
    """(steps, fn): a serial step of ``gemm`` run twice eagerly on ``stream``, as ``CudaTimer.step`` warms up a step
    before it captures it there."""
    steps = region.Steps(spec, plans, weights, x, streams)
    fn = steps.of(gemm)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return steps, fn
