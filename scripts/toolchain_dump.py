"""Dump what the installed toolchains compile our kernels to, one file per kernel, for a diff against
another toolchain version (scripts/toolchain_check.sh). CPU only: nothing runs.

    python scripts/toolchain_dump.py ptx OUT   # CuTe-DSL forms -> sm_90a PTX (the installed CUTLASS DSL)
    python scripts/toolchain_dump.py isa OUT   # every shipped gfx950 FlyDSL config -> ISA (the installed FlyDSL)
    python scripts/toolchain_dump.py triton OUT   # every Triton row of configs/sm90*.csv -> sm_90 PTX (the installed Triton)

Each form's PTX is compiled in its own interpreter (the CUTLASS DSL keeps compiled state per process).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

#: (module, kernelName, N): the CuTe-DSL forms the tables route or the benchmarks time (register, staged PDL,
#: streamed, push, the fast table's streamed push form (run 19), 16- and 32-row, two dot-product forms); K is
#: V4-Pro's 7168.
PTX_FORMS = (
    ("cutedsl_mma", "cutedsl_mma_m8_w8_r1_c2_pdl", 1024),
    ("cutedsl_mma", "cutedsl_mma_m16_w4_r1_c8_pdl", 1024),
    ("cutedsl_mma", "cutedsl_mma_m8_w8_r1_c2_p4", 2048),
    ("cutedsl_mma", "cutedsl_mma_m8_w8_r1_c2_push_pdl", 1024),
    ("cutedsl_mma", "cutedsl_mma_m8_w8_r2_c2_p4_push_pdl", 1024),
    ("cutedsl_mma", "cutedsl_mma_m32_w8_r1_c4", 2560),
    ("cutedsl_dot", "cutedsl_dot_m1_t448_r1_pdl", 1024),
    ("cutedsl_dot", "cutedsl_dot_m2_t128_r4_pdl", 2560),
)
K = 7168


def _strip(text: str) -> str:
    """The code without comment lines (which name the compiler build and the dump's time)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith(("//", ";")))


def compile_one(module: str, name: str, n: int) -> None:
    import importlib

    mod = importlib.import_module(f"sglang_fp32gemm.backends.{module}")
    cfg_cls = mod.MmaConfig if module == "cutedsl_mma" else mod.DotConfig
    mod.compile_kernel(cfg_cls.parse(name), n, K)


def _record_version(out: pathlib.Path, dist: str) -> None:
    """out/VERSION: the toolchain this dump compiled with, so a check can tell two dumps apart."""
    import importlib.metadata

    out.mkdir(parents=True, exist_ok=True)
    (out / "VERSION").write_text(f"{dist} {importlib.metadata.version(dist)}\n")


def dump_ptx(out: pathlib.Path) -> None:
    _record_version(out, "nvidia-cutlass-dsl")
    for module, name, n in PTX_FORMS:
        d = out / f"{name}_n{n}"
        d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(d))
        subprocess.run([sys.executable, __file__, "one", module, name, str(n)], env=env, check=True)
        (ptx,) = d.glob("*.ptx")
        (out / f"{name}_n{n}.ptx").write_text(_strip(ptx.read_text()))
        print(f"{name} N={n}: {ptx.stat().st_size} bytes of PTX", flush=True)


def dump_isa(out: pathlib.Path) -> None:
    from sglang_fp32gemm.backends import flydsl_gfx950 as F

    _record_version(out, "flydsl")
    _source, rows = F.shipped_gfx950_rows()
    for name, n, k in sorted({(name, n, k) for _m, n, k, name in rows}):
        cfg = F.FlyDSLConfig.parse(name)
        paths = F.compile_for_gfx950(cfg, out / f"build_{cfg.short}_n{n}", n=n, k=k)
        (out / f"{cfg.short}_n{n}k{k}.s").write_text(_strip(paths[-1].read_text()))
        print(f"{cfg.short} N={n} K={k}: compiled", flush=True)


def dump_triton(out: pathlib.Path) -> None:
    """Compile every Triton row of the packaged sm90 tables for sm_90 with the launch options the plugin uses
    (``triton.compile`` of an ``ASTSource``: no GPU). Triton versions generate different code, so a check
    compares which rows compile and whether the PDL rows carry their ``griddepcontrol`` instructions."""
    import csv

    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from sglang_fp32gemm.backends.triton import TritonEpochBackend
    from sglang_fp32gemm.backends.triton_det import TritonSplitKBackend

    _record_version(out, "triton")
    pointer = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.int32: "*i32"}
    rows = sorted({(r["kernelName"], int(r["N"]), int(r["K"]))
                   for path in sorted(pathlib.Path("configs").glob("sm90*.csv"))
                   for r in csv.DictReader(path.open()) if r["libtype"].startswith("triton")})
    for name, n, k in rows:
        be = next(b for b in (TritonEpochBackend(), TritonSplitKBackend()) if name.startswith(b.CONFIG.PREFIX + "_"))
        cfg = be.parse(name)
        fn, consts = be.get_kernel(), cfg.constexprs(k, upcast=False)
        runtime = [a for a in fn.arg_names if a not in consts]  # run-time arguments first (BoundKernel checks)
        sig = {a: pointer[v] if isinstance(v, torch.dtype) else "i32" for a, v in zip(runtime, be.specimen(n, k))}
        sig.update(dict.fromkeys(consts, "constexpr"))
        src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=cfg.options(True)).asm["ptx"]
        pdl = "griddepcontrol.wait" in ptx and "griddepcontrol.launch_dependents" in ptx
        if pdl != cfg.pdl:
            raise SystemExit(f"{name}: PDL config {cfg.pdl} but griddepcontrol in its PTX {pdl}")
        (out / f"{name}_n{n}k{k}.ptx").write_text(_strip(ptx))
    print(f"{len(rows)} Triton rows compiled for sm_90 with Triton {triton.__version__}", flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "one":
        compile_one(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif what == "ptx":
        dump_ptx(pathlib.Path(sys.argv[2]))
    elif what == "isa":
        dump_isa(pathlib.Path(sys.argv[2]))
    elif what == "triton":
        dump_triton(pathlib.Path(sys.argv[2]))
    else:
        sys.exit(f"unknown {what!r}: ptx | isa | triton")
