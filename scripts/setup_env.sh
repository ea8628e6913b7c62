#!/usr/bin/env bash
# Build the project's CPU-only test environment in .venv: torch, SGLang 0.5.23
# without its CUDA-only packages, and this package with its test extras.
# Idempotent: a second run reuses .venv and installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install --upgrade pip >/dev/null
# torch first and pinned: SGLang 0.5.23 pins torch 2.14.1 and its torchvision
# must match it (PyPI's CPU torchvision fails to load beside another torch).
pip install torch==2.14.1 torchvision==0.29.1
# SGLang itself without its dependency list, which pulls GBs of CUDA-only
# wheels; then the small dependencies its import chain and launch_server need.
pip install --no-deps sglang==0.5.23
pip install -c scripts/constraints-cpu.txt -r scripts/requirements-sglang-cpu.txt
pip install -c scripts/constraints-cpu.txt -e ".[test]"
# One older SGLang release for the default test run (tests/test_releases.py):
# 0.5.20, the release of the AMD measurements, into .sglang-releases/0.5.20
# (its own --no-deps folder; about 400 MB). The other releases:
# scripts/setup_releases.sh.
VENV="$VENV" bash scripts/setup_releases.sh 0.5.20
# FlyDSL and Debian's lld: compiling our gfx950 kernel on this CPU machine.
VENV="$VENV" bash scripts/setup_flydsl_compile.sh
"$VENV/bin/python" -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)"
