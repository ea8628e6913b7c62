"""What "fp32-exact" means, defined once for the probes, the tools and the tests.

out = x @ w^T is exact when it is fp32 of the right shape, all finite, within ``REL_TOL`` of the float64
product of the same inputs and within the upstream ``allclose(atol=ATOL, rtol=RTOL)``; bf16 rounding of C
fails both. Inputs are fresh random values (never zeros, which hide unwritten outputs) and the output
memory is poisoned with NaN first.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Callable, Optional, Sequence

import torch

#: Relative error (Frobenius norm) against float64; fp32 accumulation over
#: K = 7168 lands near 1e-6, bf16 rounding of C near 2e-3.
REL_TOL = 1e-5
#: The upstream test tolerance (aiter PR #6005); any 16-bit rounding fails it.
ATOL, RTOL = 1e-2, 1e-4


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The exact product of the given (rounded) inputs, in float64: x @ w^T."""
    return x.double() @ w.double().t()


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf when ``out`` has a non-finite element."""
    o, r = out.double(), ref.double()
    if not bool(torch.isfinite(o).all()):
        return float("inf")
    denom = float(r.norm())
    diff = float((o - r).norm())
    return diff / denom if denom else diff


@dataclasses.dataclass(frozen=True)
class Measure:
    """How one output compares with its float64 reference."""

    rel_err: float
    finite: bool
    #: Fraction of elements outside atol/rtol (0.0 when all pass).
    bad: float

    @property
    def allclose(self) -> bool:
        return self.bad == 0.0

    @property
    def ok(self) -> bool:
        return self.finite and self.rel_err <= REL_TOL and self.allclose


def measure(out: torch.Tensor, ref: torch.Tensor) -> Measure:
    o = out.double()
    finite = bool(torch.isfinite(o).all())
    close = torch.isclose(o, ref.double(), atol=ATOL, rtol=RTOL)
    bad = float((~close).double().mean()) if close.numel() else 0.0
    return Measure(rel_error(out, ref), finite, bad)


def random_bf16(*shape: int, device: torch.device | str = "cpu",
                gen: Optional[torch.Generator] = None) -> torch.Tensor:
    """Fresh standard-normal values rounded to bf16; never an exact zero."""
    g = gen if gen is not None else torch.Generator().manual_seed(secrets.randbits(62))
    t = torch.randn(*shape, generator=g)
    t = torch.where(t == 0, torch.full_like(t, 0.5), t)
    return t.to(device=device, dtype=torch.bfloat16)


def refill(t: torch.Tensor) -> None:
    """Fresh values (as ``random_bf16``) in place: a captured graph's input gets new values."""
    t.copy_(random_bf16(*t.shape, device=t.device))


class StaleOutputs(RuntimeError):
    """A captured step's outputs were wrong after its input got fresh values: the graph did not run those calls."""


def check_replayed(outs: Sequence[torch.Tensor], operands: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Raise ``StaleOutputs`` unless each output is exact for its (x, w) as they are now (after ``refill``)."""
    if outs and len(outs) != len(operands):
        raise StaleOutputs(f"{len(outs)} outputs for {len(operands)} calls")
    for i, (o, (x, w)) in enumerate(zip(outs, operands)):
        got = measure(o, reference(x, w))
        if not got.ok:
            raise StaleOutputs(f"output {i} of {len(outs)} not exact after fresh x (rel. error {got.rel_err:.2e}): "
                               "the graph did not run this call in its replays")


def poison(device: torch.device | str, numel: int) -> None:
    """Leave a freed NaN block in the caching allocator, which the next fp32 output of ``numel`` reuses."""
    t = torch.full((max(int(numel), 1) + 1024,), float("nan"), dtype=torch.float32, device=device)
    del t


@dataclasses.dataclass(frozen=True)
class Check:
    """The verdict on one kernel at one shape (``check`` below)."""

    ok: bool
    rel_err: float
    shape: tuple[int, int, int]
    detail: str
    #: With ``repeat``: whether every repeated call gave the same bits.
    repeatable: Optional[bool] = None

    def describe(self) -> str:
        m, n, k = self.shape
        return f"probe M={m} N={n} K={k}: rel. error {self.rel_err:.2e} (limit {REL_TOL:.0e}); {self.detail}"


def check(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], device: torch.device,
          m: int, n: int, k: int, *, trials: int = 2, seed: Optional[int] = None,
          repeat: int = 0) -> Check:
    """Run ``fn(x, w)`` on ``trials`` fresh random inputs, output memory poisoned, against float64; any
    exception or inexact result fails. ``repeat``: run the last inputs that many more times (``repeatable``)."""
    device = torch.device(device)
    shape = (m, n, k)
    seed = secrets.randbits(62) if seed is None else int(seed)
    worst = 0.0
    x = w = out = None
    try:
        for trial in range(trials):
            gen = torch.Generator().manual_seed(seed + trial)
            x = random_bf16(m, k, device=device, gen=gen)
            w = random_bf16(n, k, device=device, gen=gen)
            ref = reference(x, w)
            poison(device, m * n)
            out = fn(x, w)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (m, n) or out.dtype != torch.float32:
                got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
                return Check(False, float("nan"), shape,
                             f"call {trial + 1} returned {got}, expected ({m}, {n}) torch.float32")
            r = measure(out, ref)
            if not r.ok:
                what = ("non-finite or unwritten output" if not r.finite
                        else "above fp32 tolerance (bf16 rounding gives ~2e-3)" if r.rel_err > REL_TOL
                        else f"{r.bad:.1%} of elements outside atol {ATOL:g} / rtol {RTOL:g}")
                return Check(False, r.rel_err, shape, f"call {trial + 1} (seed {seed + trial}): {what}")
            worst = max(worst, r.rel_err)
        repeatable = None
        if repeat:
            first = out.clone()
            repeatable = True
            for _ in range(repeat):
                poison(device, m * n)
                again = fn(x, w)
                repeatable = repeatable and bool(torch.equal(first, again))
    except Exception as e:  # any failure means: do not trust this kernel
        return Check(False, float("nan"), shape, f"raised {type(e).__name__}: {e}")
    return Check(True, worst, shape, f"fp32-exact ({trials} calls, seed {seed})", repeatable)


def fp32_bound_ok(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rel: float = REL_TOL) -> bool:
    """Relative error within ``rel``, or within fp32 summation's own bound for cancelling products.

    A product that cancels to nearly zero (tiny N, fp32 inputs) is judged by
    K * 2^-24 * || |x| |w|^T ||; a 16-bit rounding (2^-8 relative) fails both.
    """
    ref = reference(x, w)
    err = float((out.double() - ref).norm())
    scale = float((x.double().abs() @ w.double().abs().t()).norm())
    return err <= max(rel * float(ref.norm()), 2.0 * x.shape[-1] * 2.0**-24 * scale)
