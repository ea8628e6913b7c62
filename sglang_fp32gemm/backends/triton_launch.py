"""Compile a Triton kernel once and launch it with as little host work as possible.

The ordinary ``kernel[grid](...)`` launch costs about 21 us of host time on
the H200 machine's CPU; ``BoundKernel`` compiles one specialization at bind
time (``jit_fn.warmup``, 16-byte aligned pointers, integer arguments as a
specimen) and launches it through ``CompiledKernel.run(gx, gy, gz, stream,
function, packed_metadata, None, None, None, *args)``, the C launcher that
Triton 3.2 to 3.8 use (read in 3.6 and 3.8); the profiler's launch hooks are
not called. The caller takes this path only for calls inside the compiled
specialization. If the internal API differs, ``fast`` is False, ``reason``
says why, and the caller uses ``slow``, the ordinary launch; CPU devices and
``TRITON_INTERPRET=1`` always do. Details: docs/backends/triton.md.
"""

from __future__ import annotations

import logging
import os
import types
from typing import Any, Callable, Sequence

import torch

logger = logging.getLogger(__name__)

#: Names the runner inside ``CompiledKernel.__getitem__`` must use for the
#: launch convention the fast path copies (checked on the installed Triton).
_RUNNER_NAMES = frozenset({"run", "function", "packed_metadata", "launch_enter_hook", "launch_exit_hook"})


def raw_stream_getter() -> Callable[[int], int]:
    """``index -> current raw cudaStream_t`` of that device, the cheapest way torch offers."""
    f = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if f is not None:
        return f
    return lambda index: torch.cuda.current_stream(index).cuda_stream


def current_device_getter() -> Callable[[], int]:
    """``() -> current CUDA device index``, the cheapest way torch offers."""
    f = getattr(torch._C, "_cuda_getDevice", None)
    return f if f is not None else torch.cuda.current_device


def launch_convention_ok(compiled_kernel_cls: type) -> tuple[bool, str]:
    """Whether ``compiled_kernel_cls.__getitem__``'s runner launches the way the fast path does (the names
    it uses are checked, not its source text)."""
    getitem = getattr(compiled_kernel_cls, "__getitem__", None)
    code = getattr(getitem, "__code__", None)
    if code is None:
        return False, "CompiledKernel.__getitem__ is not a Python function"
    names: set[str] = set()
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(c.co_names)
    missing = sorted(_RUNNER_NAMES - names)
    if missing:
        return False, f"CompiledKernel's runner does not use {missing}: launch convention changed"
    return True, "ok"


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_version() -> tuple[int, int]:
    import triton

    parts = triton.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return (0, 0)


class BoundKernel:
    """One specialization of a ``@triton.jit`` kernel (run-time parameters first, then constexprs) for one device.

    ``launch(gx, gy, gz, stream, *args)``: the fast path (only when ``fast``),
    pointers as ints or tensors. ``slow(grid, *args)``: the ordinary launch.
    """

    def __init__(self, jit_fn: Any, device: torch.device, specimen: Sequence[Any], constexprs: dict[str, Any],
                 options: dict[str, Any], try_fast: bool = True) -> None:
        self.jit_fn = jit_fn
        self.device = device
        self.constexprs = dict(constexprs)
        # num_warps, num_stages, launch_pdl: compile options, so the compiled
        # kernel's C launcher applies launch_pdl itself on the fast path.
        self.options = dict(options)
        names = list(getattr(jit_fn, "arg_names", []))
        n_rt = len(names) - len(constexprs)
        if names and (n_rt != len(specimen) or set(names[n_rt:]) != set(constexprs)):
            raise ValueError(
                f"{names}: kernel parameters must be the {len(specimen)} run-time "
                f"arguments, then the constexprs {sorted(constexprs)}"
            )
        self._tail = tuple(self.constexprs[n] for n in names[n_rt:])
        self.fast = False
        self.reason = "not tried"
        self.launch: Callable[..., None] = self._no_fast
        if try_fast:
            try:
                self._bind_compiled(specimen)
            except Exception as e:  # any mismatch of the internal API: use the ordinary launch
                self.reason = f"{type(e).__name__}: {e}"
                logger.info("%s: ordinary Triton launches (%s)", getattr(jit_fn, "__name__", jit_fn), self.reason)

    # -- binding -----------------------------------------------------------------------------------
    def _bind_compiled(self, specimen: Sequence[Any]) -> None:
        if self.device.type != "cuda":
            raise RuntimeError(f"device {self.device} is not CUDA")
        if interpreting():
            raise RuntimeError("TRITON_INTERPRET=1: nothing is compiled")
        from triton.compiler.compiler import CompiledKernel

        ver = triton_version()
        if not (3, 2) <= ver < (4, 0):
            raise RuntimeError(f"triton {ver[0]}.{ver[1]} is outside the versions the fast launch was written for")
        ok, why = launch_convention_ok(CompiledKernel)
        if not ok:
            raise RuntimeError(why)
        with torch.cuda.device(self.device):
            ck = self.jit_fn.warmup(*specimen, grid=(1,), **self.constexprs, **self.options)
            if not isinstance(ck, CompiledKernel):
                raise RuntimeError(f"warmup returned {type(ck).__name__}, not a CompiledKernel")
            run = ck.run  # first access loads the module on this device
            function, meta = ck.function, ck.packed_metadata
        if function is None or not callable(run):
            raise RuntimeError("compiled kernel has no loaded function")
        self.compiled = ck
        self.launch = _fast_launcher(run, function, meta, self._tail)
        self.fast = True
        self.reason = "ok"

    def _no_fast(self, *args: Any) -> None:
        raise RuntimeError(f"no fast launch for this kernel ({self.reason})")

    # -- the ordinary launch -----------------------------------------------------------------------
    def slow(self, grid: tuple[int, ...], *args: Any) -> None:
        self.jit_fn[grid](*args, **self.constexprs, **self.options)


def _fast_launcher(run: Callable[..., Any], function: Any, meta: Any, tail: tuple) -> Callable[..., None]:
    def launch(gx: int, gy: int, gz: int, stream: int, *args: Any) -> None:
        run(gx, gy, gz, stream, function, meta, None, None, None, *args, *tail)

    return launch
