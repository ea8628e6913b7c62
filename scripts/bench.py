#!/usr/bin/env python3
"""Same as `python -m sglang_fp32gemm bench`: see sglang_fp32gemm/tools/bench.py."""
import sys

from sglang_fp32gemm.tools.bench import main

sys.exit(main())
