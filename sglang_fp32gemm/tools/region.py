"""A model of SGLang 0.5.23's DeepSeek-V4 decode attention-prepare region (``bench --region``).

Built from SGLang's code (``srt/models/deepseek_v4.py``: ``MQALayer.forward``,
``_forward_prepare_multi_stream``, ``_forward_prepare``; ``srt/layers/attention/dsv4/indexer.py``:
``C4Indexer``, ``C4IndexerBackendMixin._forward_prepare_multi_stream``; ``compressor.py``:
``Compressor``; ``compressor_v2.py``: ``forward_unified``), so that what our fp32 GEMMs add
per layer is measured where SGLang runs them: beside the other streams, one CUDA graph per step.

Per layer, overlapped (SGLang's multi-stream path, under capture with bs <= 64 on Hopper,
<= 128 on Blackwell; ratio 1/2 layers never take it), in SGLang's issue order:

- ``main``: ``kv``, ``compressor`` and ``indexer`` wait for it; the fused ``wqkv_a`` GEMM
  (N = q_lora_rank + head_dim, replicated); event ``qkv_a_ready``; ``q_norm``; event
  ``q_lora_ready``;
- ``indexer`` (ratio-4 (CSA) layers): its two sub-streams (SGLang's ``alt_streams[3:5]``:
  ``indexer_q``, ``indexer_weights``) wait for it; its compressor's fp32 GEMM (N = 2*2*128 = 512)
  and compress kernel; ``indexer_weights``: ``weights_proj`` (N = index_n_heads), event;
  ``indexer_q`` waits for ``q_lora_ready`` and that event: the indexer's ``wq_b`` from q_lora
  (N = index_n_heads * index_head_dim, replicated) and its fused rope/hadamard/quant kernel;
  ``indexer`` waits for ``indexer_q``;
- ``kv``: waits for ``qkv_a_ready``; the fused kv norm/rope/cache write;
- ``compressor`` (ratio 4 and 128): ``wkv_gate``, the fp32 GEMM (ReplicatedLinear,
  N = 2 * coff * head_dim: 1024 on ratio 128, 2048 on ratio 4), then the fused compress kernel;
- ``main``: ``q_b`` (N = n_heads / tp * head_dim: column-parallel), its fused q norm/rope;
  waits for ``kv``, ``compressor``, ``indexer``; attention (stand-in).

Serial (``_forward_prepare``: above the bs limit, and ratio 1/2 layers): the same work on one
stream in that function's order: wqkv_a, q_norm, q_b, q norm/rope, kv store; the indexer
(weights_proj, wq_b, q quant, its compressor); the compressor; attention.

Stand-ins (what this model is not): bf16 GEMMs stand in for the FP8 bytes of wqkv_a, q_b and
the indexer's wq_b (weights_proj is bf16 in SGLang too); each fused SGLang kernel that is not a
GEMM (norms, rope, cache/compress writes, the indexer's quant, attention) is one elementwise
kernel that reads its input and writes an output of the same size. The fp32 GEMM is pluggable
(``gemm``: {N: fn(x, w)}; None: the GEMMs removed, the compress kernels read a preallocated
buffer instead). Every layer has its own weights (read from HBM, not L2). The plan is pure
data (``plan``), checked on CPU; ``run_layers`` runs it (CUDA streams, or eagerly on CPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Callable, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F

from sglang_fp32gemm.tools.common import K_FLASH, K_PRO

logger = logging.getLogger(__name__)

MAIN, KV, COMPRESSOR, INDEXER, INDEXER_Q, INDEXER_WEIGHTS = (
    "main", "kv", "compressor", "indexer", "indexer_q", "indexer_weights")
SIDE_STREAMS = (KV, COMPRESSOR, INDEXER, INDEXER_Q, INDEXER_WEIGHTS)
SCHEDULES = ("overlapped", "serial")
#: The multi-stream batch-size limits (``MQALayer._multi_stream_bs_limit``): Hopper, Blackwell (sm100 on).
MULTI_STREAM_BS_LIMIT_HOPPER, MULTI_STREAM_BS_LIMIT_BLACKWELL = 64, 128

GEMM_BF16, GEMM_FP32, POINTWISE = "gemm_bf16", "gemm_fp32", "pointwise"
#: The two fp32 GEMMs of a ratio-4 layer, both on x: the indexer's compressor's (N=512) and the layer's.
#: A ``gemm`` with a ``PAIR`` entry issues both in one call where they share a stream (the serial schedule).
PAIR = ("indexer.compressor.wkv_gate", "compressor.wkv_gate")
WAIT_STREAM, RECORD, WAIT_EVENT = "wait_stream", "record", "wait_event"


class Step(NamedTuple):
    """One issued operation: a kernel on ``stream``, or a stream/event dependency.

    GEMMs: out[M, n] = src[:, cols] @ w[n, k]^T. Pointwise: one elementwise kernel over src.
    Sync steps: ``stream`` waits for stream ``name`` (wait_stream), records event ``name``
    (record) or waits for it (wait_event).
    """

    kind: str
    stream: str
    name: str
    src: str = ""
    n: int = 0
    k: int = 0
    cols: Optional[tuple[int, int]] = None


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The dimensions the region needs, TP-sized where SGLang shards them."""

    name: str
    hidden: int            # K of every x-side GEMM
    n_heads: int
    head_dim: int
    q_lora_rank: int
    index_n_heads: int
    index_head_dim: int
    compress_ratios: tuple[int, ...]
    tp: int = 8
    source: str = ""

    @property
    def layers(self) -> int:
        return len(self.compress_ratios)


#: V4-Pro: no compress_ratios ships with SGLang 0.5.23 (DeepSeekV4Config defaults to []); this is
#: the pattern in ../shared/notes/h200_peers.md: two HCA layers, then CSA/HCA alternating.
PRO_RATIOS = (128, 128) + tuple(4 if i % 2 == 0 else 128 for i in range(59))
#: V4-Flash: the published DeepSeek-V4-Flash-Base config.json as inlined in alibaba/rtp-llm's
#: DeepSeek-V4 config test (two sliding-window layers (0), then CSA/HCA alternating; its 44th
#: entry, the MTP layer, is dropped). Second-hand: an assumption until checked against the model.
FLASH_RATIOS = (0, 0) + tuple(4 if i % 2 == 0 else 128 for i in range(41))

MODELS = {
    "pro": ModelSpec("pro", K_PRO, 128, 512, 1536, 64, 128, PRO_RATIOS,
                     source="hidden 7168, 128 heads, q_lora_rank 1536 (V4-Pro config.json); ratios from "
                            "h200_peers.md; index heads 64 x 128 assumed (SGLang's config default)"),
    "flash": ModelSpec("flash", K_FLASH, 64, 512, 1024, 64, 128, FLASH_RATIOS,
                       source="V4-Flash-Base config.json (hidden 4096, 64 heads, q_lora_rank 1024, index 64 x 128); "
                              "ratios second-hand from alibaba/rtp-llm's test of that config (assumption)"),
    # CPU tests only: tiny dims, one HCA and one CSA layer after a sliding-window one.
    "tiny": ModelSpec("tiny", 64, 16, 32, 48, 4, 16, (0, 128, 4), source="tests"),
}
#: The models the tables serve.
SHIPPED = (MODELS["pro"], MODELS["flash"])


def compressor_n(spec: ModelSpec, ratio: int) -> int:
    """wkv_gate's N: 2 * coff * head_dim, coff = 2 on the overlapping ratio-4 compressor."""
    return 2 * (2 if ratio == 4 else 1) * spec.head_dim


def indexer_compressor_n(spec: ModelSpec) -> int:
    return 2 * 2 * spec.index_head_dim  # the indexer's compressor is always ratio 4


def pair_widths(spec: ModelSpec) -> tuple[int, int]:
    """The N of each ``PAIR`` GEMM."""
    return indexer_compressor_n(spec), compressor_n(spec, 4)


def layer_plan(spec: ModelSpec, layer: int, schedule: str) -> list[Step]:
    """The steps of one layer, in SGLang's issue order (see the module docstring)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (one of {', '.join(SCHEDULES)})")
    ratio = spec.compress_ratios[layer]
    if ratio in (1, 2):
        raise ValueError("ratio 1/2 layers (V4.1) are not modelled")
    has_compressor, has_indexer = ratio in (4, 128), ratio == 4
    ql, hd = spec.q_lora_rank, spec.head_dim
    overlap = schedule == "overlapped"

    def on(stream: str) -> str:
        return stream if overlap else MAIN

    wqkv_a = Step(GEMM_BF16, MAIN, "wqkv_a", "x", ql + hd, spec.hidden)
    q_norm = Step(POINTWISE, MAIN, "q_norm", "wqkv_a", cols=(0, ql))
    q_b = Step(GEMM_BF16, MAIN, "q_b", "q_norm", spec.n_heads // spec.tp * hd, ql)
    q_rope = Step(POINTWISE, MAIN, "q_norm_rope", "q_b")
    kv_store = Step(POINTWISE, on(KV), "kv_norm_rope_store", "wqkv_a", cols=(ql, ql + hd))
    idx = [Step(GEMM_FP32, on(INDEXER), "indexer.compressor.wkv_gate", "x", indexer_compressor_n(spec), spec.hidden),
           Step(POINTWISE, on(INDEXER), "indexer.compress", "indexer.compressor.wkv_gate")]
    idx_w = Step(GEMM_BF16, on(INDEXER_WEIGHTS), "indexer.weights_proj", "x", spec.index_n_heads, spec.hidden)
    idx_q = [Step(GEMM_BF16, on(INDEXER_Q), "indexer.wq_b", "q_norm", spec.index_n_heads * spec.index_head_dim, ql),
             Step(POINTWISE, on(INDEXER_Q), "indexer.q_rope_hadamard_quant", "indexer.wq_b")]
    comp = [Step(GEMM_FP32, on(COMPRESSOR), "compressor.wkv_gate", "x", compressor_n(spec, ratio), spec.hidden),
            Step(POINTWISE, on(COMPRESSOR), "compressor.compress", "compressor.wkv_gate")]
    attention = Step(POINTWISE, MAIN, "attention", "q_norm_rope")
    if not overlap:
        steps = [wqkv_a, q_norm, q_b, q_rope, kv_store]
        if has_indexer:
            steps += [idx_w, *idx_q, *idx]
        if has_compressor:
            steps += comp
        return steps + [attention]
    steps = [Step(WAIT_STREAM, s, MAIN) for s in (KV, COMPRESSOR, INDEXER)]
    steps += [wqkv_a, Step(RECORD, MAIN, "qkv_a_ready"), q_norm, Step(RECORD, MAIN, "q_lora_ready")]
    if has_indexer:
        steps += [Step(WAIT_STREAM, INDEXER_Q, INDEXER), Step(WAIT_STREAM, INDEXER_WEIGHTS, INDEXER), *idx,
                  idx_w, Step(RECORD, INDEXER_WEIGHTS, "weights_ready"),
                  Step(WAIT_EVENT, INDEXER_Q, "q_lora_ready"), Step(WAIT_EVENT, INDEXER_Q, "weights_ready"),
                  *idx_q, Step(WAIT_STREAM, INDEXER, INDEXER_Q)]
    steps += [Step(WAIT_EVENT, KV, "qkv_a_ready"), kv_store]
    if has_compressor:
        steps += comp
    steps += [q_b, q_rope] + [Step(WAIT_STREAM, MAIN, s) for s in (KV, COMPRESSOR, INDEXER)]
    return steps + [attention]


def plan(spec: ModelSpec, schedule: str) -> list[list[Step]]:
    """Every layer's steps."""
    return [layer_plan(spec, i, schedule) for i in range(spec.layers)]


def gemms(steps: Sequence[Step]) -> list[tuple[str, str, str, int, int]]:
    """(name, kind, stream, N, K) of every GEMM of a layer, in issue order."""
    return [(s.name, s.kind, s.stream, s.n, s.k) for s in steps if s.kind in (GEMM_BF16, GEMM_FP32)]


def fp32_shapes(spec: ModelSpec) -> list[tuple[int, int]]:
    """The distinct (N, K) of the model's fp32 GEMMs."""
    return sorted({(n, k) for steps in plan(spec, "serial") for _, kind, _, n, k in gemms(steps) if kind == GEMM_FP32})


def fp32_calls(spec: ModelSpec, n: Optional[int] = None) -> int:
    """The model's fp32 GEMM calls per step (of width ``n`` alone, when given)."""
    return sum(1 for steps in plan(spec, "serial") for s in steps
               if s.kind == GEMM_FP32 and (n is None or s.n == n))


def spec_for(n: int, k: int) -> Optional[ModelSpec]:
    """The shipped model (V4-Pro, V4-Flash) that runs an fp32 GEMM of this (N, K), or None."""
    for spec in SHIPPED:
        if (n, k) in fp32_shapes(spec):
            return spec
    return None


def pair_spec_for(n: int, k: int) -> Optional[ModelSpec]:
    """The shipped model whose ratio-4 layers pair two fp32 GEMMs of joined width ``n`` (``PAIR``) at ``k``."""
    for spec in SHIPPED:
        if spec.hidden == k and sum(pair_widths(spec)) == n:
            return spec
    return None


def joined_widths(ks: Sequence[int]) -> list[int]:
    """The joined widths N1 + N2 of the shipped models' pairs at these K."""
    return sorted({sum(pair_widths(s)) for s in SHIPPED if s.hidden in ks})


def schedule_for(m: int, device=None) -> str:
    """How SGLang runs a captured decode step of batch ``m`` (ratio 4/128 layers) on ``device``."""
    limit = MULTI_STREAM_BS_LIMIT_HOPPER
    # SGLang's is_blackwell_supported(): compute capability major 10, 11 or 12.
    if device is not None and torch.device(device).type == "cuda" and \
            torch.cuda.get_device_capability(device)[0] in (10, 11, 12):
        limit = MULTI_STREAM_BS_LIMIT_BLACKWELL
    return "overlapped" if m <= limit else "serial"


def make_weights(spec: ModelSpec, device, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Every layer's own bf16 weights, one [N, K] tensor per GEMM (standard normal, made on ``device``)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for steps in plan(spec, "serial"):
        out.append({name: torch.randn(n, k, device=device, generator=gen).to(torch.bfloat16)
                    for name, _, _, n, k in gemms(steps)})
    return out


class Streams:
    """The side streams SGLang allocates once per model (``alt_streams``); no-ops off CUDA."""

    def __init__(self, device) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.side = {s: torch.cuda.Stream(device) for s in SIDE_STREAMS} if self.cuda else {}

    def bind(self) -> "Streams.Bound":
        """The streams of one step: ``main`` is the stream current when the step starts (the capture stream)."""
        return Streams.Bound(self)

    class Bound:
        def __init__(self, streams: "Streams") -> None:
            self.cuda = streams.cuda
            self.s = dict(streams.side)
            if self.cuda:
                self.s[MAIN] = torch.cuda.current_stream()
            self.events: dict[str, torch.cuda.Event] = {}

        def on(self, name: str):
            return torch.cuda.stream(self.s[name]) if self.cuda else contextlib.nullcontext()

        def sync(self, step: Step) -> None:
            if not self.cuda:
                return  # eager on CPU: everything is already in order
            if step.kind == WAIT_STREAM:
                self.s[step.stream].wait_stream(self.s[step.name])
            elif step.kind == RECORD:
                self.events[step.name] = self.s[step.stream].record_event()
            else:
                self.s[step.stream].wait_event(self.events[step.name])


#: {N: fn(x, w)}, and optionally {"pair": fn(x, w1, w2) -> (out1, out2)} for the layers' ``PAIR``s.
Gemm = Optional[dict]


def paired(steps: Sequence[Step]) -> bool:
    """Whether a layer's ``PAIR`` GEMMs can be one call: both there, in that order, on one stream, on the same
    input."""
    names = [s.name for s in steps]
    if not all(n in names for n in PAIR) or names.index(PAIR[0]) > names.index(PAIR[1]):
        return False
    a, b = steps[names.index(PAIR[0])], steps[names.index(PAIR[1])]
    return a.stream == b.stream and a.src == b.src and a.cols == b.cols


def pairs(plans: Sequence[Sequence[Step]]) -> int:
    """How many layers of ``plans`` a ``PAIR`` entry serves."""
    return sum(1 for steps in plans if paired(steps))


def on_side_streams(steps: Sequence[Step]) -> bool:
    """Whether a layer's steps use SGLang's side streams (the overlapped schedule)."""
    return any(s.stream != MAIN for s in steps)


def layer_mark(steps: Sequence[Step]):
    """What the router is told while a layer of ``steps`` is issued, as SGLang tells it: a layer on the
    side streams runs inside the multi-stream prepare, which marks its region (``routing.overlapped``);
    a serial layer marks nothing."""
    from sglang_fp32gemm import routing

    return routing.overlapped() if on_side_streams(steps) else contextlib.nullcontext()


def run_layers(plans: Sequence[Sequence[Step]], weights: Sequence[dict[str, torch.Tensor]], x: torch.Tensor,
               gemm: Gemm, streams: Streams, placeholders: Optional[dict[int, torch.Tensor]] = None
               ) -> tuple[list[torch.Tensor], list[tuple[int, str]], list[torch.Tensor]]:
    """Issue every step; (fp32 outputs, their (layer, name), every other tensor made).

    The caller keeps the third list alive until a graph capture ends, so that no block is
    freed and reused while another stream may still read it. The fp32 GEMMs whose N ``gemm``
    lacks (all of them when it is None) are left out and their consumers read
    ``placeholders[N]`` (preallocated fp32 [M, N]). With ``gemm["pair"]``, a layer's ``PAIR``
    is one call where ``paired``, made at the first GEMM's step; the second's output is its.
    """
    bound = streams.bind()
    fp32, where, keep = [], [], []
    pair = gemm.get("pair") if gemm is not None else None
    for layer, (steps, w) in enumerate(zip(plans, weights)):
        t = {"x": x}
        ahead = {}  # the second output of this layer's pair call
        fuse = pair is not None and paired(steps)
        with layer_mark(steps):
            for s in steps:
                if s.kind in (WAIT_STREAM, RECORD, WAIT_EVENT):
                    bound.sync(s)
                    continue
                src = t[s.src] if s.cols is None else t[s.src][:, s.cols[0]:s.cols[1]]
                with bound.on(s.stream):
                    if s.kind == GEMM_BF16:
                        out = F.linear(src, w[s.name])
                    elif s.kind == GEMM_FP32:
                        if fuse and s.name == PAIR[0]:
                            out, ahead[PAIR[1]] = pair(src, w[PAIR[0]], w[PAIR[1]])
                        elif s.name in ahead:
                            out = ahead.pop(s.name)
                        elif gemm is not None and s.n in gemm:
                            out = gemm[s.n](src, w[s.name])
                        else:
                            out = None
                        if out is None:
                            out = placeholders[s.n]
                        else:
                            fp32.append(out)
                            where.append((layer, s.name))
                    else:
                        out = torch.mul(src, 0.5)
                t[s.name] = out
                keep.append(out)
    return fp32, where, keep


#: Whether this process has made an overlapped step on CUDA (``Steps.of``), which ``overlapped_first`` reads.
_overlapped_made = False


class Steps:
    """Graph-capturable steps of one region at x's M, for ``CudaTimer.step``: ``of(gemm)`` issues every
    layer of ``plans`` (``gemm`` as in ``run_layers``) and returns the fp32 outputs. The last step's
    ``where`` (the outputs' (layer, name)) and ``keep`` (every other tensor it made) stay until
    ``release()``, so that no block is freed and reused under another stream while a capture runs."""

    def __init__(self, spec: ModelSpec, plans: Sequence[Sequence[Step]], weights: Sequence[dict[str, torch.Tensor]],
                 x: torch.Tensor, streams: Streams) -> None:
        self.plans, self.weights, self.x, self.streams = plans, weights, x, streams
        self.placeholders = {n: torch.zeros(x.shape[0], n, device=x.device) for n, _ in fp32_shapes(spec)}
        self.where: list[tuple[int, str]] = []
        self.keep: list[torch.Tensor] = []

    def of(self, gemm: Gemm) -> Callable[[], list[torch.Tensor]]:
        global _overlapped_made
        if self.streams.cuda and any(on_side_streams(steps) for steps in self.plans):
            _overlapped_made = True

        def step() -> list[torch.Tensor]:
            fp32, self.where, self.keep = run_layers(self.plans, self.weights, self.x, gemm, self.streams,
                                                     self.placeholders)
            return fp32
        return step

    def operands(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The (x, w) of each fp32 output of the last step, in order (what an output is checked against)."""
        return [(self.x, self.weights[layer][name]) for layer, name in self.where]

    def release(self) -> None:
        self.where, self.keep = [], []


def overlapped_first(timer, spec: ModelSpec, weights: Sequence[dict[str, torch.Tensor]], x: torch.Tensor,
                     streams: Streams, torch_fn: Callable) -> bool:
    """Before a process first times anything for a serial schedule: capture and replay the overlapped step once,
    ``torch_fn`` at every fp32 GEMM, as a SGLang server on Hopper has captured both kinds of batch before it
    replays either. Whether it did.

    Run 22 (H100): in a process that had captured no overlapped step, a serial step with PDL launches or
    cuBLAS kernels, timed right after its own capture, ran its whole chain with a quarter of the usual gaps
    between kernels; after an overlapped capture V4-Pro's never did (runs 19b, 22b, 23a-e), V4-Flash's still
    did (run 23d; docs/benchmarks/README.md, runs 22-23). Off CUDA, or once an overlapped step was made,
    nothing is done. If the capture fails, the serial measurement goes on without it (one warning); the
    one-stream SUSPECT check guards every serial row either way.
    """
    if not streams.cuda or _overlapped_made:
        return False
    steps = Steps(spec, plan(spec, "overlapped"), weights, x, streams)
    try:
        timer.step(steps.of({n: torch_fn for n, _ in fp32_shapes(spec)}), 3)
    except Exception as e:
        logger.warning("the overlapped step captured before the first serial one failed (%s: %s); serial steps "
                       "are timed without it", type(e).__name__, str(e)[:200])
        return False
    finally:
        steps.release()
    return True
