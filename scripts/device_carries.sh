#!/usr/bin/env bash
# Makes the three device carries on the CPU machine (from the repository root) that a fresh checkout lacks:
#
#   bash scripts/device_carries.sh [cutedsl] [vllm_ll] [devsite]    (none named: every one that is missing)
#
#   .cutedsl  the CuTe-DSL stack, ../shared/tools/cutedsl_carry.sh (~60 MB, several minutes of CPU)
#   .vllm_ll  vLLM 0.34.0's ll_bf16, the measurement peer: ../shared/tools/vllm_ll_carry.sh names 0.33.0,
#             so its copy here names 0.34.0 (docs/benchmarks/README.md, "The peer moved")
#   .devsite  SGLang 0.5.23's warp split-K kernel file alone in a bare `sglang` package (the `cutedsl` backend,
#             backends/cutedsl_warp.py, imports it; SGLang's other modules are not needed)
#
# Each is listed in .git/info/exclude, so that it never reaches a commit; a device call names them in its
# carry (with `bash scripts/device_room.sh out` first: the tree and the carries share 64 MiB).
# One place for the three recipes (until stop 54, .devsite's was written nowhere).
set -euo pipefail
VLLM=0.34.0 SGLANG=0.5.23
TOOLS=${SHARED_TOOLS:-$PWD/../shared/tools}  # where the guide keeps cutedsl_carry.sh and vllm_ll_carry.sh
[ -d .git ] || { echo "device_carries: run from the repository root" >&2; exit 2; }

exclude() { grep -qxF "/$1/" .git/info/exclude 2>/dev/null || echo "/$1/" >> .git/info/exclude; }

need_tool() { [ -f "$TOOLS/$1" ] || { echo "device_carries: $TOOLS/$1 not found (set SHARED_TOOLS)" >&2; exit 2; }; }

make_cutedsl() { need_tool cutedsl_carry.sh; bash "$TOOLS/cutedsl_carry.sh" pack .cutedsl; }

make_vllm_ll() {
  local t; need_tool vllm_ll_carry.sh; t=$(mktemp)
  sed "s/0\.33\.0/$VLLM/g" "$TOOLS/vllm_ll_carry.sh" > "$t"
  bash "$t" pack .vllm_ll; rm -f "$t"
}

make_devsite() {
  local w f=sglang/kernels/ops/gemm/dense_bf16_gemm_warp_splitk.py d
  w=$(mktemp -d)
  python3 -m pip download -q --no-deps "sglang==$SGLANG" -d "$w"
  (cd "$w" && unzip -q -o sglang-*.whl "$f")
  mkdir -p ".devsite/$(dirname "$f")"
  for d in sglang sglang/kernels sglang/kernels/ops sglang/kernels/ops/gemm; do : > ".devsite/$d/__init__.py"; done
  cp "$w/$f" ".devsite/$f"; rm -rf "$w"
}

want=("$@")
if [ ${#want[@]} -eq 0 ]; then
  for c in cutedsl vllm_ll devsite; do [ -e ".$c" ] || want+=("$c"); done
fi
for c in "${want[@]}"; do
  case $c in
    cutedsl|vllm_ll|devsite) echo "device_carries: making .$c"; "make_$c"; exclude ".$c"; du -sh ".$c" ;;
    *) echo "device_carries: unknown carry '$c' (cutedsl, vllm_ll or devsite)" >&2; exit 2 ;;
  esac
done
[ ${#want[@]} -gt 0 ] || echo "device_carries: .cutedsl, .vllm_ll and .devsite are all here; name one to make it again"
