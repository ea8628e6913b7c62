"""python -m sglang_fp32gemm {explain,demo,bench,tune,fuzz}"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = ("explain", "demo", "bench", "tune", "fuzz")
    if not argv or argv[0] not in cmds:
        print(f"usage: python -m sglang_fp32gemm {{{','.join(cmds)}}} [options]\n"
              "  explain  device key, tables, backends, settings and where each DSv4 call would go\n"
              "  demo     run SGLang's DeepSeek-V4 compressor layers through the plugin\n"
              "  bench    time routed calls against torch on this GPU (CUDA-graph replay)\n"
              "  tune     search Triton kernel configs on this GPU and write table rows\n"
              "  fuzz     random shapes through the routed call against float64 (GPU)",
              file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "explain":
        import argparse

        from sglang_fp32gemm.explain import explain

        ap = argparse.ArgumentParser(prog="python -m sglang_fp32gemm explain")
        ap.add_argument("--device-key", help="show routes for another device, e.g. gfx950:256 or sm90:132")
        ap.add_argument("--max-m", type=int, default=64)
        a = ap.parse_args(rest)
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
    if cmd == "demo":
        from sglang_fp32gemm.demo import main as demo

        return demo(rest)
    if cmd == "bench":
        from sglang_fp32gemm.tools.bench import main as bench

        return bench(rest)
    if cmd == "tune":
        from sglang_fp32gemm.tools.tune import main as tune

        return tune(rest)
    from sglang_fp32gemm.tools.fuzz import main as fuzz

    return fuzz(rest)


if __name__ == "__main__":
    sys.exit(main())
