#!/usr/bin/env bash
# Room for a device call: the work tree and the carries travel together, 64 MiB at most, and the
# CuTe-DSL carry alone is ~60 MB. This moves the recorded H200 results a device call does not read
# (reports, logs, JSON, Markdown, plots under docs/benchmarks/h200/), and the Markdown under docs/, out of
# the work tree, and back. Kept: tables, scripts, and the tune logs a tracked script names (what device
# scripts and --tune-log read).
# (Until run 19 the newest two runs stayed whole; no device step reads their reports, and run 19's
# left too little room.)
#
#   bash scripts/device_room.sh out    # before the device call
#   bash scripts/device_room.sh back   # after it, before any git add
#
# The files wait in $DEVICE_ROOM (default /tmp/sglang_fp32gemm_room), with the list of what moved.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
ROOM=${DEVICE_ROOM:-/tmp/sglang_fp32gemm_room}
LIST=$ROOM/moved.txt
H=docs/benchmarks/h200
case "${1:-}" in
  out)
    [ ! -e "$LIST" ] || { echo "device_room: already out ($LIST); run 'back' first" >&2; exit 1; }
    mkdir -p "$ROOM"
    # Also the project's prose outside $H (docs/**/*.md, about 190 KB): no device step reads it. And the tune logs
    # that no tracked script names by their path under $H (about 1 MB; stop 39: the carries left ~0.2 MB).
    unnamed_logs() {
      git ls-files "$H" | grep '\.jsonl\.gz$' | while read -r f; do
        git grep -qF -e "${f#"$H"/}" -- '*.sh' '*.py' || echo "$f"
      done
    }
    # Records the tests read stay (tests/test_ab_tools.py reads run 35's tune summaries): the run folders
    # tests/*.py name under $H.
    read_by_tests=$(git grep -ohE 'run[0-9]+/[A-Za-z0-9_./-]+' -- 'tests/*.py' | sort -u)
    { git ls-files $H | grep -vE '\.(jsonl\.gz|csv|sh|py)$'; unnamed_logs; git ls-files docs | grep -v "^$H/" | grep '\.md$'; } |
    while read -r f; do
      [ -e "$f" ] || continue
      grep -qxF -e "$(dirname "${f#"$H"/}")" <<< "$read_by_tests" && continue
      mkdir -p "$ROOM/$(dirname "$f")" && mv "$f" "$ROOM/$f" && echo "$f"
    done > "$LIST"
    echo "device_room: moved $(wc -l < "$LIST") files ($(cd "$ROOM" && du -sh docs 2>/dev/null | cut -f1)) to $ROOM"
    ;;
  back)
    [ -e "$LIST" ] || { echo "device_room: nothing is out ($LIST missing)" >&2; exit 1; }
    while read -r f; do mkdir -p "$(dirname "$f")" && mv "$ROOM/$f" "$f"; done < "$LIST"
    echo "device_room: put back $(wc -l < "$LIST") files"
    rm -f "$LIST"
    git status --short docs | head -5
    ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
