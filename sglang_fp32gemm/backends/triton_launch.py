"""Compile a Triton kernel once and launch it with as little host work as possible.

The ordinary ``kernel[grid](...)`` launch costs about 21 us of host time on
the H200 machine's CPU; ``BoundKernel`` compiles one specialization at bind
time (``jit_fn.warmup``, 16-byte aligned pointers, integer arguments as a
specimen) and launches it through ``CompiledKernel.run(gx, gy, gz, stream,
function, packed_metadata, None, None, None, *args)``, the C launcher that
Triton 3.2 to 3.9 use (read in 3.6, 3.8 and 3.9); the profiler's launch hooks are
not called. The caller takes this path only for calls inside the compiled
specialization. If the internal API differs, ``fast`` is False, ``reason``
says why, and the caller uses ``slow``, the ordinary launch; CPU devices and
``TRITON_INTERPRET=1`` always do.

``CompiledKernel.run`` is Triton's ``CudaLauncher``, whose ``__call__`` is Python
(about 0.7 us a call on this project's CPU) around one call of its C function
``launch``; with no scratch memory to allocate that Python only passes
arguments on. ``direct_launcher`` calls ``launch`` itself with the arguments
``__call__`` would give it: it calls ``__call__`` at bind time on a copy of
the launcher whose ``launch`` records instead of launching, and keeps a
direct call only where the record is the launch arguments with the run-time
values in one of the two places Triton 3.5-3.9 put them and every other value
the same from one call to the next. Otherwise ``launch`` goes through
``CompiledKernel.run``. Details: docs/backends/triton.md.
"""

from __future__ import annotations

import copy
import logging
import os
import types
from typing import Any, Callable, Optional, Sequence

import torch

logger = logging.getLogger(__name__)

#: Names the runner inside ``CompiledKernel.__getitem__`` must use for the
#: launch convention the fast path copies (checked on the installed Triton).
_RUNNER_NAMES = frozenset({"run", "function", "packed_metadata", "launch_enter_hook", "launch_exit_hook"})


#: Every name ``CudaLauncher.__call__`` uses in Triton 3.5-3.9 (read in each): a launcher whose ``__call__`` uses
#: another may do more than pass arguments on, so it is not bypassed.
_LAUNCHER_CALL_NAMES = frozenset({
    "_allocation", "_allocator", "_profile_allocator", "get", "global_scratch_align", "global_scratch_size",
    "launch", "launch_cooperative_grid", "launch_pdl", "num_ctas", "profile_scratch_align", "profile_scratch_size",
    "arg_annotations", "kernel_signature", "has_profile_allocator", "allocate_default_profile_scratch", "active",
    "driver", "runtime", "triton", "gsan_enabled", "GSAN_PER_DEVICE_STATE_STRIDE", "_stream_sync", "experimental",
    "get_current_device", "get_device_rank", "get_global_state_pointer", "gsan", "synchronize_launch_stream",
    "triton.experimental.gsan._allocator", "triton.experimental.gsan._stream_sync",
    # 3.9: only its gsan branch changed (refused above), which asks these
    "RuntimeError", "utils", "is_stream_capturing", "get_launch_state",
})


def _code_names(fn: Any) -> Optional[set[str]]:
    """Every global and attribute name ``fn``'s code (and the functions it defines) uses; None: not Python."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return names


def direct_launcher(run: Any, function: Any, meta: Any, tail: tuple) -> tuple[Optional[Callable[..., None]], str]:
    """(``launch(gx, gy, gz, stream, *args)`` calling ``run.launch`` directly, or None; why), where ``run`` is a
    Triton ``CudaLauncher`` that ``launch_via_run`` would call as ``run(gx, gy, gz, stream, function, meta,
    None, None, None, *args, *tail)``. The direct call is derived from what ``run`` passes its ``launch`` in two
    recorded calls with different run-time values, and checked against a third."""
    c_launch = getattr(run, "launch", None)
    if not callable(c_launch):
        return None, "the launcher has no launch function"
    for attr in ("global_scratch_size", "profile_scratch_size"):
        if getattr(run, attr, None) != 0:
            return None, f"{attr} is {getattr(run, attr, None)!r}: the launcher allocates per call"
    if getattr(run, "gsan_enabled", False):
        return None, "the launcher is instrumented (gsan)"
    names = _code_names(getattr(type(run), "__call__", None))
    if names is None or not names <= _LAUNCHER_CALL_NAMES:
        return None, f"the launcher's __call__ uses {sorted((names or {'?'}) - _LAUNCHER_CALL_NAMES)}"

    def record(base: int) -> tuple[tuple, tuple, tuple]:
        """(what ``run`` passes its ``launch``, the grid and stream given, the kernel arguments given): values
        no launch argument can equal by chance, a different set for each call."""
        got: list[tuple] = []
        probe = copy.copy(run)  # the real launcher is shared with other bound kernels: never change it
        probe.launch = lambda *a: got.append(a)
        grid = tuple(base + i for i in range(4))
        args = tuple(base + 10 + i for i in range(_ARG_PROBE))
        type(run).__call__(probe, *grid, function, meta, None, None, None, *args, *tail)
        if len(got) != 1:
            raise RuntimeError(f"__call__ called launch {len(got)} times")
        return got[0], grid, args

    check: list[tuple] = []
    try:
        (first, g1, a1), (second, g2, a2), (third, g3, a3) = (record(1 << b) for b in (41, 42, 43))
        fn = _layout(first, g1, a1, second, g2, a2, tail, c_launch)
        if fn is None:
            return None, "the recorded launch arguments are not in a layout this launch knows"
        _layout(first, g1, a1, second, g2, a2, tail, lambda *a: check.append(a))(*g3, *a3)
    except Exception as e:  # any surprise: launch through run
        return None, f"recording the launch raised {type(e).__name__}: {e}"
    if check != [third]:
        return None, "the direct launch would not pass what the launcher passes"
    return fn, "ok"


#: Kernel arguments given to the recorded calls (the layouts do not depend on how many).
_ARG_PROBE = 3


def _layout(first: tuple, g1: tuple, a1: tuple, second: tuple, g2: tuple, a2: tuple, tail: tuple,
            c_launch: Callable[..., Any]) -> Optional[Callable[..., None]]:
    """The direct call, if both records are ``(*grid, *mid, *args, *tail)`` (Triton 3.5-3.6) or ``(*grid, *mid,
    (*args, *tail))`` (3.7-3.9) with the same ``mid``; else None."""
    if len(first) != len(second) or first[:4] != g1 or second[:4] != g2:
        return None
    full1, full2 = (*a1, *tail), (*a2, *tail)
    if first[-len(full1):] == full1 and second[-len(full2):] == full2:
        mid1, mid2, flat = first[4:-len(full1)], second[4:-len(full2)], True
    elif first[-1] == full1 and second[-1] == full2:
        mid1, mid2, flat = first[4:-1], second[4:-1], False
    else:
        return None
    if len(mid1) != len(mid2) or any(a is not b and a != b for a, b in zip(mid1, mid2)):
        return None  # a value that changes from call to call: not only arguments passed on
    mid = mid1
    if flat:
        def launch(gx: int, gy: int, gz: int, stream: int, *args: Any) -> None:
            c_launch(gx, gy, gz, stream, *mid, *args, *tail)
    else:
        def launch(gx: int, gy: int, gz: int, stream: int, *args: Any) -> None:
            c_launch(gx, gy, gz, stream, *mid, (*args, *tail))
    return launch


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
    names = _code_names(getattr(compiled_kernel_cls, "__getitem__", None))
    if names is None:
        return False, "CompiledKernel.__getitem__ is not a Python function"
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
        #: The fast path through ``CompiledKernel.run`` (``launch`` is it where ``direct`` is False).
        self.launch_via_run: Callable[..., None] = self._no_fast
        #: Whether ``launch`` calls the C launcher directly (``direct_launcher``), and why not.
        self.direct = False
        self.direct_reason = "not tried"
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
        self.launch_via_run = _fast_launcher(run, function, meta, self._tail)
        direct, self.direct_reason = direct_launcher(run, function, meta, self._tail)
        self.direct = direct is not None
        self.launch = direct or self.launch_via_run
        if not self.direct:
            logger.info("%s: launched through CompiledKernel.run (%s)", getattr(self.jit_fn, "__name__", self.jit_fn),
                        self.direct_reason)
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
