#!/usr/bin/env bash
# Check the plugin against kernel toolchains newer than those in .venv (SGLang 0.5.23's pins), on this
# CPU machine, without changing .venv: each version is installed with --no-deps into its own folder
# under $TOOLCHAIN_DIR (default /tmp/toolchain-check) and put first on PYTHONPATH.
#   Triton       the whole CPU test suite with it, and every Triton row of configs/sm90*.csv compiled for
#                sm_90 (toolchain_dump.py triton: which rows compile, and PDL rows keep griddepcontrol)
#   CUTLASS DSL  sm_90a PTX of our CuTe-DSL forms, diffed against .venv's (scripts/toolchain_dump.py)
#   FlyDSL       gfx950 ISA of the shipped configs, diffed against .venv's
#   torch        only when torch=V is given (downloads about 3 GB): the whole CPU test suite in a venv of
#                torch V (with the Triton it requires), SGLang 0.5.23 --no-deps and the CPU dependencies
#                setup_env.sh installs; torchvision's newest release --no-deps (SGLang imports
#                torchvision.transforms; a torchvision built for torch V may not exist yet)
# Nothing here runs a kernel: a GPU run is still needed before a new version is called supported.
#
#   bash scripts/toolchain_check.sh                      # the newest release of each
#   bash scripts/toolchain_check.sh triton=3.9.0 cutlass=4.8.1 flydsl=0.5.0 torch=2.15.0
# Exit 0 when the suite passes and the code is identical; 1 otherwise (the diffs are kept under $W).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$PWD/.venv/bin/python
W=${TOOLCHAIN_DIR:-/tmp/toolchain-check}
mkdir -p "$W"
newest() { "$PY" -m pip index versions "$1" 2>/dev/null | sed -n 's/^[^(]*(\([^)]*\)).*/\1/p' | head -n 1; }
triton=$(newest triton); cutlass=$(newest nvidia-cutlass-dsl); flydsl=$(newest flydsl); torch=""
for a in "$@"; do
  case "$a" in
    triton=*) triton=${a#*=} ;; cutlass=*) cutlass=${a#*=} ;; flydsl=*) flydsl=${a#*=} ;;
    torch=*) torch=${a#*=} ;;
    *) echo "unknown argument $a (triton=V cutlass=V flydsl=V torch=V)" >&2; exit 2 ;;
  esac
done
have() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
put() {  # put FOLDER PACKAGE==V...: install once into FOLDER
  local d=$1; shift
  [ -f "$d/.done" ] || { "$PY" -m pip install -q --no-deps --target "$d" "$@" > "$d.log" 2>&1 && touch "$d/.done"; } ||
    { echo "  could not install $* ($d.log)" >&2; exit 1; }
}
status=0

echo "Triton $triton (.venv: $(have triton)): the CPU test suite"
put "$W/triton-$triton" "triton==$triton"
if PYTHONPATH="$W/triton-$triton" "$PY" -m pytest -q > "$W/triton-$triton.pytest.txt" 2>&1; then
  echo "  $(tail -n 1 "$W/triton-$triton.pytest.txt")"
else
  echo "  FAILED: $(tail -n 1 "$W/triton-$triton.pytest.txt") ($W/triton-$triton.pytest.txt)"; status=1
fi
if PYTHONPATH="$W/triton-$triton" "$PY" scripts/toolchain_dump.py triton "$W/triton-$triton.ptx" \
     > "$W/triton-$triton.compile.txt" 2>&1; then
  echo "  $(tail -n 1 "$W/triton-$triton.compile.txt")"
else
  echo "  compiling the rows FAILED: $(tail -n 1 "$W/triton-$triton.compile.txt")"; status=1
fi

compare() {  # compare KIND LABEL FOLDER: dump with .venv's and with FOLDER first on the path, then diff
  local kind=$1 label=$2 folder=$3 base="$W/$1-venv" new="$W/$1-$2"
  rm -rf "$base" "$new"
  "$PY" scripts/toolchain_dump.py "$kind" "$base" > "$base.log" 2>&1 || { echo "  .venv's dump FAILED ($base.log)"; status=1; return; }
  PYTHONPATH="$folder" "$PY" scripts/toolchain_dump.py "$kind" "$new" > "$new.log" 2>&1 || { echo "  FAILED to compile ($new.log)"; status=1; return; }
  if [ "$(cat "$base/VERSION")" = "$(cat "$new/VERSION")" ]; then
    echo "  both dumps compiled with $(cat "$base/VERSION"): $folder was not used"; status=1; return
  fi
  local ext; [ "$kind" = ptx ] && ext=ptx || ext=s
  local same=0 differ=0
  for f in "$base"/*."$ext"; do
    if cmp -s "$f" "$new/$(basename "$f")"; then same=$((same + 1)); else differ=$((differ + 1)); echo "  differs: $(basename "$f")"; fi
  done
  echo "  $same identical, $differ different: $(cat "$base/VERSION") vs $(cat "$new/VERSION") (code without comment lines; $base, $new)"
  [ "$differ" -eq 0 ] || status=1
}

echo "CUTLASS DSL $cutlass (.venv: $(have nvidia-cutlass-dsl)): PTX of our CuTe-DSL forms"
put "$W/cutlass-$cutlass" "nvidia-cutlass-dsl==$cutlass" "nvidia-cutlass-dsl-libs-base==$cutlass" \
  "nvidia-cutlass-dsl-libs-core==$cutlass" "nvidia-cutlass-dsl-libs-cu12==$cutlass"
compare ptx "$cutlass" "$W/cutlass-$cutlass"

echo "FlyDSL $flydsl (.venv: $(have flydsl)): gfx950 ISA of the shipped configs"
put "$W/flydsl-$flydsl" "flydsl==$flydsl"
compare isa "$flydsl" "$W/flydsl-$flydsl"

if [ -n "$torch" ]; then
  V="$W/venv-torch-$torch"
  echo "torch $torch (.venv: $(have torch)): the CPU test suite in $V"
  make_torch_venv() {
    [ -x "$V/bin/python" ] || python3 -m venv "$V"
    "$V/bin/pip" install -q --upgrade pip
    "$V/bin/pip" install -q "torch==$torch"
    "$V/bin/pip" install -q --no-deps sglang==0.5.23 "torchvision==$(newest torchvision)" \
      "flydsl==$(have flydsl)"
    "$V/bin/pip" install -q --no-warn-conflicts -r scripts/requirements-sglang-cpu.txt
    "$V/bin/pip" install -q -e ".[test]"
  }
  if [ -f "$V/.done" ] || { make_torch_venv > "$V.log" 2>&1 && touch "$V/.done"; }; then
    echo "  venv: $("$V/bin/python" -c 'import torch, triton, sglang; print(f"torch {torch.__version__}, Triton {triton.__version__}, SGLang {sglang.__version__}")')"
    if "$V/bin/python" -m pytest -q > "$V.pytest.txt" 2>&1; then
      echo "  $(tail -n 1 "$V.pytest.txt")"
    else
      echo "  FAILED: $(tail -n 1 "$V.pytest.txt") ($V.pytest.txt)"; status=1
    fi
  else
    echo "  could not build the venv ($V.log)"; status=1
  fi
fi
exit $status
