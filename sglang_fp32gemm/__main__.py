"""python -m sglang_fp32gemm {explain,demo,bench,tune,fuzz,joint} [options]"""

from __future__ import annotations

import importlib
import sys

PROG = "python -m sglang_fp32gemm"
COMMANDS = {
    "explain": "device key, tables, backends, settings and where each DSv4 call would go",
    "demo": "run SGLang's DeepSeek-V4 compressor layers through the plugin",
    "bench": "time torch, the routed call and every backend alone on this GPU (CUDA-graph replay)",
    "tune": "time every backend's candidate kernels and torch on this GPU; write the two tuned tables",
    "fuzz": "random shapes through the routed call against float64 (GPU)",
    "joint": "time the tables' kernels together in SGLang's decode region; torch rows where they lose (GPU)",
}


def usage() -> str:
    return (f"usage: {PROG} {{{','.join(COMMANDS)}}} [options]\n"
            + "".join(f"  {name:<8s} {what}\n" for name, what in COMMANDS.items())
            + f"{PROG} COMMAND --help shows a command's options.\n")


def _explain(argv: list[str]) -> int:
    from sglang_fp32gemm.explain import explain
    from sglang_fp32gemm.tools.cli import Parser

    ap = Parser(f"{PROG} explain", COMMANDS["explain"])
    ap.add_argument("--device-key", help="show routes for another device, e.g. gfx950:256 or sm90:132")
    ap.add_argument("--max-m", type=int, default=64, help="the largest M shown (default %(default)s)")
    a = ap.parse_args(argv)
    if a.device_key is not None:
        from sglang_fp32gemm.errors import ConfigError
        from sglang_fp32gemm.table import DeviceKey

        try:
            DeviceKey.parse(a.device_key)
        except ConfigError as e:
            print(f"error: --device-key: {e}", file=sys.stderr)
            return 2
    if a.max_m < 1:
        print(f"error: --max-m: must be >= 1, got {a.max_m}", file=sys.stderr)
        return 2
    code, text = explain(a.device_key, a.max_m)
    print(text, end="")
    return code


_MODULES = {"demo": "sglang_fp32gemm.demo", "bench": "sglang_fp32gemm.tools.bench",
            "tune": "sglang_fp32gemm.tools.tune", "fuzz": "sglang_fp32gemm.tools.fuzz",
            "joint": "sglang_fp32gemm.tools.joint"}


def main(argv: list[str] | None = None) -> int:
    """The exit status: 0 for ``--help``, 2 (one line on stderr) for a missing or unknown command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    if not argv or argv[0] not in COMMANDS:
        what = f"unknown command {argv[0]!r}" if argv else "no command"
        print(f"{PROG}: error: {what}; choose from {', '.join(COMMANDS)} (--help for more)", file=sys.stderr)
        return 2
    from sglang_fp32gemm.tools.cli import run_command

    command = _explain if argv[0] == "explain" else importlib.import_module(_MODULES[argv[0]]).main
    return run_command(command, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
