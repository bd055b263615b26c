#!/usr/bin/env bash
# run.sh: the main job on the embedded default sweep: tune it on the GPU into kforge.db and print the
# report; on a machine without a GPU, compile every variant of the sweep and say that timing needs one
# (KFORGE_BIN: a kforge already built, used as it is, without building)
set -euo pipefail
KF=./build/kforge
[ -z "${KFORGE_BIN:-}" ] || KF=$(cd "$(dirname "$KFORGE_BIN")" && pwd)/$(basename "$KFORGE_BIN")
cd "$(dirname "$0")"
[ -n "${KFORGE_BIN:-}" ] || ./build.sh
DB=${KFORGE_DB:-kforge.db}
if "$KF" doctor --json --db "$DB" 2>/dev/null | grep -q '"gpu":{'; then
  "$KF" tune --db "$DB" "$@"
  "$KF" report --db "$DB"
else
  echo "no CUDA device here: compiling the default sweep into $DB (timing and tuning need a GPU)" >&2
  rc=0
  "$KF" compile --db "$DB" "$@" || rc=$?
  if [ "$rc" -eq 2 ]; then
    echo "error: without a GPU run.sh compiles (kforge compile) instead of tuning, and the options" \
         "given ($*) are not all compile's: tuning options such as --budget need a GPU" >&2
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
  "$KF" db ls --db "$DB"
fi
