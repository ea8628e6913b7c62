#!/usr/bin/env bash
# Install real SGLang release wheels for the release test matrix, each into its
# own folder .sglang-releases/<version> (pip --target, --no-deps), together with
# the few small packages that release's import chain needs on top of .venv
# (which holds SGLang 0.5.23 and its CPU dependencies; see setup_env.sh).
#
#   bash scripts/setup_releases.sh            # every release 0.5.12 .. 0.5.22
#   bash scripts/setup_releases.sh 0.5.20     # just these
#
# Idempotent: a folder whose stamp matches what would be installed is kept.
# 0.5.23 is the one in .venv and needs no folder. Tests find the folders under
# $SGLANG_RELEASES_DIR (default .sglang-releases); see tests/test_releases.py.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
DEST=${SGLANG_RELEASES_DIR:-.sglang-releases}
ALL="0.5.12 0.5.13 0.5.14 0.5.15 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22"

# What each release pins that differs from .venv's, found by importing each
# release on CPU: transformers 5.19 refuses the older releases' own config
# registrations ("'qwen3_asr' is already used"); their transformers wants an
# older tokenizers and huggingface-hub; their server_args imports xgrammar.
extras() {
  case "$1" in
    0.5.12) echo "transformers==5.6.0 tokenizers==0.22.2 huggingface-hub>=1.5,<2 xgrammar==0.2.0" ;;
    # 0.5.13's DeepSeek model imports its mhc module, which imports tilelang (the release pins 0.1.8) at once.
    0.5.13) echo "transformers==5.8.1 tokenizers==0.22.2 huggingface-hub>=1.5,<2 xgrammar==0.2.1 tilelang==0.1.8 z3-solver==4.15.4.0 cloudpickle ml-dtypes torch-c-dlpack-ext" ;;
    0.5.14) echo "transformers==5.8.1 tokenizers==0.22.2 huggingface-hub>=1.5,<2 xgrammar==0.2.1" ;;
    # 0.5.15's DeepSeek import chain imports cutlass (CuTe DSL; its .pth is read by tests/test_releases.py).
    0.5.15) echo "transformers==5.12.1 tokenizers==0.22.2 huggingface-hub>=1.5,<2 xgrammar==0.2.1 nvidia-cutlass-dsl==4.5.2 nvidia-cutlass-dsl-libs-base==4.5.2" ;;
    0.5.1[6-9]|0.5.20) echo "transformers==5.12.1 tokenizers==0.22.2 huggingface-hub>=1.5,<2 xgrammar==0.2.1" ;;
    0.5.21) echo "transformers==5.12.1 tokenizers==0.22.2 huggingface-hub>=1.5,<2 xgrammar==0.2.7" ;;
    0.5.22) echo "xgrammar==0.2.7" ;;
    *) echo "setup_releases: no recipe for SGLang $1" >&2; return 1 ;;
  esac
}

# shellcheck source=scripts/steps.sh
. scripts/steps.sh
export VENV

install_release() {  # version, requirement list
  rm -rf "$DEST/$1"
  # shellcheck disable=SC2086  # the requirement list is meant to split
  venv_pip install --no-deps --no-warn-conflicts --target "$DEST/$1" $2
  echo "$2" > "$DEST/$1/.stamp"
}

mkdir -p "$DEST"
[ -f "$DEST/.gitignore" ] || printf '*\n' > "$DEST/.gitignore"
for v in ${@:-$ALL}; do
  want="sglang==$v $(extras "$v")"
  dir="$DEST/$v"
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ]; then
    echo "  sglang $v: already in $dir"
    continue
  fi
  step "sglang $v into $dir ($want)" install_release "$v" "$want"
done
