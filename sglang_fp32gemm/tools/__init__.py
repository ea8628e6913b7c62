"""Command-line tools: benchmark, tuner and the CUDA-graph timing harness."""
