"""Run 22's next diagnosis (device; run23/serial_state.sh runs it; ran as 23a): does the timing position alone
put a serial step in the fast state?

    python3 docs/benchmarks/h200/run22/position.py OUT.json

Runs 22a-e (H100): a serial step with PDL launches or torch's cuBLAS kernels was fast (its whole chain's launch
gaps a quarter of the usual) when timed right after its own eager warm-up and capture in a fresh process, SGLang's
way (the bench), and never when the graphs were captured first and timed later (22d). This times, without CUPTI,
one process, SGLang's way, V4-Pro serial, M=4, each graph right after its own capture ("own") and again after
another graph's replays ("later"); and one graph captured with its eager warm-up long before ("cold warm-up"):

    none: own; torch_all: own; none: later; torch_all: later; ll2048: own; none: later; ll2048: later;
    triton2048: own; triton2048: later; torch_all (warmed up, then triton2048 replayed, then captured): own

Writes JSON to argv[1] (every graph's medians of 20 replays, in order), and prints what each step added over the
`none` timed nearest before it.
"""

import json
import sys

import torch

from serial_setup import M, modes, warmed
from sglang_fp32gemm.tools import timing

gemms = {k: v for k, v in modes().items() if k in ("none", "torch_all", "triton2048", "ll2048")}
stream, pool = torch.cuda.Stream(), torch.cuda.graph_pool_handle()
graphs: dict = {}
log: list = []


def warm(name):
    return warmed(gemms[name], stream)


def capture(name, warmed=None):
    steps, fn = warmed or warm(name)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool, stream=stream):
        fn()
    steps.release()
    graphs[name] = g


def timed(name, where):
    us = round(timing._replay_median_us(graphs[name], 20), 2)
    log.append((name, where, us))
    print(name, where, us, flush=True)


capture("none"); timed("none", "own")
capture("torch_all"); timed("torch_all", "own")
timed("none", "later"); timed("torch_all", "later")
if "ll2048" in gemms:
    capture("ll2048"); timed("ll2048", "own")
    timed("none", "later"); timed("ll2048", "later")
capture("triton2048"); timed("triton2048", "own")
timed("triton2048", "later")
w = warm("torch_all")
timed("triton2048", "between")
capture("torch_all", w); timed("torch_all", "own, cold warm-up")
timed("none", "later")

added = []
last_none = None
for name, where, us in log:
    if name == "none":
        last_none = us
    elif last_none is not None:
        added.append((name, where, round(us - last_none, 1)))
print("added over the last none:", added, flush=True)
json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "M": M, "log": log, "added": added},
          open(sys.argv[1], "w"), indent=1)
