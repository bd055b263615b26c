#!/usr/bin/env bash
# run.sh: the main job on the embedded default sweep: tune it on the GPU into kforge.db and print the
# report; on a machine without a GPU, compile every variant of the sweep and say that timing needs one
set -euo pipefail
cd "$(dirname "$0")"
./build.sh
DB=${KFORGE_DB:-kforge.db}
if ./build/kforge doctor --json --db "$DB" 2>/dev/null | grep -q '"gpu":{'; then
  ./build/kforge tune --db "$DB" "$@"
  ./build/kforge report --db "$DB"
else
  echo "no CUDA device here: compiling the default sweep into $DB (timing and tuning need a GPU)" >&2
  ./build/kforge compile --db "$DB" "$@"
  ./build/kforge db ls --db "$DB"
fi
