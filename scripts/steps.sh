# Sourced by the set-up scripts: run each step quietly, one line per step.
#
#   step "what it does" command args...
#
# prints "  what it does ... 12s" and keeps the command's whole output in
# $SETUP_LOG_DIR/NN-<name>.log; if the command fails it prints that log whole
# and exits with the command's status. So expected noise (pip's warnings, apt's
# progress, build back-end banners) stays off the terminal, and a real error is
# shown whole. A second run of a step replaces its log.
# SETUP_LOG_DIR: where the logs go (setup_env.sh uses .venv/setup-logs); unset,
# a fresh temporary folder.

if [ -z "${SETUP_LOG_DIR:-}" ]; then
  SETUP_LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/sglang-fp32gemm-setup.XXXXXX")"
fi
mkdir -p "$SETUP_LOG_DIR"
export SETUP_LOG_DIR

step() {
  local what="$1"; shift
  local name log start rc
  name="$(printf '%s' "$what" | tr -cs 'A-Za-z0-9.' '-' | cut -c1-40)"
  log="$SETUP_LOG_DIR/${name%-}.log"
  printf '  %s ... ' "$what"
  start=$SECONDS
  # A subshell outside any `if`, so that `set -e` still holds inside it and a
  # failing command in a multi-command step stops that step.
  set +e
  ( set -e; "$@" ) >"$log" 2>&1 </dev/null
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    printf 'FAILED (exit %d after %ds)\n' "$rc" "$((SECONDS - start))"
    printf -- '----- output of "%s" (%s) -----\n' "$what" "$log"
    cat "$log"
    printf -- '----- end of output; set-up stopped -----\n'
    exit "$rc"
  fi
  printf '%ds\n' "$((SECONDS - start))"
}

# pip, quiet, without the version check; the caller sets $VENV.
venv_pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
