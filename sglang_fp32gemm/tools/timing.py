"""How every tool times a call: the same method for torch and every kernel.

Graph mode (decode as SGLang runs it): one CUDA graph holds many
back-to-back calls rotating over enough weight sets (>= 8 and >= 4x the
L2) that W is always read from HBM, as in a real decode step where 61
layers each read their own; per-call time = one replay / calls in it,
median over replays. Warm-up (compiles, workspaces, router binding) runs
before capture on the capture stream.

Eager mode: host wall time of many back-to-back calls, synchronized once at
the end, divided by the calls; median of several runs.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Collection, Iterator, Optional, Sequence, TypeVar

import torch

Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
T = TypeVar("T")

#: The serial decode chain of ``bench --decode-seq`` and ``tune --rank chain``: per layer a bf16
#: linear of N=CHAIN_N1 on x, the fp32 call, a bf16 linear of N=CHAIN_N2; every layer its own weights.
CHAIN_N1, CHAIN_N2 = 1536, 512


def random_weights(count: int, n: int, k: int, device, dtype=torch.bfloat16) -> list[torch.Tensor]:
    """``count`` [n, k] standard-normal weights made on ``device`` (fast for the GB a decode step needs)."""
    return [torch.randn(n, k, device=device).to(dtype) for _ in range(count)]


def chain_weights(layers: int, n: int, k: int, device) -> dict[str, list[torch.Tensor]]:
    """The chain's weights: ``w1`` and ``w2`` for the bf16 linears, ``wf`` for the fp32 call; one per layer."""
    return {"w1": random_weights(layers, CHAIN_N1, k, device), "wf": random_weights(layers, n, k, device),
            "w2": random_weights(layers, CHAIN_N2, k, device)}


def chain_step(x: torch.Tensor, weights: dict[str, list[torch.Tensor]],
               fn: Optional[Fn] = None) -> Callable[[], list[torch.Tensor]]:
    """One chain step for ``CudaTimer.step``, returning the fp32 outputs; ``fn`` None: the calls left out."""
    w1, wf, w2 = weights["w1"], weights["wf"], weights["w2"]
    linear = torch.nn.functional.linear

    def step() -> list[torch.Tensor]:
        outs = []
        for i in range(len(wf)):
            linear(x, w1[i])
            if fn is not None:
                outs.append(fn(x, wf[i]))
            linear(x, w2[i])
        return outs

    return step


def rotated_rounds(labels: Collection[T], rounds: int) -> Iterator[T]:
    """The order in which steps are captured when their medians are compared (``bench --region``,
    ``joint``, ``tune --rank chain/region/serial``): each label once a round, each round starting one label
    later, so that no label keeps one place in the sequence of captures (H200: a capture of the overlapped
    region now and then runs 3-28% slow, and in runs 13b-18b the slow ones repeated where the sequence did;
    docs/benchmarks/README.md, "Slow captures"). A label the caller removes from ``labels`` meanwhile (a step
    that raised) is not given again."""
    order = list(labels)
    for i in range(rounds):
        j = i % len(order) if order else 0
        yield from (label for label in order[j:] + order[:j] if label in labels)


def _replay_median_us(graph: "torch.cuda.CUDAGraph", replays: int) -> float:
    """Median microseconds of one replay of ``graph`` (3 untimed replays first)."""
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


#: How a graph is captured: ``sglang`` (the default since run 19), as SGLang's graph runner captures (0.5.23:
#: one capture stream and one memory pool shared by every graph); ``private``, a fresh stream from torch's
#: pool and a private memory pool per graph (every recorded result up to run 18). Run 19 captured the
#: overlapped region both ways: private captures had one slow round in 14 of 32 sets (3-15% of the step),
#: SGLang's way none in 78. docs/benchmarks/README.md, "Slow captures".
CAPTURES = ("sglang", "private")


class CudaTimer:
    """The method above, behind the small interface tune and bench call (tests pass a fake)."""

    def __init__(self, capture: str = CAPTURES[0]) -> None:
        if capture not in CAPTURES:
            raise ValueError(f"capture {capture!r}: one of {', '.join(CAPTURES)}")
        self.capture = capture
        self._shared: Optional[tuple] = None  # (stream, pool handle), made at the first sglang capture

    def _capture_on(self) -> tuple["torch.cuda.Stream", Optional[tuple]]:
        """(the stream to warm up and capture on, the memory pool to capture into; None: a private one)."""
        if self.capture == "private":
            return torch.cuda.Stream(), None
        if self._shared is None:
            self._shared = (torch.cuda.Stream(), torch.cuda.graph_pool_handle())
        return self._shared

    def per_call(self, fn: Fn, x: torch.Tensor, weights: list[torch.Tensor], replays: int = 15) -> float:
        """Median microseconds per call of ``fn`` under CUDA-graph replay."""
        calls = max(64, 2 * len(weights))
        stream, pool = self._capture_on()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for i in range(3):  # warm-up: compile, allocate workspaces on this stream
                fn(x, weights[i % len(weights)])
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            for i in range(calls):
                fn(x, weights[i % len(weights)])
        us = _replay_median_us(graph, replays) / calls
        del graph
        return us

    def graph_of(self, step: Callable[[], Sequence[torch.Tensor]],
                before_capture: Optional[Callable[[], None]] = None) -> tuple["torch.cuda.CUDAGraph", Sequence]:
        """(graph, the step's outputs) of ``step`` captured as ``step()`` times it: two eager runs on the capture
        stream (compiles, binds, workspaces), ``before_capture``, then the capture."""
        stream, pool = self._capture_on()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        if before_capture is not None:
            before_capture()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            outs = step()
        return graph, outs

    def step(self, step: Callable[[], Sequence[torch.Tensor]], replays: int = 20,
             before_capture: Optional[Callable[[], None]] = None, refresh: Optional[Callable[[], None]] = None):
        """(median us per replay, the step's outputs after the last replay) for one graph of ``step``.

        ``before_capture`` runs after the eager warm-up, just before capture (e.g. to reset counters
        so that they count the captured calls alone). ``refresh`` runs after the timed replays and is
        followed by one more replay: given new inputs, the outputs then show that every kernel ran in
        the replays (a kernel launched outside the capture runs once, at capture time, and its output
        stays right for as long as its inputs do not change).
        """
        graph, outs = self.graph_of(step, before_capture)
        us = _replay_median_us(graph, replays)
        if refresh is not None:
            refresh()
            graph.replay()
        torch.cuda.synchronize()
        outs = [o.clone() for o in outs]
        del graph
        return us, outs

    def eager(self, fn: Fn, x: torch.Tensor, weights: list[torch.Tensor], calls: int = 1000) -> tuple[float, float]:
        """(wall us per call, host enqueue us per call) of ``calls`` back-to-back eager calls.

        Wall: from the first call to a synchronize after the last. Enqueue: the
        host time of the loop alone (equal to wall when the host is the limit).
        """
        nw = len(weights)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(calls):
            fn(x, weights[i % nw])
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        return (t2 - t0) * 1e6 / calls, (t1 - t0) * 1e6 / calls

    def weights(self, n: int, k: int, device) -> list[torch.Tensor]:
        """>= 8 weight sets and >= 4x the L2, so W is always read from HBM."""
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
        per = n * k * 2  # bf16
        return random_weights(max(8, math.ceil(4 * l2 / per)), n, k, device)


def floor_us(m: int, n: int, k: int, bandwidth_tbs: float = 4.2) -> float:
    """Bytes that must move (W, x once; C once) over copy bandwidth."""
    return (n * k * 2 + m * k * 2 + m * n * 4) / (bandwidth_tbs * 1e12) * 1e6


def peak_bandwidth_tbs(device) -> Optional[float]:
    """The device's peak memory bandwidth in TB/s from its properties (double data rate: 2 x clock x bus
    width), or None where it cannot be read. NVIDIA only: ROCm reports its memory clock differently."""
    if torch.version.hip is not None or torch.device(device).type != "cuda":
        return None
    p = torch.cuda.get_device_properties(device)
    khz, bits = getattr(p, "memory_clock_rate", 0), getattr(p, "memory_bus_width", 0)
    return 2 * khz * 1e3 * bits / 8 / 1e12 if khz and bits else None


#: On one stream each call runs after the kernel before it, so what a call adds to a step cannot fall much below
#: its time alone, back to back (where a PDL form even overlaps its own previous launch). Below this share of
#: it, the difference from the base step is not the calls' cost. H200: runs 15-20's tune logs hold 559 one-stream
#: times of forms with their isolated times; the lowest is 0.93x but for run 20c2's four PDL forms at 0.29-0.38x;
#: run 20's serial bench processes put torch, routed and ll_bf16 at 0.62-0.73x of their sums, run 19b's at
#: 1.03-1.24x. H100, run 22: such a step is still one chain of kernels in turn, but the whole chain's launch
#: gaps had shrunk to a quarter of the base step's (docs/benchmarks/README.md, run 22).
#: Used by bench (--region's serial schedule, --decode-seq) and the tuner's one-stream ranks.
ONE_STREAM_FLOOR = 0.85


def one_stream_suspect(added: float, alone: float) -> Optional[str]:
    """Why ``added`` (us a call, or a layer, on one stream) cannot be what the step ran, or None."""
    if added < ONE_STREAM_FLOOR * alone:
        return (f"added {added:.2f} us, {added / alone:.2f}x its calls' time alone ({alone:.2f}): "
                "on one stream that is not their cost (the rest of the step ran faster than the base)")
    return None


def torch_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, w.t(), out_dtype=torch.float32)


def torch_fn(device) -> Fn:
    """The torch column: ``torch_mm`` on CUDA; elsewhere (CPU tests) the plugin's own fallback."""
    if getattr(device, "type", "cuda") == "cuda":
        return torch_mm
    from sglang_fp32gemm.backends import torch_ref

    return torch_ref.mm_fp32
