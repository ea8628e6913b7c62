"""One shape of each bench mode: torch, the routed call and every backend's column,
timed the same way (tools/timing.py) and checked with ``exactness``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from typing import Any, Callable, Optional

import torch

from sglang_fp32gemm import exactness, pairs, table
from sglang_fp32gemm.tools import common, timing, vllm_peer
from sglang_fp32gemm.tools.picks import Picks

PEER = "vllm_ll"  # vLLM's ll_bf16 column (graph and region modes)


def _route(x: torch.Tensor, w: torch.Tensor, captured: bool) -> str:
    """The route of the call as timed (graph-captured or eager), or why it is unknown."""
    try:
        return common.route_of(x, w, captured=captured)
    except Exception as e:
        return f"? ({type(e).__name__}: {e})"


class Bench:
    def __init__(self, backends: list, device, timer, picks: Picks, replays: int = 15, peer: bool = False):
        self.device = device
        self.timer = timer
        self.picks = picks
        self.replays = replays
        #: vLLM's ll_bf16 at its best config of a sweep (tools/vllm_peer.py), or None and why not.
        self.peer, self.peer_why = vllm_peer.load(torch.device(device)) if peer else (None, "not asked")
        self.binds = common.BindCache()
        self._pairs: dict = {}
        self.torch_fn = timing.torch_fn(device)
        self.backends = []
        self.unavailable = {}
        for b in backends:
            ok, why = common.available(b)
            if ok:
                self.backends.append(b)
            else:
                self.unavailable[b.name] = why

    # the functions compared
    @staticmethod
    def routed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        from sglang_fp32gemm import routing

        return routing.linear_bf16_fp32(x, w)

    @classmethod
    def routed_pair(cls, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two GEMMs on the same x as the plugin makes them outside the multi-stream region: one launch where
        the pair table routes them (``pairs.call``, both counted), else each routed."""
        from sglang_fp32gemm import pairs, routing

        got = pairs.call(routing.get_router(), x, w1, w2, taken=True)
        return (got[0], got[1]) if got is not None else (cls.routed(x, w1), cls.routed(x, w2))

    def columns(self, m: int, n: int, k: int, pdl: bool = False) -> tuple[list[tuple[str, Callable, str, str]], dict]:
        """[(name, fn, kernel, source)] for every available backend that takes the shape, and {name: why not}."""
        cols, notes = [], {}
        for b in self.backends:
            cfg, kernel, source = self.picks.choose(b, m, n, k)
            name = f"{b.name}+pdl" if pdl else b.name
            if cfg is None:
                notes[name] = source
                continue
            if pdl:
                # Only a config can name PDL (cutedsl: the _pdl kernelName); no bind() takes it.
                if not (dataclasses.is_dataclass(cfg) and "pdl" in {f.name for f in dataclasses.fields(cfg)}):
                    notes[name] = "no PDL variant (its config has no pdl field)"
                    continue
                cfg = dataclasses.replace(cfg, pdl=True)
                kernel = b.kernel_name(cfg)
            try:
                fn = self.binds.get(b, cfg, kernel, self.device, n, k)
            except Exception as e:
                notes[name] = f"bind() raised {type(e).__name__}: {str(e)[:200]}"
                continue
            cols.append((name, fn, kernel, source))
        return cols, notes

    def pair_fn(self, m: int, n: int, n2: int, k: int) -> tuple[Optional[Callable], str]:
        """(fn(x, w, w2) -> (out, out2), "kernel (source)"): one launch for two GEMMs on the same x, by a backend's
        pair form (``bind_pair``). First the kernel of the serial table's row at the joined width N + N2 (what a
        routed call of that width takes outside the multi-stream region) where its backend has a pair form, else
        the first available backend with one: its tuned config at N + N2, else at N2 (the larger part), else its
        first candidate. (None, why not) where none takes both widths."""
        from sglang_fp32gemm import routing

        router = routing.get_router()
        dev = torch.device(self.device)
        p = router.plan(router.route_tables()[-1].device_key_of(dev), m, n + n2, k, serial=True)
        offers = []
        if p.backend is not None and hasattr(p.backend, "bind_pair"):
            offers.append((p.backend, p.cfg, p.backend.kernel_name(p.cfg), f"the serial table's row at N={n + n2}"))
        for b in self.backends:
            if hasattr(b, "bind_pair"):
                picks = [(width, *self.picks.choose(b, m, width, k)) for width in (n + n2, n2)]
                width, cfg, kernel, source = next((q for q in picks if q[3].startswith("tuned")), picks[0])
                offers.append((b, cfg, kernel, source if cfg is None else f"{source} at N={width}"))
        why = "no available backend has a pair form"
        for b, cfg, kernel, source in offers:
            if cfg is None or pairs.not_taken(b, cfg, m, (n, n2), k) is not None:
                why = f"{b.name}: {source if cfg is None else f'{kernel} does not take N={n} and N={n2}'}"
                continue
            key = (b.name, cfg, n, n2, k)
            try:
                if key not in self._pairs:
                    self._pairs[key] = b.bind_pair(cfg, self.device, n, n2, k)
            except Exception as e:
                why = f"{b.name}: bind_pair() raised {type(e).__name__}: {str(e)[:200]}"
                continue
            return self._pairs[key], f"{b.name} {kernel} ({source}), one launch for N={n} and N={n2}"
        return None, why

    def _time(self, fn, x, weights, notes: dict, name: str) -> Optional[float]:
        try:
            return round(self.timer.per_call(fn, x, weights, replays=self.replays), 3)
        except Exception as e:  # a failing kernel is a note in its column (Stop is no Exception)
            notes[name] = f"timing raised {type(e).__name__}: {str(e)[:200]}"
            return None

    def _precision(self, fns: dict[str, Callable], m, n, k, rec: dict, repeat_for: tuple = ()) -> None:
        for name, fn in fns.items():
            c = exactness.check(fn, self.device, m, n, k, repeat=2 if name in repeat_for else 0)
            rec["rel_err"][name] = None if math.isnan(c.rel_err) else c.rel_err
            rec["allclose"][name] = c.ok
            if c.repeatable is not None:
                rec.setdefault("repeatable", {})[name] = c.repeatable
            if not c.ok:
                rec["note"][name] = c.detail

    def graph_shape(self, m: int, n: int, k: int, weights, peers: bool, deterministic: bool) -> dict:
        x = exactness.random_bf16(m, k, device=self.device)
        rec: dict[str, Any] = {"M": m, "N": n, "K": k, "us": {}, "rel_err": {}, "allclose": {}, "kernel": {},
                               "source": {}, "note": {}, "floor_us": round(timing.floor_us(m, n, k), 3)}
        rec["us"]["torch"] = self._time(self.torch_fn, x, weights, rec["note"], "torch")
        rec["route"] = _route(x, weights[0], captured=True)
        rec["us"]["routed"] = self._time(self.routed, x, weights, rec["note"], "routed")
        fns = {"torch": self.torch_fn, "routed": self.routed}
        if peers:
            cols, notes = self.columns(m, n, k)
            rec["note"].update(notes)
            for name, fn, kernel, source in cols:
                rec["us"][name] = self._time(fn, x, weights, rec["note"], name)
                rec["kernel"][name], rec["source"][name] = kernel, source
                fns[name] = fn
            cfg, fn = self.peer_fn(m, n, k, weights, rec)
            if fn is not None:
                rec["us"][PEER] = self._time(fn, x, weights, rec["note"], PEER)
                rec["kernel"][PEER], rec["source"][PEER] = cfg, "best of the sweep"
                fns[PEER] = fn
        self._precision(fns, m, n, k, rec, repeat_for=("routed",) if deterministic else ())
        return rec

    def peer_absent(self, rec: dict) -> bool:
        """True, with the reason in ``rec["note"]``, when there is no vLLM column."""
        if self.peer is None:
            rec["note"][PEER] = self.peer_why
        return self.peer is None

    def peer_fn(self, m: int, n: int, k: int, weights, rec: dict) -> tuple[Optional[str], Optional[Callable]]:
        """(config, fn) of vLLM's ll_bf16 at the fastest exact config of its isolated sweep for (M, N, K), the
        sweep in ``rec["peer_sweep"]``; (None, None) with the reason in ``rec["note"]``. The caller times it."""
        if self.peer_absent(rec):
            return None, None
        cfg, fn, sweep = self.peer.pick(m, n, k, self.timer, weights, self.device, self.replays)
        rec.setdefault("peer_sweep", {})[str(n)] = sweep
        if fn is None:
            rec["note"][PEER] = f"no exact config at N={n}"
        return cfg, fn

    def eager_shape(self, m: int, n: int, k: int, weights, calls: int, runs: int, fallback: bool) -> dict:
        from sglang_fp32gemm import hooks

        torch_fn = self.torch_fn
        x = exactness.random_bf16(m, k, device=self.device)
        if fallback:
            fns = {"direct": torch_fn, "fallback": lambda a, b: hooks.around_linear(torch_fn, a, b)}
        else:
            fns = {"torch": torch_fn, "routed": self.routed,
                   "hooked": lambda a, b: hooks.around_linear(torch_fn, a, b)}
        rec: dict[str, Any] = {"M": m, "N": n, "K": k, "kind": "fallback" if fallback else "routed", "us": {},
                               "enqueue_us": {}, "rel_err": {}, "allclose": {}, "kernel": {}, "note": {}}
        rec["route"] = _route(x, weights[0], captured=False)
        if not fallback:
            cols, notes = self.columns(m, n, k)
            rec["note"].update(notes)
            for name, fn, kernel, _source in cols:
                fns[name] = fn
                rec["kernel"][name] = kernel
        for name, fn in list(fns.items()):  # warm-up: compiles, binds, allocator
            try:
                for i in range(20):
                    fn(x, weights[i % len(weights)])
            except Exception as e:
                rec["note"][name] = f"raised {type(e).__name__}: {str(e)[:200]}"
                del fns[name]
        walls: dict[str, list[float]] = {k_: [] for k_ in fns}
        enq: dict[str, list[float]] = {k_: [] for k_ in fns}
        for _ in range(runs):  # interleaved, so drift hits every variant alike
            for name, fn in fns.items():
                wall, e = self.timer.eager(fn, x, weights, calls)
                walls[name].append(wall)
                enq[name].append(e)
        for name in fns:
            rec["us"][name] = round(statistics.median(walls[name]), 3)
            rec["enqueue_us"][name] = round(statistics.median(enq[name]), 3)
        if fallback and "fallback" in fns and "direct" in fns:
            rec["added_us"] = round(rec["us"]["fallback"] - rec["us"]["direct"], 3)
            rec["added_enqueue_us"] = round(rec["enqueue_us"]["fallback"] - rec["enqueue_us"]["direct"], 3)
        self._precision(fns, m, n, k, rec)
        return rec

    def decode_shape(self, m: int, n: int, k: int, layers: dict, replays: int) -> dict:
        wf = layers["wf"]
        L = len(wf)
        x = exactness.random_bf16(m, k, device=self.device)
        rec: dict[str, Any] = {"M": m, "N": n, "K": k, "layers": L, "step_us": {}, "add_per_layer_us": {},
                               "rel_err": {}, "allclose": {}, "kernel": {}, "note": {}}

        base = timing.chain_step(x, layers)
        variants: dict[str, Callable] = {"torch": self.torch_fn, "routed": self.routed}
        for pdl in (False, True):
            cols, notes = self.columns(m, n, k, pdl=pdl)
            rec["note"].update(notes)
            for name, fn, kernel, _source in cols:
                variants[name] = fn
                rec["kernel"][name] = kernel
        rec["route"] = _route(x, wf[0], captured=True)
        b0, _ = self.timer.step(base, replays)
        for name, fn in variants.items():
            try:
                t, outs = self.timer.step(timing.chain_step(x, layers, fn), replays,
                                          refresh=lambda: exactness.refill(x))
            except Exception as e:
                rec["note"][name] = f"raised {type(e).__name__}: {str(e)[:200]}"
                continue
            rec["step_us"][name] = round(t, 2)
            worst, close = 0.0, True
            for i, o in enumerate(outs):
                got = exactness.measure(o, exactness.reference(x, wf[i]))
                worst = max(worst, got.rel_err)
                close = close and got.allclose and got.finite
            rec["rel_err"][name], rec["allclose"][name] = worst, close
        b1, _ = self.timer.step(base, replays)
        rec["base_step_us"] = [round(b0, 2), round(b1, 2)]
        base_us = (b0 + b1) / 2
        rec["alone_us"], rec["suspect"] = {}, {}
        for name, t in rec["step_us"].items():
            rec["add_per_layer_us"][name] = added = round((t - base_us) / L, 3)
            # one stream: a call that adds much less than it takes alone did not add its own cost (run 22)
            alone = self._time(variants[name], x, wf, rec["note"], f"{name} alone")
            if alone is not None:
                rec["alone_us"][name] = alone
                why = timing.one_stream_suspect(added, alone)
                if why:
                    rec["suspect"][name] = why
        return rec


# -- settings ------------------------------------------------------------------------
def set_deterministic(on: bool) -> None:
    from sglang_fp32gemm import routing, settings

    os.environ[settings.ENABLE_VAR] = "1"
    os.environ[settings.DETERMINISTIC_VAR] = "1" if on else "0"
    settings.reload()
    routing.reset_router()


def tables_info() -> list[dict]:
    out = []
    try:
        for name, text in table.packaged_tables():
            rows = [line for line in text.splitlines()[1:] if line.strip() and not line.startswith("#")]
            out.append({"file": name, "rows": len(rows)})
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"})
    return out
