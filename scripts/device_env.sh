# Sourced (`. scripts/device_env.sh`) from the repository root on the device machine, before any python3:
# puts the carried CuTe-DSL stack (.cutedsl, ../shared/tools/cutedsl_carry.sh), vLLM's ll_bf16 with
# apache-tvm-ffi, which our CuTe-DSL backends need too (.vllm_ll, ../shared/tools/vllm_ll_carry.sh),
# .devsite (SGLang's warp split-K kernel in a minimal package) and this checkout on PYTHONPATH, adding to
# it. A carry that did not travel is named, and its backends answer unavailable.
# One place for it: run 19 lost a call to a command that set PYTHONPATH itself and dropped the carries.
if [ -f .cutedsl/cutedsl_carry.sh ]; then
  eval "$(bash .cutedsl/cutedsl_carry.sh unpack .cutedsl /tmp/site)" || echo "cutedsl carry: unpack FAILED"
else
  echo "no .cutedsl carried: the CuTe-DSL backends will be unavailable"
fi
if [ -f .vllm_ll/vllm_ll_carry.sh ]; then
  eval "$(bash .vllm_ll/vllm_ll_carry.sh unpack .vllm_ll /tmp/llsite)" || echo "vllm_ll carry: unpack FAILED"
else
  echo "no .vllm_ll carried: no ll_bf16 column, and no apache-tvm-ffi unless installed"
fi
if [ -d .devsite ]; then PYTHONPATH=$PWD/.devsite${PYTHONPATH:+:$PYTHONPATH}; fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
