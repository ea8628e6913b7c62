"""Argument parsing shared by the commands: a bad argument is exit status 2 and one line on stderr
(``prog: error: ...``), not argparse's usage block; checked numbers.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error and the module docstring kept as written."""

    def __init__(self, prog: str, description: str | None = None, **kw) -> None:
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(prog=prog, description=description, **kw)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (--help for the options)", file=sys.stderr)
        raise SystemExit(2)


def positive_int(text: str) -> int:
    """An int >= 1, for argparse's ``type=``."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def parse_ints(text: str) -> list[int]:
    """'1-4,8,16-32:8' -> [1, 2, 3, 4, 8, 16, 24, 32] (ranges inclusive, optional :step; each >= 1)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        rng, _, step = part.partition(":")
        a, sep, b = rng.partition("-")
        lo, hi = int(a), int(b) if sep else int(a)
        st = int(step) if step else 1
        if lo < 1 or hi < lo or st < 1:
            raise ValueError(f"bad range {part!r}")
        out.extend(range(lo, hi + 1, st))
    return sorted(set(out))


def add_capture(ap: argparse.ArgumentParser) -> None:
    """``--capture``: how the timer captures CUDA graphs (``timing.CAPTURES``)."""
    from sglang_fp32gemm.tools.timing import CAPTURES

    ap.add_argument("--capture", choices=CAPTURES, default=CAPTURES[0],
                    help="CUDA-graph capture: one capture stream and one shared memory pool, as SGLang's graph "
                         "runner (sglang, the default), or a fresh stream and a private pool per graph (private)")


def run_command(main, argv: list[str]) -> int:
    """``main(argv)`` with argparse's exits (``--help``: 0, a bad argument: 2) returned as the status."""
    try:
        return int(main(argv) or 0)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
