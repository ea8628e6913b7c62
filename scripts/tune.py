#!/usr/bin/env python3
"""Same as `python -m sglang_fp32gemm tune`: see sglang_fp32gemm/tools/tune.py."""
import sys

from sglang_fp32gemm.tools.tune import main

sys.exit(main())
