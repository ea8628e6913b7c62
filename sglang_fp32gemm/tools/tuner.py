"""One shape of the tuner: gather every backend's candidates, gate them on
exactness, time them against torch, pick the fastest and the fastest
deterministic kernel valid for the whole bucket.

Ranking (``rank``): ``isolated`` orders the finalists by their time alone
(back-to-back calls of the one kernel); ``chain`` by what each call adds to a
serial decode chain (``CHAIN_LAYERS`` layers, each a bf16 GEMM, the call and
another bf16 GEMM, every layer its own weights, one CUDA graph); ``region``
by what each call adds to the model of SGLang's decode region (tools/region.py)
of the model that has the shape, in the schedule SGLang runs at that M
(overlapped up to its multi-stream limit, else serial), the model's other
fp32 GEMMs running the shipped tables' kernels (``others``; without it, left
out); the chain where no model has the shape; ``serial`` the
same in the serial schedule at every M (what SGLang runs outside its
multi-stream region: the serial table). An isolated winner need not win there
(docs/benchmarks/README.md, run 10).

Pairs (``pair=True``, serial rank only): the shape's N is a ratio-4 layer's two
GEMMs joined (``region.PAIR``: the indexer's compressor and the layer's, N1 + N2),
the candidates are the backends' pair forms (``PairForm``: one launch for both),
torch is its two calls, and a call is what one pair adds to the serial schedule:
the pair table (pairs.py).
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from typing import Any, Callable, Iterable, NamedTuple, Optional

import torch

from sglang_fp32gemm import exactness, pairs
from sglang_fp32gemm.table import TunedRow
from sglang_fp32gemm.tools import common, region, timing
from sglang_fp32gemm.tools.stopping import Budget
from sglang_fp32gemm.tools.tune_rows import Pick, ShapeResult

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Candidate:
    backend: Any
    cfg: Any
    kernel: str
    deterministic: bool

    @property
    def label(self) -> str:
        return f"{self.backend.name}:{self.kernel}"


class PairForm:
    """A backend's pair form as the tuner ranks it: the backend's own names, kernel names and configs (those
    that take both widths), bound at the joined width N1 + N2 as ``pairs.PairBinder`` binds it: ``fn(x, w)`` is
    both products side by side (what the exactness gate checks against x @ w^T), ``fn.pair(x, w1, w2)`` the
    one launch that is timed."""

    eager_ok = False  # the pair table serves captured and eager calls alike; no eager table is written

    def __init__(self, backend: Any, n1: int, n2: int):
        self.backend, self.n1, self.n2 = backend, n1, n2
        self.name, self.libtype = backend.name, backend.libtype
        self._binder = pairs.PairBinder(backend, n1, n2)

    def candidates(self, m: int, n: int, k: int) -> list:
        return [c for c in self.backend.candidates(m, n, k) if self.supports(c, m, n, k)[0]]

    def supports(self, cfg: Any, m: int, n: int, k: int) -> tuple[bool, str]:
        """Whether the form takes both widths at this M (a pair form is the single form's tiles over two W)."""
        if n != self.n1 + self.n2:
            return False, f"N={n} is not {self.n1} + {self.n2}"
        miss = pairs.not_taken(self.backend, cfg, m, (self.n1, self.n2), k)
        return (True, "ok") if miss is None else (False, f"N={miss[0]}: {miss[1]}")

    def parse(self, kernel: str) -> Any:
        return self.backend.parse(kernel)

    def kernel_name(self, cfg: Any) -> str:
        return self.backend.kernel_name(cfg)

    def deterministic(self, cfg: Any) -> bool:
        return self.backend.deterministic(cfg)

    def ctas(self, cfg: Any, m: int, n: int, k: int) -> Optional[int]:
        return self.backend.ctas(cfg, m, n, k)

    def bind(self, cfg: Any, device, n: int, k: int) -> Callable:
        return self._binder.bind(cfg, device, n, k)


def pair_forms(backends: Iterable, n1: int, n2: int) -> list[PairForm]:
    """The backends that have a pair form (``bind_pair``), as ``PairForm``s of widths ``n1`` and ``n2``."""
    return [PairForm(b, n1, n2) for b in backends if hasattr(b, "bind_pair")]


def torch_pair(torch_fn: Callable, n1: int) -> Callable:
    """Torch's side of a pair: its two calls, as a ``PairForm`` binds a pair (``fn.pair`` the two calls)."""
    return pairs.joined_fn(lambda x, w1, w2: (torch_fn(x, w1), torch_fn(x, w2)), n1)


def parse_caps(items: Iterable[str]) -> dict[str, int]:
    caps = {}
    for it in items:
        name, sep, num = it.partition("=")
        if not sep or not name or not num.isdigit():
            raise ValueError(f"--max-per-backend wants NAME=COUNT, got {it!r}")
        caps[name] = int(num)
    return caps


def gather_candidates(backends: list, m: int, n: int, k: int, bucket: list[int], caps: dict[str, int],
                      log: common.JsonLog) -> list[Candidate]:
    """The candidates of every backend for one shape, each valid for every M of the bucket."""
    out = []
    for b in backends:
        try:
            cfgs = list(b.candidates(m, n, k))
        except Exception as e:
            log.write(event="candidates_error", M=m, N=n, K=k, backend=b.name, error=f"{type(e).__name__}: {e}")
            continue
        if b.name in caps:
            cfgs = cfgs[:caps[b.name]]
        for cfg in cfgs:
            try:
                kernel = b.kernel_name(cfg)
                back = b.parse(kernel)
            except Exception as e:
                log.write(event="candidate", status="error", M=m, N=n, K=k, backend=b.name, kernel=repr(cfg),
                          error=f"kernel name round trip: {type(e).__name__}: {e}")
                continue
            if back != cfg:
                log.write(event="candidate", status="error", M=m, N=n, K=k, backend=b.name, kernel=kernel,
                          error=f"parse(kernel_name(cfg)) gives {back!r}, not {cfg!r}")
                continue
            why = _unsupported(b, cfg, m, n, k, bucket)
            if why is not None:
                log.write(event="candidate", status="unsupported", M=m, N=n, K=k, backend=b.name, kernel=kernel,
                          reason=why)
                continue
            out.append(Candidate(b, cfg, kernel, bool(b.deterministic(cfg))))
    return out


def _unsupported(b, cfg, m: int, n: int, k: int, bucket: list[int]) -> Optional[str]:
    """Why ``cfg`` cannot serve some M of the bucket, or None."""
    for mm in (bucket or [m]):
        try:
            ok, reason = b.supports(cfg, mm, n, k)
        except Exception as e:
            ok, reason = False, f"supports() raised {type(e).__name__}: {e}"
        if not ok:
            return f"M={mm}: {reason}"
    return None


def shipped_candidate(row: Optional[TunedRow], backends: list, m: int, n: int, k: int, bucket: list[int],
                      log: common.JsonLog) -> Optional[Candidate]:
    """The kernel a table row names (the row the shipped tables give the shape) as a candidate of the first of
    ``backends`` of its libtype that parses it and serves the whole bucket; None for no row, a torch row (torch
    is always timed) or a kernel none of them serves (logged)."""
    if row is None or row.libtype == "torch":
        return None
    for b in backends:
        if b.libtype != row.libtype:
            continue
        try:
            cfg = b.parse(row.kernelName)
        except Exception:  # another backend of the libtype may own the name
            continue
        if _unsupported(b, cfg, m, n, k, bucket) is None:
            return Candidate(b, cfg, b.kernel_name(cfg), bool(b.deterministic(cfg)))
    log.write(event="shipped", status="not_offered", M=m, N=n, K=k, libtype=row.libtype, kernel=row.kernelName,
              row=row.source, reason="no available backend of its libtype parses it and serves the whole bucket")
    return None


#: ``rank="chain"``: layers in the serial chain (``timing.chain_step``, as ``bench --decode-seq``).
CHAIN_LAYERS = 61
RANKS = ("isolated", "chain", "region", "serial")


class Setting(NamedTuple):
    """Where a rank times a call: ``step(fn)`` is one step with ``fn`` (None: the calls left out),
    which makes ``calls`` calls of the shape; ``operands()``: the (x, w) of each output of the step
    made last, in order."""

    name: str
    calls: int
    step: Callable[[Optional[Callable]], Callable[[], list]]
    operands: Callable[[], list]
    one_stream: bool = True  # every kernel after the one before it: no call can add less than its weight's read


class Tuner:
    def __init__(self, backends: list, device, timer, log: common.JsonLog, *, caps: dict[str, int] | None = None,
                 top: int = 3, screen_replays: int = 7, final_replays: int = 15,
                 budget: Optional[Budget] = None, torch_fn: Optional[Callable] = None, rank: str = "isolated",
                 rounds: int = 3, pair: bool = False,
                 others: Optional[Callable[[int, int, int], Optional[Candidate]]] = None):
        if rank not in RANKS:
            raise ValueError(f"rank {rank!r}: one of {', '.join(RANKS)}")
        if pair and rank != "serial":
            raise ValueError("pairs are ranked in the serial schedule only (rank 'serial'), where SGLang runs them")
        self.rank = rank
        self.pair = pair
        self.rounds = rounds
        self.backends = backends
        self.device = device
        self.timer = timer
        self.log = log
        self.caps = caps or {}
        self.top = top
        self.screen_replays = screen_replays
        self.final_replays = final_replays
        self.budget = budget or Budget()
        self.torch_fn = torch_fn or timing.torch_fn(device)
        self.binds = common.BindCache()
        self._weights: dict[tuple[int, int], list[torch.Tensor]] = {}
        self._regions: dict[str, tuple] = {}  # model name -> (weights, streams), made once
        #: (m, n, k) -> the kernel the region step runs at another fp32 GEMM of the model (None: torch, as
        #: SGLang's own function serves a torch row or no row); without it the other fp32 GEMMs are left out.
        self.others = others
        self._other_fns: dict[tuple[int, int, int], tuple[str, Callable]] = {}

    def weights(self, n: int, k: int) -> list[torch.Tensor]:
        w = self._weights.get((n, k))
        if w is None:
            w = self._weights[(n, k)] = self.timer.weights(n, k, self.device)
        return w

    def _fn(self, c: Candidate, n: int, k: int):
        return self.binds.get(c.backend, c.cfg, c.kernel, self.device, n, k)

    def widths(self, n: int, k: int) -> tuple[int, int]:
        """A pair shape's two widths: those of the model whose ratio-4 layers join to N at K."""
        spec = region.pair_spec_for(n, k)
        if spec is None:
            raise ValueError(f"no model's ratio-4 layer pairs two fp32 GEMMs of joined width N={n} at K={k}")
        return region.pair_widths(spec)

    def torch_of(self, n: int, k: int) -> Callable:
        """Torch's fn for the shape: with pairs, its two calls (``torch_pair``)."""
        return torch_pair(self.torch_fn, self.widths(n, k)[0]) if self.pair else self.torch_fn

    def alone(self, fn: Callable, n: int, k: int) -> Callable:
        """``fn`` as timed alone: a pair's one launch (its ``pair`` on the halves of w), not the joined output
        that the exactness gate checks (whose concatenation would be timed too)."""
        if not self.pair:
            return fn
        return pairs.on_halves(fn.pair, self.widths(n, k)[0])

    def _rec(self, c: Candidate, m, n, k, **kw) -> None:
        self.log.write(event="candidate", M=m, N=n, K=k, backend=c.backend.name, libtype=c.backend.libtype,
                       kernel=c.kernel, deterministic=c.deterministic, **kw)

    def check(self, c: Candidate, m: int, n: int, k: int, phase: str) -> Optional[exactness.Check]:
        """The exactness gate; None (and a log line) when the candidate fails it."""
        try:
            fn = self._fn(c, n, k)
            res = exactness.check(fn, self.device, m, n, k, repeat=2 if c.deterministic else 0)
        except Exception as e:
            self._rec(c, m, n, k, phase=phase, status="error", error=f"{type(e).__name__}: {str(e)[:300]}")
            return None
        if not res.ok:
            self._rec(c, m, n, k, phase=phase, status="rejected", rel_err=res.rel_err, error=res.detail)
            return None
        return res

    def time(self, c: Candidate, m: int, n: int, k: int, x: torch.Tensor, replays: int) -> Optional[float]:
        try:
            return self.timer.per_call(self.alone(self._fn(c, n, k), n, k), x, self.weights(n, k), replays=replays)
        except Exception as e:
            self._rec(c, m, n, k, phase="time", status="error", error=f"{type(e).__name__}: {str(e)[:300]}")
            return None

    def setting(self, m: int, n: int, k: int, x: torch.Tensor) -> Setting:
        """Where ``rank`` times the finalists: the region model of the shape's model (serial at every M for
        ``serial``: SGLang's steps outside its multi-stream region), else the chain; the model's other fp32 GEMMs
        run their shipped kernels there (``others``) or are left out. A pair (``pair``) is timed in the serial
        schedule with each ratio-4 layer's two GEMMs one call of it, the other fp32 GEMMs left out."""
        spec, schedule = self._region_of(m, n, k)
        if spec is None:
            weights = timing.chain_weights(CHAIN_LAYERS, n, k, self.device)
            return Setting("chain", CHAIN_LAYERS, lambda fn: timing.chain_step(x, weights, fn),
                           lambda: [(x, w) for w in weights["wf"]])
        weights, streams = self._region(spec)
        plans = region.plan(spec, schedule)
        steps = region.Steps(spec, plans, weights, x, streams)
        if self.pair:
            return Setting(f"region:{spec.name}:serial:pair", region.pairs(plans),
                           lambda fn: steps.of(None if fn is None else {"pair": fn.pair}), steps.operands)
        rest = self._rest(spec, m, n, k)
        return Setting(f"region:{spec.name}:{schedule}", region.fp32_calls(spec, n),
                       lambda fn: steps.of({**rest, n: fn} if fn is not None else rest or None),
                       steps.operands, schedule == "serial")

    def _rest(self, spec: region.ModelSpec, m: int, n: int, k: int) -> dict[int, Callable]:
        """The model's other fp32 GEMMs as the step runs them beside the shape (with ``others``): each shipped
        kernel, checked exact once, else torch; every one in the base step too, so that what a call adds is
        its cost beside them. Empty without ``others`` (the other fp32 GEMMs left out)."""
        if self.others is None:
            return {}
        rest = {}
        for on, ok in region.fp32_shapes(spec):
            if on == n or ok != k:
                continue
            key = (m, on, k)
            if key not in self._other_fns:
                c = self.others(m, on, k)
                label, fn = "torch", self.torch_fn
                if c is not None and self.check(c, m, on, k, "other") is not None:
                    label, fn = c.label, self._fn(c, on, k)
                self._other_fns[key] = (label, fn)
            rest[on] = self._other_fns[key][1]
        self.log.write(event="others", M=m, N=n, K=k, setting=spec.name,
                       others={str(on): self._other_fns[(m, on, k)][0] for on in rest})
        return rest

    def _region_of(self, m: int, n: int, k: int) -> tuple[Optional[region.ModelSpec], str]:
        """(the model whose region ``setting`` times the shape in, None for the chain; its schedule): a pair's
        model, serial; with rank region or serial the shape's model, serial at every M for ``serial``."""
        if self.pair:
            return region.pair_spec_for(n, k), "serial"
        spec = region.spec_for(n, k) if self.rank in ("region", "serial") else None
        return spec, "serial" if self.rank == "serial" else region.schedule_for(m, self.device)

    def _overlapped_first(self, m: int, n: int, k: int, x: torch.Tensor) -> None:
        """Before a shape ranked in a serial schedule is timed at all (alone too): one overlapped capture, once a
        process (``region.overlapped_first``: as a SGLang server has captured both kinds of batch; run 22)."""
        spec, schedule = self._region_of(m, n, k)
        if spec is not None and schedule == "serial":
            weights, streams = self._region(spec)
            region.overlapped_first(self.timer, spec, weights, x, streams, self.torch_fn)

    def _region(self, spec: region.ModelSpec) -> tuple:
        if spec.name not in self._regions:
            self._regions[spec.name] = (region.make_weights(spec, self.device), region.Streams(self.device))
        return self._regions[spec.name]

    def rerank(self, m: int, n: int, k: int, x: torch.Tensor, final: list,
               torch_alone_us: Optional[float] = None) -> Optional[tuple[float, list]]:
        """(torch's, the finalists re-ranked by) us each call adds in ``setting``; all logged. None when, on
        one stream, a call added less than reading its weight at the device's peak bandwidth takes, or much
        less than its own time alone (``torch_alone_us`` for torch; ``timing.one_stream_suspect``): what it
        added is not its cost (run 22: the rest of the step ran faster), and the shape keeps its isolated order (run 20,
        H200: torch's N=2048 call added 4.65 us in the serial schedule, where its 29.4 MB take 6.0, and PDL
        forms 0.29-0.38x their time alone). A PDL form may overlap the kernel before it, but none of runs
        15-19's 646 one-stream times fell below the read, nor 0.89x its time alone.

        Each round times the step without the calls, with torch's and with every finalist's,
        interleaved (``timing.rotated_rounds``); the medians over ``rounds`` rounds are compared,
        because the overlapped region varies by more than the differences between kernels from one
        graph to the next. Each capture's outputs are checked after x got fresh values before its
        last replay: a finalist whose calls the graph did not run is dropped, and if torch's were
        not run, nothing is ranked (None).
        """
        where = self.setting(m, n, k, x)
        fns = {"": None, "torch": self.torch_of(n, k)}
        for _, c, _ in final:
            try:
                fns[c.label] = self._fn(c, n, k)
            except Exception as e:
                self._rec(c, m, n, k, phase=self.rank, status="error", error=f"{type(e).__name__}: {str(e)[:300]}")
        times: dict[str, list[float]] = {label: [] for label in fns}
        for label in timing.rotated_rounds(times, self.rounds):  # a finalist that raised is dropped from times
            self.budget.check()
            try:
                t, outs = self.timer.step(where.step(fns[label]), self.final_replays,
                                          refresh=lambda: exactness.refill(x))
                exactness.check_replayed(outs, where.operands())
                times[label].append(t)
            except Exception as e:
                if not label:
                    raise  # the step without the calls: nothing can be ranked
                del times[label]
                self.log.write(event="candidate", phase=self.rank, status="error", M=m, N=n, K=k, kernel=label,
                               error=f"{type(e).__name__}: {str(e)[:300]}")
        base = statistics.median(times.pop(""))
        if "torch" not in times:  # nothing to measure the finalists against
            logger.warning("%s at M=%d N=%d K=%d: torch's step failed; the shape keeps its isolated order",
                           where.name, m, n, k)
            return None

        def added(label: str) -> float:
            return (statistics.median(times[label]) - base) / where.calls

        torch_us = added("torch")
        self.log.write(event="torch", phase=self.rank, setting=where.name, M=m, N=n, K=k, us=torch_us,
                       base_step_us=base, rounds=times["torch"])
        ranked = []
        for us, c, res in final:
            if c.label in times:
                self._rec(c, m, n, k, phase=self.rank, setting=where.name, status="ok", us=added(c.label),
                          isolated_us=us, rel_err=res.rel_err, rounds=times[c.label])
                ranked.append((added(c.label), c, res))
        ranked.sort(key=lambda r: r[0])
        if where.one_stream:
            # On one stream a call adds at least its weight's read at the device's peak bandwidth, and not much
            # less than its own time alone (timing.one_stream_suspect): below either, what it added is not its
            # cost (run 22: the rest of the step ran faster than the base).
            peak = timing.peak_bandwidth_tbs(self.device)
            floor = timing.floor_us(0, n, k, peak) if peak else 0.0  # the bf16 weight (x and C may sit in L2)
            alone = {"torch": torch_alone_us, **{c.label: us for us, c, _ in final}}
            low = {label: round(us, 3) for label, us in [("torch", torch_us), *((c.label, us) for us, c, _ in ranked)]
                   if us < floor or (alone.get(label) and timing.one_stream_suspect(us, alone[label]))}
            if low:
                self.log.write(event="rank_suspect", phase=self.rank, setting=where.name, M=m, N=n, K=k,
                               floor_us=round(floor, 3), peak_tbs=peak and round(peak, 3), below=low,
                               alone={label: alone.get(label) and round(alone[label], 3) for label in low})
                logger.warning("%s at M=%d N=%d K=%d: %d calls added less than their weight's read (%.2f us at "
                               "%s TB/s) or than %.2fx their time alone; the shape keeps its isolated order",
                               where.name, m, n, k, len(low), floor, peak and f"{peak:.2f}", timing.ONE_STREAM_FLOOR)
                return None
        return torch_us, ranked

    def lightest(self, screened: list, m: int, n: int, k: int) -> list:
        """Per backend, the fastest alone of each of its ``top`` smallest launches: beside other streams a
        kernel holding fewer SMs can add less where the isolated winners (many CTAs) cannot. A launch's size
        is its CTAs where the backend says (``Backend.ctas``), else its K split."""
        best: dict[tuple[str, int], tuple] = {}
        for r in screened:  # fastest alone first
            c = r[1]
            size = c.backend.ctas(c.cfg, m, n, k)
            best.setdefault((c.backend.name, common.split_k_of(c.cfg) if size is None else size), r)
        out = []
        for name in sorted({b for b, _ in best}):
            out += [best[(name, s)] for s in sorted(s for b, s in best if b == name)[:self.top]]
        return out

    def shape(self, m: int, n: int, k: int, bucket: list[int], cands: list[Candidate],
              shipped: Optional[Candidate] = None) -> ShapeResult:
        """``shipped``: the kernel the shipped tables route the shape to (``shipped_candidate``), screened
        like the rest and always a finalist, so that a row is never replaced by one that loses to it in the
        rank (run 28g: a region tune without the shipped form picked a row that lost 1.7 us a layer to it)."""
        if shipped is not None and all(c.label != shipped.label for c in cands):
            cands = [*cands, shipped]
        x = exactness.random_bf16(m, k, device=self.device)
        self._overlapped_first(m, n, k, x)
        weights = self.weights(n, k)
        torch_alone = self.alone(self.torch_of(n, k), n, k)
        torch_us = self.timer.per_call(torch_alone, x, weights, replays=self.screen_replays)
        self.log.write(event="torch", phase="screen", M=m, N=n, K=k, us=torch_us)
        screened: list[tuple[float, Candidate, exactness.Check]] = []
        rejected = 0
        for c in cands:
            self.budget.check()
            res = self.check(c, m, n, k, "check")
            if res is None:
                rejected += 1
                continue
            if c.deterministic and res.repeatable is False:
                self._rec(c, m, n, k, phase="check", status="not_repeatable", rel_err=res.rel_err,
                          note="called deterministic, gave different bits on the same inputs: "
                               "kept out of the deterministic table")
                c = dataclasses.replace(c, deterministic=False)
            us = self.time(c, m, n, k, x, self.screen_replays)
            if us is None:
                rejected += 1
                continue
            self._rec(c, m, n, k, phase="screen", status="ok", us=us, rel_err=res.rel_err)
            screened.append((us, c, res))
        screened.sort(key=lambda r: r[0])
        finalists = screened[:self.top] + [r for r in screened if r[1].deterministic][:self.top]
        if shipped is not None:
            finalists += [r for r in screened if r[1].label == shipped.label]
        if self.rank == "region":
            finalists += self.lightest(screened, m, n, k)
        if self.rank != "isolated":
            # Replayed back to back alone, a PDL form overlaps its own previous launch, which it cannot
            # where SGLang runs it (run 17c: PDL forms of one backend filled every final place, and
            # lost there): offer each backend's fastest form with and without PDL too.
            by_kind: dict[tuple[str, bool], tuple] = {}
            for r in screened:
                by_kind.setdefault((r[1].backend.name, bool(getattr(r[1].cfg, "pdl", False))), r)
            finalists += list(by_kind.values())
        seen, final = set(), []
        self.budget.check()
        torch_us = self.timer.per_call(torch_alone, x, weights, replays=self.final_replays)
        self.log.write(event="torch", phase="final", M=m, N=n, K=k, us=torch_us)
        for _, c, res in finalists:
            if c.label in seen:
                continue
            seen.add(c.label)
            self.budget.check()
            us = self.time(c, m, n, k, x, self.final_replays)
            if us is None:
                continue
            self._rec(c, m, n, k, phase="final", status="ok", us=us, rel_err=res.rel_err)
            final.append((us, c, res))
        final.sort(key=lambda r: r[0])
        alone, torch_alone_us = final, torch_us
        if self.rank != "isolated":
            reranked = self.rerank(m, n, k, x, final, torch_alone_us)
            if reranked is not None:
                torch_us, final = reranked
        lo = min(bucket) if bucket else m
        verified: dict[str, Optional[exactness.Check]] = {}

        def pick(rows, need_det: bool) -> Optional[Pick]:
            """The first of ``rows`` that is also exact (and repeatable, for need_det) at the bucket's smallest M."""
            for us, c, res in rows:
                if lo != m:
                    if c.label not in verified:
                        self.budget.check()
                        verified[c.label] = low = self.check(c, lo, n, k, f"verify M={lo}")
                        if low is not None:
                            self._rec(c, lo, n, k, phase="verify", status="ok", rel_err=low.rel_err,
                                      repeatable=low.repeatable, serves_row_m=m)
                    low = verified[c.label]
                    if low is None or (need_det and not low.repeatable):
                        continue
                return Pick(c.backend.name, c.backend.libtype, c.kernel, us, res.rel_err, common.split_k_of(c.cfg),
                            c.deterministic)
            return None

        fast = pick(final, False)
        det = pick([r for r in final if r[1].deterministic], True)
        # Ranked elsewhere, the isolated winner among kernels with a cheap eager launch is what calls
        # outside capture (one stream, no graph) should take: the eager table's candidate.
        eager = pick([r for r in alone if r[1].backend.eager_ok], False) if self.rank != "isolated" else None
        fast_alone_us = next((us for us, c, _ in alone if fast is not None and c.backend.name == fast.backend
                              and c.kernel == fast.kernel), 0.0)
        shipped_us = next((us for us, c, _ in final if shipped is not None and c.label == shipped.label), None)
        return ShapeResult(m, n, k, torch_us, list(bucket), fast, det, timed=len(screened), rejected=rejected,
                           eager=eager, torch_alone_us=torch_alone_us, fast_alone_us=fast_alone_us,
                           shipped=shipped.label if shipped is not None else None, shipped_us=shipped_us)
