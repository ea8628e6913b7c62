#!/usr/bin/env python3
"""Compile our FlyDSL kernel for gfx950 (no GPU needed) and check its ISA.

For every gfx950 flydsl row shipped in sglang_fp32gemm/configs (or a CSV
given with --csv): compile the row's config for its N and K, then check that
the ISA has the expected MFMA count, no fp32 -> 16-bit conversion, fp32
stores or fp32 atomics for C, no scratch spills, and VGPR/SGPR/LDS use within
gfx950 limits (read from the dumped kernel metadata).

Exit status: 0 all passed, 1 a check failed, 2 the toolchain is missing
(run scripts/setup_flydsl_compile.sh).
"""

import argparse
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_fp32gemm.backends import flydsl_gfx950 as F  # noqa: E402


def _rows(csv_path: str | None) -> tuple[str, list[tuple[int, int, int, str]]]:
    if csv_path is None:
        return F.shipped_gfx950_rows()
    from sglang_fp32gemm.table import read_csv_file

    rows = [(r.M, r.N, r.K, r.kernelName) for r in read_csv_file(csv_path)
            if r.gfx == F.ARCH and r.libtype == "flydsl"]
    return csv_path, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", help="a tuned CSV instead of the packaged gfx950 rows")
    ap.add_argument("--dump-dir", help="where the ISA goes (default: a temporary folder)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    source, rows = _rows(args.csv)
    if not rows:
        print(f"no gfx950 flydsl rows in {source}", file=sys.stderr)
        return 1
    dump = Path(args.dump_dir or tempfile.mkdtemp(prefix="flydsl_isa_"))
    print(f"rows: {source} ({len(rows)}); ISA under {dump}; kernel source tag {F.kernel_source_tag()}")
    hdr = f"{'M':>3} {'N':>5} {'config':<32} {'mfma':>5} {'C writes':<18} {'vgpr':>4} {'agpr':>4} {'sgpr':>4} {'lds':>5} result"
    print(hdr)
    print("-" * len(hdr))
    failed = 0
    done: dict[tuple, tuple[dict, list[str]]] = {}
    for m, n, k, name in rows:
        try:
            cfg = F.FlyDSLConfig.parse(name)
        except ValueError as e:
            print(f"{m:>3} {n:>5} {'?':<32} FAIL {e}")
            failed += 1
            continue
        why = F.kernel_constraints(cfg) or F.shape_constraints(cfg, m, n, k)
        if why:
            print(f"{m:>3} {n:>5} {cfg.short:<32} FAIL unsupported: {why}")
            failed += 1
            continue
        key = (cfg, n, k)  # M is a runtime argument: one binary per (config, N, K)
        if key not in done:
            try:
                isa = F.compile_for_gfx950(cfg, dump, n=n, k=k)[-1]
            except RuntimeError as e:
                print(f"toolchain missing: {e}", file=sys.stderr)
                return 2
            except Exception as e:  # a compile error is a failed check
                print(f"{m:>3} {n:>5} {cfg.short:<32} FAIL compile: {type(e).__name__}: {e}")
                failed += 1
                continue
            facts = F.inspect_isa(isa.read_text())
            done[key] = (facts, F.isa_problems(facts, cfg, n, k))
        facts, problems = done[key]
        writes = (f"{facts['atomic_f32']} atomic_add_f32" if facts["atomic_f32"]
                  else f"{facts['store_f32']} store_dword")
        result = "ok" if not problems else "FAIL " + "; ".join(problems)
        failed += bool(problems)
        print(f"{m:>3} {n:>5} {cfg.short:<32} {facts['mfma']:>5} {writes:<18} {facts['vgpr']:>4} "
              f"{facts['agpr']:>4} {facts['sgpr']:>4} {facts['lds_bytes']:>5} {result}")
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
