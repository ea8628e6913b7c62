"""What our CuTe-DSL backends (``cutedsl-dot``, ``cutedsl-mma``) share: availability, names, the compile, ``bind``.

Each compiles one form per (config, device, N, K) in ``bind``, on fake tensors
(M symbolic), with ``--enable-tvm-ffi``: a call passes the torch tensors and
the kernel launches on torch's current stream, with no per-call conversion.
cutlass and tvm_ffi are imported in ``available`` and a subclass's
``compile`` only.
"""

from __future__ import annotations

import abc
import math
from pathlib import Path
from typing import Any

import torch

from sglang_fp32gemm.backends.base import OK, Backend, KernelFn, Verdict, bind_device, file_source_tag, nvidia_capability

VEC = 8  # bf16 per 16-byte load


def compile_form(kern: Any, cfg: Any, n: int, k: int, n2: int = 0) -> Any:
    """The TVM-FFI function ``f(x, w, out)`` of the ``cute.jit`` callable ``kern`` (made for ``cfg``) for (N, K),
    compiled on fake tensors: x any 16-byte-aligned row stride, M symbolic; w and out packed. The kernel must
    launch the CTAs its config says (``cfg.ctas``, what the tuner reads). With ``n2``: ``f(x, w, out, w2, out2)``,
    a pair kernel that also writes out2[M, N2] = x @ w2^T in the same launch."""
    if math.prod(kern.grid) != cfg.ctas(n) + (cfg.ctas(n2) if n2 else 0):
        raise AssertionError(f"{cfg.name}: the kernel launches {kern.grid}, the config says "
                             f"{cfg.ctas(n)}{f' + {cfg.ctas(n2)}' if n2 else ''} CTAs")
    import cutlass
    import cutlass.cute as cute

    fake = cute.runtime.make_fake_tensor
    x = fake(cutlass.BFloat16, (cute.sym_int(), k), stride=(cute.sym_int64(divisibility=VEC), 1), assumed_align=16)

    def operands(width: int) -> tuple:
        return (fake(cutlass.BFloat16, (width, k), stride=(k, 1), assumed_align=16),
                fake(cutlass.Float32, (cute.sym_int(), width), stride=(width, 1), assumed_align=16))

    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    extra = operands(n2) if n2 else ()
    return cute.compile(kern, x, *operands(n), *extra, stream, options="--enable-tvm-ffi")


class TvmFfiBackend(Backend):
    """A CuTe-DSL kernel of ours, called through TVM-FFI; subclasses give ``compile`` and the config rules."""

    libtype = "cutedsl"
    # Run on the H200 by this project's GPU tests and tuner.
    isolated_probe = False
    # A call is one TVM-FFI call with torch tensors: no per-call conversion (checked on the
    # device by the eager bench; eager_ok False would send its eager calls elsewhere).
    eager_ok = True
    #: The subclass's frozen config class (names parse with its ``parse``, importing nothing) and the file of
    #: its ``@cute.jit`` kernel beside this one (what the probe verdict's source tag hashes).
    config_class: Any = None
    kernel_file = ""

    @abc.abstractmethod
    def compile(self, cfg: Any, n: int, k: int) -> Any:
        """The compiled ``f(x, w, out)`` for (cfg, N, K) (``compile_form``)."""

    def parse(self, kernel_name: str) -> Any:
        return self.config_class.parse(kernel_name)

    def ctas(self, cfg: Any, m: int, n: int, k: int) -> int:
        return cfg.ctas(n)  # each config class says it; compile_form checks the kernel's grid

    def source_tag(self, cfg: Any) -> str:
        return file_source_tag(Path(__file__).parent / self.kernel_file, "nvidia-cutlass-dsl", "cutlass-dsl")

    def available(self) -> Verdict:
        cap, why = nvidia_capability()
        if cap is None:
            return False, why
        major, minor = cap
        if major < 9:
            return False, f"sm_{major}{minor}: the kernel is built and tested for sm90 and later"
        try:
            import cutlass.cute  # noqa: F401
            import tvm_ffi  # noqa: F401
        except Exception as e:  # ImportError, or a broken install
            return False, f"the CuTe DSL with TVM-FFI does not import ({type(e).__name__}: {e})"
        return OK

    def deterministic(self, cfg: Any) -> bool:
        return True  # a fixed summation order (the kernel modules)

    def supports(self, cfg: Any, m: int, n: int, k: int) -> Verdict:
        return cfg.check_shape(m, n, k)

    def bind(self, cfg: Any, device: torch.device, n: int, k: int) -> KernelFn:
        device = bind_device(cfg, device, k, n, cuda_only=True)
        with torch.cuda.device(device):
            f = self.compile(cfg, n, k)
        f32 = torch.float32

        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            check_w(w)
            x = operand_x(x, k)
            out = torch.empty(x.shape[0], n, dtype=f32, device=device)  # sizes as arguments: parsed faster
            f(x, w, out)
            return out

        fn.compiled = f  # type: ignore[attr-defined]
        return fn


def check_w(w: torch.Tensor) -> None:
    """Raises where ``w`` is not 16-byte aligned (a weight is the same tensor on every call: the router then
    disables the kernel, one warning)."""
    if w.data_ptr() & 15:
        raise ValueError("w is not 16-byte aligned (the compiled form loads it 16 bytes at a time)")


def operand_x(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x`` as the compiled forms take it: 16-byte aligned rows (one row restrided, else a copy: small M)."""
    if x.stride()[0] % VEC or x.data_ptr() & 15:
        if x.shape[0] == 1 and not x.data_ptr() & 15:
            return x.as_strided((1, k), (k, 1))
        return x.clone(memory_format=torch.contiguous_format)
    return x
