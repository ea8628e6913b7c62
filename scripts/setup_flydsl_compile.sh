#!/usr/bin/env bash
# Set up what compiling our FlyDSL kernel for gfx950 on a CPU machine needs.
# Idempotent; meant for a fresh Debian machine as root (CI's setup calls it).
#   - lld-19 from Debian (FlyDSL links the gfx950 code object with ld.lld)
#   - .flydsl-rocm/llvm/bin/ld.lld -> /usr/lib/llvm-19/bin/ld.lld: FlyDSL looks
#     for ld.lld under $ROCM_PATH/llvm/bin; this folder stands in for ROCm
#     (it ignores itself in git through its own .gitignore)
#   - flydsl==0.4.2 into the venv $VENV (default .venv)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$REPO/$VENV" ;; esac
# shellcheck source=scripts/steps.sh
. "$REPO/scripts/steps.sh"
FLYDSL_VERSION="0.4.2"
LLD=/usr/lib/llvm-19/bin/ld.lld

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_flydsl_compile: no venv at $VENV (set VENV)" >&2
  exit 1
fi

install_lld() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends lld-19
}
if [ ! -x "$LLD" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup_flydsl_compile: $LLD missing and not root; install lld-19" >&2
    exit 1
  fi
  step "lld-19 from Debian (apt-get)" install_lld
fi

LINK_DIR="$REPO/.flydsl-rocm"
mkdir -p "$LINK_DIR/llvm/bin"
ln -sfn "$LLD" "$LINK_DIR/llvm/bin/ld.lld"
[ -f "$LINK_DIR/.gitignore" ] || printf '*\n' > "$LINK_DIR/.gitignore"

if ! "$VENV/bin/python" -c "import flydsl, sys; sys.exit(flydsl.__version__ != '$FLYDSL_VERSION')" 2>/dev/null; then
  step "flydsl $FLYDSL_VERSION" venv_pip install "flydsl==$FLYDSL_VERSION"
fi

lld_version="$("$LINK_DIR/llvm/bin/ld.lld" --version | head -1)"
echo "  flydsl $FLYDSL_VERSION and $lld_version; ROCM_PATH for compile-only: $LINK_DIR"
