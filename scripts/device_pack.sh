#!/usr/bin/env bash
# Packs the folders under $OUT into $OUT/results.tar.gz: a device call brings back at most 8 files,
# 2 folders down (the device README's limits), and a tune or an A/B writes more than that.
# Files directly in $OUT (run.log, targets.txt) stay beside the archive.
set -uo pipefail
: "${OUT:?OUT must name the output folder (the device machine sets it)}"
# A second script in the same call packs into results_2.tar.gz, and so on: nothing is overwritten.
dirs=$(cd "$OUT" && ls -d */ 2>/dev/null)
if [ -n "$dirs" ]; then
  name=results.tar.gz i=1
  while [ -e "$OUT/$name" ]; do i=$((i + 1)); name=results_$i.tar.gz; done
  # shellcheck disable=SC2086
  tar czf "/tmp/$name" -C "$OUT" $dirs && (cd "$OUT" && rm -rf $dirs) && mv "/tmp/$name" "$OUT/"
fi
echo "packed: $(cd "$OUT" && ls | tr '\n' ' ')"
