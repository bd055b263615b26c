#!/usr/bin/env bash
# run.sh: the main job on the embedded default sweep: compile every variant into kforge.db and list them
set -euo pipefail
cd "$(dirname "$0")"
./build.sh
./build/kforge compile --db "${KFORGE_DB:-kforge.db}" "$@"
./build/kforge db ls --db "${KFORGE_DB:-kforge.db}"
