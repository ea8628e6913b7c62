#!/usr/bin/env bash
# Build the project's CPU-only test environment in .venv: torch, SGLang 0.5.23
# without its CUDA-only packages, this package with its test extras, SGLang
# 0.5.20 for the release tests, FlyDSL and lld-19 for the gfx950 compile checks.
# Idempotent: a second run reuses .venv and installs only what is missing.
# One line per step; each step's whole output is in .venv/setup-logs/ and is
# printed only if the step fails (scripts/steps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
mkdir -p "$VENV"
SETUP_LOG_DIR="$(cd "$VENV" && pwd)/setup-logs"
# shellcheck source=scripts/steps.sh
. scripts/steps.sh
export VENV
began=$SECONDS
echo "Setting up $VENV (each step's output: $SETUP_LOG_DIR)"

make_venv() {
  # A venv whose ensurepip failed has a python but no pip: make it again.
  [ -x "$VENV/bin/python" ] && [ -e "$VENV/bin/pip" ] || "$PY" -m venv "$VENV"
  venv_pip install --upgrade pip
}
step "Python venv $VENV with the latest pip" make_venv
# torch first and pinned: SGLang 0.5.23 pins torch 2.14.1 and its torchvision
# must match it (PyPI's CPU torchvision fails to load beside another torch).
step "torch 2.14.1, torchvision 0.29.1" venv_pip install torch==2.14.1 torchvision==0.29.1
# SGLang itself without its dependency list, which pulls GBs of CUDA-only
# wheels; then the small dependencies its import chain and launch_server need.
# --no-warn-conflicts: pip would list every dependency left out on purpose.
step "SGLang 0.5.23 without its CUDA-only dependencies" \
  venv_pip install --no-deps --no-warn-conflicts sglang==0.5.23
step "SGLang's CPU dependencies (scripts/requirements-sglang-cpu.txt)" \
  venv_pip install --no-warn-conflicts -c scripts/constraints-cpu.txt -r scripts/requirements-sglang-cpu.txt
step "sglang-fp32gemm (editable) with its test extras" \
  venv_pip install -c scripts/constraints-cpu.txt -e ".[test]"
# One older SGLang release for the default test run (tests/test_releases.py):
# 0.5.20, the release of the AMD measurements, into .sglang-releases/0.5.20
# (its own --no-deps folder; about 400 MB). The other releases:
# scripts/setup_releases.sh.
step "SGLang 0.5.20 into .sglang-releases/0.5.20 (release tests)" bash scripts/setup_releases.sh 0.5.20
# FlyDSL and Debian's lld: compiling our gfx950 kernel on this CPU machine.
step "FlyDSL 0.4.2 and lld-19 (gfx950 compile checks)" bash scripts/setup_flydsl_compile.sh
versions_log="$SETUP_LOG_DIR/versions.txt"
step "check: import torch, sglang, flydsl, sglang_fp32gemm" \
  "$VENV/bin/python" -c "
import importlib.metadata as md
import flydsl, sglang, sglang_fp32gemm, torch
with open('$versions_log', 'w') as f:
    f.write(f'torch {torch.__version__}, SGLang {sglang.__version__}, FlyDSL {flydsl.__version__}, '
            f'sglang-fp32gemm {md.version(\"sglang-fp32gemm\")}')
"
took=$((SECONDS - began))
echo "Done in $((took / 60))m$((took % 60))s: $VENV has $(cat "$versions_log"); SGLang 0.5.20 is in .sglang-releases/0.5.20."
echo "Next: $VENV/bin/python -m sglang_fp32gemm demo    (then the tests: $VENV/bin/python -m pytest -q)"
