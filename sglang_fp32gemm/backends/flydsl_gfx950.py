"""gfx950 (MI355X) FlyDSL backend: our own split-K skinny GEMM with C kept in fp32.

How it keeps precision, and why it is only compiled here, never run: docs/backends/flydsl.md.
flydsl is imported only inside functions, so importing this module works without it.
"""

import contextlib
import dataclasses
import inspect
import logging
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from sglang_fp32gemm.backends.base import OK, Backend, Verdict, sha12

if TYPE_CHECKING:  # pragma: no cover
    import torch

logger = logging.getLogger(__name__)

ARCH = "gfx950"
WAVE = 64          # CDNA wavefront size
MFMA_M = MFMA_N = 16
MFMA_K = 32        # v_mfma_f32_16x16x32_bf16 (gfx950 only)
VEC = 8            # bf16 per lane per MFMA operand = one 16-byte buffer load
MAX_WAVES = 16     # 1024 threads per workgroup
MAX_UNROLL = 64    # K iterations per block; the K loop is unrolled at trace time

# kernelName <-> FlyDSLConfig

_DT = r"(bf16|fp16|fp32)"
_INT = r"([1-9][0-9]*)"  # no leading zeros, so parse -> name is exact
_NAME_RE = re.compile(
    rf"flydsl_hgemm_a{_DT}_w{_DT}_{_DT}"
    rf"_t{_INT}x{_INT}x{_INT}x{_INT}_ks{_INT}_w{_INT}x{_INT}x{_INT}"
    rf"_bias([01])_ktail([01])_gm{_INT}_p(ft|ht|hti)_(gfx[0-9a-f]+)"
)
_NAME_PATTERN = (
    "flydsl_hgemm_a{bf16}_w{bf16}_{bf16|fp32}_t{BM}x{BN}x{BK}x{stages}_ks{splitK}"
    "_w{Mw}x{Nw}x{Kw}_bias{0|1}_ktail{0|1}_gm{G}_p{ft|ht|hti}_{gfx}"
)


@dataclasses.dataclass(frozen=True)
class FlyDSLConfig:
    """One aiter-style FlyDSL HGEMM kernelName, field by field."""

    a_dtype: str
    w_dtype: str
    out_dtype: str
    BM: int
    BN: int
    BK: int
    stages: int
    splitK: int
    Mw: int
    Nw: int
    Kw: int
    bias: bool
    ktail: bool
    gm: int
    policy: str
    gfx: str

    @classmethod
    def parse(cls, name: str) -> "FlyDSLConfig":
        if not isinstance(name, str):
            raise ValueError(f"FlyDSL kernelName must be a string, got {type(name).__name__}")
        m = _NAME_RE.fullmatch(name.strip())
        if m is None:
            raise ValueError(f"bad FlyDSL kernelName {name!r}: expected {_NAME_PATTERN}")
        a, w, o, bm, bn, bk, st, ks, mw, nw, kw, bias, ktail, gm, pol, gfx = m.groups()
        for what, dt in (("a", a), ("w", w)):
            if dt == "fp32":
                raise ValueError(f"bad FlyDSL kernelName {name!r}: {what} dtype must be bf16 or fp16, got fp32")
        return cls(a, w, o, int(bm), int(bn), int(bk), int(st), int(ks), int(mw), int(nw), int(kw),
                   bias == "1", ktail == "1", int(gm), pol, gfx)

    @property
    def name(self) -> str:
        return (
            f"flydsl_hgemm_a{self.a_dtype}_w{self.w_dtype}_{self.out_dtype}"
            f"_t{self.BM}x{self.BN}x{self.BK}x{self.stages}_ks{self.splitK}"
            f"_w{self.Mw}x{self.Nw}x{self.Kw}_bias{int(self.bias)}_ktail{int(self.ktail)}"
            f"_gm{self.gm}_p{self.policy}_{self.gfx}"
        )

    @property
    def waves(self) -> int:
        return self.Mw * self.Nw * self.Kw

    @property
    def uses_atomics(self) -> bool:
        """Several waves add into one C element: the output must be zeroed first."""
        return self.splitK * self.Kw > 1

    @property
    def short(self) -> str:
        return f"t{self.BM}x{self.BN}x{self.BK}x{self.stages}_ks{self.splitK}_w{self.Mw}x{self.Nw}x{self.Kw}"


def kernel_constraints(cfg: FlyDSLConfig) -> Optional[str]:
    """Why our kernel cannot implement ``cfg`` (shape-independent), or None."""
    if (cfg.a_dtype, cfg.w_dtype) != ("bf16", "bf16"):
        return f"inputs {cfg.a_dtype} x {cfg.w_dtype}: this kernel takes bf16 x bf16 only"
    if cfg.out_dtype != "fp32":
        return f"output {cfg.out_dtype}: this backend serves fp32 output only (16-bit output rounds C)"
    if cfg.gfx != ARCH:
        return f"kernel for {cfg.gfx}, this backend compiles for {ARCH} only"
    if cfg.bias:
        return "bias1: bias is not implemented"
    if cfg.ktail:
        return "ktail1: K tails are not implemented (K must divide by BK*splitK)"
    if cfg.policy != "ft":
        return f"policy p{cfg.policy}: only pft (full tiles) is implemented"
    if cfg.waves > MAX_WAVES:
        return f"{cfg.waves} waves per block exceeds {MAX_WAVES}"
    if cfg.BM % (MFMA_M * cfg.Mw):
        return f"BM={cfg.BM} must be a multiple of {MFMA_M}*Mw={MFMA_M * cfg.Mw}"
    if cfg.BN % (MFMA_N * cfg.Nw):
        return f"BN={cfg.BN} must be a multiple of {MFMA_N}*Nw={MFMA_N * cfg.Nw}"
    if cfg.BK % (MFMA_K * cfg.Kw):
        return f"BK={cfg.BK} must be a multiple of {MFMA_K}*Kw={MFMA_K * cfg.Kw}"
    return None


def shape_constraints(cfg: FlyDSLConfig, m: int, n: int, k: int) -> Optional[str]:
    """Why ``cfg`` cannot run an [m,k] x [n,k]^T call, or None."""
    if not 1 <= m <= 32:
        return f"M={m}: this skinny kernel takes 1 <= M <= 32"
    if n % cfg.BN:
        return f"N={n} is not a multiple of BN={cfg.BN}"
    if k % (cfg.BK * cfg.splitK):
        return f"K={k} is not a multiple of BK*splitK={cfg.BK * cfg.splitK}"
    nit = k // (cfg.BK * cfg.splitK)
    if nit > MAX_UNROLL:
        return f"K/(BK*splitK)={nit} K iterations exceeds the unroll limit {MAX_UNROLL}"
    # Byte offsets are 32-bit buffer offsets.
    if n * k * 2 >= 2**31 or 32 * k * 2 >= 2**31:
        return "operands too large for 32-bit buffer offsets"
    return None


# The kernel

def _plan(cfg: FlyDSLConfig, n: int, k: int) -> dict:
    """Static per-wave geometry, shared by the kernel builder and the checks."""
    wm, wn, wk = cfg.BM // cfg.Mw, cfg.BN // cfg.Nw, cfg.BK // cfg.Kw
    return dict(
        TM=wm // MFMA_M, TN=wn // MFMA_N, KSTEPS=wk // MFMA_K,
        WM=wm, WN=wn, WK=wk, KSPLIT=k // cfg.splitK, NIT=k // (cfg.BK * cfg.splitK),
        threads=cfg.waves * WAVE,
    )


def _build_kernel(cfg: FlyDSLConfig, n: int, k: int, kernel_name: str) -> Callable:
    """Return the @flyc.jit launcher ``launch(X, W, C, M, stream)`` for ``cfg``.

    Grid (N/BN, ceil(M/BM), splitK); the wave and lane layout is in docs/backends/flydsl.md.
    """
    import flydsl.compiler as flyc
    import flydsl.expr as fx
    from flydsl._mlir.extras import types as T
    from flydsl.expr import gpu, rocdl

    p = _plan(cfg, n, k)
    TM, TN, KSTEPS, NIT = p["TM"], p["TN"], p["KSTEPS"], p["NIT"]
    WM, WN, WK, KSPLIT = p["WM"], p["WN"], p["WK"], p["KSPLIT"]
    BM, BN, BK, Mw, Nw = cfg.BM, cfg.BN, cfg.BK, cfg.Mw, cfg.Nw
    STAGES = max(1, min(cfg.stages, NIT))
    ATOMIC = cfg.uses_atomics
    N, K = n, k

    @flyc.kernel(name=kernel_name)
    def fp32gemm_kernel(X: fx.Tensor, W: fx.Tensor, C: fx.Tensor, M: fx.Int32):
        tid = fx.Int32(gpu.thread_id("x"))
        n0 = fx.Int32(gpu.block_id("x")) * BN
        m0 = fx.Int32(gpu.block_id("y")) * BM
        k0 = fx.Int32(gpu.block_id("z")) * KSPLIT
        wave = tid // WAVE
        lane = tid % WAVE
        r = lane % 16
        g = lane // 16
        w_m = wave % Mw
        w_n = (wave // Mw) % Nw
        w_k = wave // (Mw * Nw)

        # Buffer descriptors bound X and C at M rows: the hardware returns 0
        # for loads of rows >= M and drops their stores, which masks M.
        xr = rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(fx.get_iter(X), num_records_bytes=fx.Int64(M) * (K * 2)))
        wr = rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(fx.get_iter(W)))
        cr = rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(fx.get_iter(C), num_records_bytes=fx.Int64(M) * (N * 4)))

        # Per-lane byte offsets of row/column starts (k-chunk g included).
        a_base = [((m0 + w_m * WM + tm * 16 + r) * K + k0 + w_k * WK + g * VEC) * 2 for tm in fx.range_constexpr(TM)]
        b_base = [((n0 + w_n * WN + tn * 16 + r) * K + k0 + w_k * WK + g * VEC) * 2 for tn in fx.range_constexpr(TN)]
        vty = T.vector(VEC, T.bf16())

        def load_step(it):
            # One BK step of this wave: KSTEPS MFMA k-slices of every A and B tile.
            frags = []
            for kk in fx.range_constexpr(KSTEPS):
                koff = (it * BK + kk * MFMA_K) * 2
                a = [rocdl.raw_ptr_buffer_load(vty, xr, a_base[tm] + koff, 0, 0) for tm in fx.range_constexpr(TM)]
                b = [rocdl.raw_ptr_buffer_load(vty, wr, b_base[tn] + koff, 0, 0) for tn in fx.range_constexpr(TN)]
                frags.append((a, b))
            return frags

        acc = [[fx.Vector.filled(4, 0.0, fx.Float32) for _ in fx.range_constexpr(TN)] for _ in fx.range_constexpr(TM)]
        # Register pipeline, unrolled at trace time: loads for step it+STAGES-1
        # are issued before the MFMAs of step it.
        queue = [load_step(s) for s in fx.range_constexpr(STAGES - 1)]
        for it in fx.range_constexpr(NIT):
            if fx.const_expr(it + STAGES - 1 < NIT):
                queue.append(load_step(it + STAGES - 1))
            frags = queue.pop(0)
            for a, b in frags:
                for tm in fx.range_constexpr(TM):
                    for tn in fx.range_constexpr(TN):
                        acc[tm][tn] = rocdl.mfma_f32_16x16x32_bf16(
                            T.vector(4, T.f32()), [a[tm], b[tn], acc[tm][tn], 0, 0, 0])
            # Keep the machine scheduler from hoisting later loads past this
            # point: what is in flight is what STAGES says (and VGPRs stay low).
            rocdl.sched_barrier(0)

        # Epilogue: C stays fp32 from the accumulator to memory.
        for tm in fx.range_constexpr(TM):
            for tn in fx.range_constexpr(TN):
                v = fx.Vector(acc[tm][tn])
                col = n0 + w_n * WN + tn * 16 + r
                for i in fx.range_constexpr(4):
                    row = m0 + w_m * WM + tm * 16 + g * 4 + i
                    off = (row * N + col) * 4
                    if fx.const_expr(ATOMIC):
                        rocdl.raw_ptr_buffer_atomic_fadd(v[i], cr, off, 0, 0)
                    else:
                        rocdl.raw_ptr_buffer_store(v[i].ir_value(), cr, off.ir_value(),
                                                   fx.Int32(0).ir_value())

    @flyc.jit
    def launch(X: fx.Tensor, W: fx.Tensor, C: fx.Tensor, M: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        # kernel_name is a closure scalar here so FlyDSL's disk-cache key
        # covers it (and with it the hash of this builder's source).
        _tag = kernel_name  # noqa: F841
        fp32gemm_kernel(X, W, C, M).launch(
            grid=(N // BN, (M + (BM - 1)) // BM, cfg.splitK), block=(p["threads"], 1, 1), stream=stream)

    return launch


# The functions whose text defines the compiled code. Add any new helper the
# kernel calls here, so that editing it changes the kernel name.
_KERNEL_SOURCES: tuple[Callable, ...] = (_plan, _build_kernel)


def kernel_source_tag() -> str:
    """Hash of the kernel's own source: changes whenever its body does."""
    text = "\n".join(inspect.getsource(f) for f in _KERNEL_SOURCES)
    return sha12(text.encode())


def tagged_kernel_name(cfg: FlyDSLConfig, n: Optional[int] = None, k: Optional[int] = None) -> str:
    """The compiled kernel symbol for ``cfg`` (and N, K when given): config plus source hash.

    FlyDSL's disk cache may not hash @flyc.kernel bodies: the hash in the name keeps a stale binary out.
    """
    shape = f"_n{n}k{k}" if n is not None and k is not None else ""
    return f"sglfp32_hgemm_bf16_fp32c_{cfg.short}{shape}_{kernel_source_tag()}"


# Compile-only for gfx950 on a CPU machine

_COMPILE_LOCK = threading.Lock()


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def find_rocm_link_dir() -> Optional[Path]:
    """A folder whose llvm/bin/ld.lld works (what FlyDSL looks for under ROCM_PATH)."""
    cands = [os.environ.get("SGLANG_FP32GEMM_FLYDSL_ROCM_PATH"), os.environ.get("ROCM_PATH"),
             str(Path(__file__).resolve().parents[2] / ".flydsl-rocm"), "/opt/rocm"]
    for c in cands:
        if c and (Path(c) / "llvm" / "bin" / "ld.lld").exists():
            return Path(c)
    return None


def compile_for_gfx950(cfg: FlyDSLConfig, dump_dir: str | os.PathLike, n: int = 1024,
                       k: int = 7168) -> list[Path]:
    """Compile ``cfg`` for gfx950 without a GPU; the dumped ISA file(s).

    RuntimeError if flydsl or ld.lld is missing, ValueError if the config or shape is not supported.
    """
    reason = kernel_constraints(cfg) or shape_constraints(cfg, 32, n, k)
    if reason:
        raise ValueError(f"{cfg.name}: {reason}")
    try:
        import torch
        import flydsl.compiler as flyc
    except ImportError as e:
        raise RuntimeError(f"flydsl is not importable: {e}") from None
    rocm = find_rocm_link_dir()
    if rocm is None:
        raise RuntimeError("no ld.lld link folder (run scripts/setup_flydsl_compile.sh)")
    dump = Path(dump_dir).resolve()
    dump.mkdir(parents=True, exist_ok=True)
    name = tagged_kernel_name(cfg, n, k)
    env = {
        "ROCM_PATH": str(rocm), "COMPILE_ONLY": "1", "ARCH": ARCH, "FLYDSL_GPU_ARCH": ARCH,
        "FLYDSL_DEBUG_DUMP_ASM": "1", "FLYDSL_DUMP_DIR": str(dump),
        # A private cache: a compile check must really compile.
        "FLYDSL_RUNTIME_ENABLE_CACHE": "0", "FLYDSL_RUNTIME_CACHE_DIR": str(dump / ".cache"),
    }
    with _COMPILE_LOCK, _env(env):
        launch = _build_kernel(cfg, n, k, name)
        # CPU tensors are compile placeholders; M is dynamic (a runtime arg).
        x = torch.zeros(32, k, dtype=torch.bfloat16)
        w = torch.zeros(n, k, dtype=torch.bfloat16)
        c = torch.zeros(32, n, dtype=torch.float32)
        flyc.compile(launch, flyc.from_dlpack(x).mark_shape_dynamic(0), w,
                     flyc.from_dlpack(c).mark_shape_dynamic(0), 32)
    out = sorted((dump / name).glob("*.s"))
    if not out:
        raise RuntimeError(f"compiled {cfg.name} but no ISA was dumped under {dump / name}")
    return out


# ISA inspection (used by the compile check script and the tests)

GFX950_LIMITS = {"vgpr+agpr": 512, "sgpr": 102, "lds_bytes": 160 * 1024}
# Any narrowing of an fp32 value to 16 bits in the kernel is a precision bug.
_NARROW_RE = re.compile(r"\bv_cvt_(pk_)?(bf16|f16)_f32|\bv_cvt_pkrtz_f16_f32|\bv_cvt_scalef32_pk_(bf16|f16)")
_MFMA_RE = re.compile(r"^\s*(v_mfma_\S+)", re.M)


def inspect_isa(text: str) -> dict[str, Any]:
    """Facts about one dumped ISA file: instruction counts and metadata."""
    body = "\n".join(l.split(";", 1)[0] for l in text.splitlines())

    def meta(key: str) -> Optional[int]:
        m = re.search(rf"^\s*\.{key}:\s*(\d+)", text, re.M)
        return int(m.group(1)) if m else None

    def count(pat: str) -> int:
        return len(re.findall(pat, body, re.M))

    mfma = _MFMA_RE.findall(body)
    names = re.findall(r"^\s*\.name:\s*(\S+)", text, re.M)
    return {
        "kernel": next((n for n in names if not n.startswith(".")), ""),
        "mfma": len(mfma),
        "mfma_kinds": sorted(set(mfma)),
        "narrowing": sorted(set(m.group(0) for m in _NARROW_RE.finditer(body))),
        "atomic_f32": count(r"^\s*(buffer|global)_atomic_add_f32\b"),
        "store_f32": count(r"^\s*(buffer|global)_store_dword(x[234])?\b"),
        "store_16bit": count(r"^\s*(buffer|global)_store_(short|byte)\w*|^\s*ds_write_b16\b"),
        "vgpr": meta("vgpr_count"),
        "agpr": meta("agpr_count") or 0,
        "sgpr": meta("sgpr_count"),
        "lds_bytes": meta("group_segment_fixed_size"),
        "scratch_bytes": meta("private_segment_fixed_size"),
        "vgpr_spill": meta("vgpr_spill_count"),
        "sgpr_spill": meta("sgpr_spill_count"),
    }


def isa_problems(facts: dict[str, Any], cfg: FlyDSLConfig, n: int = 1024, k: int = 7168) -> list[str]:
    """What is wrong with a kernel's ISA for ``cfg``; empty when it passes."""
    bad = []
    p = _plan(cfg, n, k)
    want_mfma = p["NIT"] * p["KSTEPS"] * p["TM"] * p["TN"]
    if facts["mfma"] == 0:
        bad.append("no MFMA instruction")
    elif facts["mfma"] != want_mfma:
        bad.append(f"{facts['mfma']} MFMA, expected {want_mfma}")
    if facts["narrowing"]:
        bad.append("narrows fp32 to 16 bits: " + ", ".join(facts["narrowing"]))
    if facts["store_16bit"]:
        bad.append(f"{facts['store_16bit']} 16-bit stores")
    if cfg.uses_atomics and facts["atomic_f32"] == 0:
        bad.append("split-K without buffer/global_atomic_add_f32")
    if not cfg.uses_atomics and facts["store_f32"] == 0:
        bad.append("no fp32 store of C")
    if facts["vgpr"] is None or facts["lds_bytes"] is None:
        bad.append("register/LDS metadata missing from the ISA")
    else:
        if facts["vgpr"] + facts["agpr"] > GFX950_LIMITS["vgpr+agpr"]:
            bad.append(f"VGPR {facts['vgpr']}+AGPR {facts['agpr']} > {GFX950_LIMITS['vgpr+agpr']}")
        if facts["lds_bytes"] > GFX950_LIMITS["lds_bytes"]:
            bad.append(f"LDS {facts['lds_bytes']} B > {GFX950_LIMITS['lds_bytes']}")
    if facts["sgpr"] is not None and facts["sgpr"] > GFX950_LIMITS["sgpr"] + 6:  # +VCC etc.
        bad.append(f"SGPR {facts['sgpr']} over the limit")
    if facts["scratch_bytes"] or facts["vgpr_spill"] or facts["sgpr_spill"]:
        bad.append(f"spills to scratch ({facts['scratch_bytes']} B)")
    if not facts["kernel"].endswith(kernel_source_tag()):
        bad.append(f"kernel symbol {facts['kernel']!r} lacks the source tag {kernel_source_tag()}")
    return bad


# The backend

class FlyDSLBackend(Backend):
    """Runs our FlyDSL kernel on gfx950 for rows with libtype ``flydsl``."""

    name = "flydsl"
    libtype = "flydsl"
    # Never run on an MI355X by this project: probe each kernel in a child first.
    isolated_probe = True

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def available(self) -> Verdict:
        import torch

        if not getattr(torch.version, "hip", None):
            return False, "torch is not a ROCm build"
        if not torch.cuda.is_available():
            return False, "no ROCm device visible"
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        arch = (getattr(props, "gcnArchName", "") or "").split(":")[0]
        if arch != ARCH:
            return False, f"device arch {arch or '?'} is not {ARCH}"
        try:
            import flydsl  # noqa: F401
            import flydsl.compiler  # noqa: F401
        except Exception as e:  # ImportError or a broken native library
            return False, f"flydsl not importable: {e}"
        return OK

    def parse(self, kernel_name: str) -> FlyDSLConfig:
        return FlyDSLConfig.parse(kernel_name)

    def deterministic(self, cfg: FlyDSLConfig) -> bool:
        # Split-K partials are added with fp32 atomics: order varies.
        return not cfg.uses_atomics

    def supports(self, cfg: FlyDSLConfig, m: int, n: int, k: int) -> Verdict:
        if cfg.out_dtype != "fp32":
            return False, f"{cfg.name} writes {cfg.out_dtype}, not fp32"
        reason = kernel_constraints(cfg) or shape_constraints(cfg, m, n, k)
        if reason:
            return False, f"{cfg.name}: {reason}"
        return OK

    def source_tag(self, cfg: FlyDSLConfig) -> str:
        return kernel_source_tag()

    def bind(self, cfg: FlyDSLConfig, device: Any, n: int, k: int) -> Callable:
        import torch
        import flydsl.compiler as flyc

        with self._lock:
            launch = _build_kernel(cfg, n, k, tagged_kernel_name(cfg, n, k))
        logger.info("flydsl: built %s on %s", tagged_kernel_name(cfg, n, k), device)
        # Split-K adds fp32 partials with atomics: the output starts at zero
        # (one extra memset launch per call, counted in docs/backends/flydsl.md).
        alloc = torch.zeros if cfg.uses_atomics else torch.empty
        f32 = torch.float32

        def run(x: "torch.Tensor", w: "torch.Tensor") -> "torch.Tensor":
            m = x.shape[0]
            out = alloc((m, n), dtype=f32, device=x.device)
            launch(flyc.from_dlpack(x).mark_shape_dynamic(0), w, flyc.from_dlpack(out).mark_shape_dynamic(0),
                   m, stream=torch.cuda.current_stream(x.device))
            return out

        return run


def launches_per_call(cfg: FlyDSLConfig) -> int:
    """Device launches per routed call: the memset for atomics, then the GEMM."""
    return 2 if cfg.uses_atomics else 1


# The configurations to verify: the shipped gfx950 rows

def shipped_gfx950_rows() -> tuple[str, list[tuple[int, int, int, str]]]:
    """(source, [(M, N, K, kernelName)]) of the packaged gfx950 flydsl rows; source "none" if none."""
    from sglang_fp32gemm.table import packaged_tables, parse_csv

    rows: list[tuple[int, int, int, str]] = []
    sources: list[str] = []
    for name, text in packaged_tables():
        got = [r for r in parse_csv(text, name) if r.gfx == ARCH and r.libtype == "flydsl"]
        if got:
            sources.append(name)
            rows.extend((r.M, r.N, r.K, r.kernelName) for r in got)
    return ", ".join(sources) or "none", rows
