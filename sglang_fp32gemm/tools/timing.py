"""CUDA-graph timing of many back-to-back calls with rotating weights.

Per-call time = one graph replay / calls in it, median over replays. The
weights rotate over enough sets (>= 8 and >= 4x the L2) that W is always read
from HBM, as in a real decode step where 61 layers each read their own.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

import torch

Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def weight_sets(n: int, k: int, device, dtype=torch.bfloat16, min_sets: int = 8) -> list[torch.Tensor]:
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
    per = n * k * torch.tensor([], dtype=dtype).element_size()
    count = max(min_sets, math.ceil(4 * l2 / per))
    return [torch.randn(n, k, device=device).to(dtype) for _ in range(count)]


def time_per_call_us(
    fn: Fn,
    x: torch.Tensor,
    weights: list[torch.Tensor],
    calls: int | None = None,
    replays: int = 15,
) -> float:
    """Median microseconds per call of ``fn`` under CUDA-graph replay."""
    calls = calls or max(64, 2 * len(weights))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):  # warm-up: compile, allocate workspaces on this stream
            fn(x, weights[i % len(weights)])
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(calls):
            fn(x, weights[i % len(weights)])
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
        times.append(a.elapsed_time(b) * 1e3 / calls)
    del graph
    return statistics.median(times)


def floor_us(m: int, n: int, k: int, bandwidth_tbs: float = 4.2) -> float:
    """Bytes that must move (W, x once; C once) over copy bandwidth."""
    return (n * k * 2 + m * k * 2 + m * n * 4) / (bandwidth_tbs * 1e12) * 1e6


def torch_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, w.t(), out_dtype=torch.float32)
