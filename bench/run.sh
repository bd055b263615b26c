#!/usr/bin/env bash
# bench/run.sh: the default benchmark on one GPU, in two steps, each its own `python -m bench run`
# with its own time budget and its own section in bench/RESULTS.md:
#   1. set "all" (GQA: the design.md reference rows plus the plot series), within 10 minutes:
#      kforge tuned / default / control against PyTorch SDPA (cuDNN, flash) and compiled
#      flex_attention; budget BENCH_TIME_BUDGET (default 510 s);
#   2. set "kda" (Kimi Delta Attention): kforge tuned / default / control against the chunked
#      PyTorch implementation (eager and CUDA-graph replay) and the token-by-token recurrence;
#      budget BENCH_KDA_TIME_BUDGET (default 240 s). A separate step so that KDA never eats
#      into the GQA table's budget (and is never cut by it).
# Needs python3 with torch (CUDA), triton, matplotlib.
#   bench/run.sh                     # both steps, tables appended to bench/RESULTS.md
#   BENCH_SETS=kda bench/run.sh      # only the KDA step (BENCH_SETS: the sets to run, in order)
#   bench/run.sh --set gqa-decode --rounds 8 --out /tmp/x    (with --set: that set only, as one step;
#                                     extra arguments go to `python -m bench run`)
#   bench/run.sh --set gqa-window    # the sliding-window rows (issue 21), not part of "all"
# Where one command may run at most 10 minutes, run the steps as two commands
# (BENCH_SETS=all, then BENCH_SETS=kda).
# Environment: KFORGE_LIB (default build/libkforge.so), KFORGE_DB (default ./kforge.db, the
# database of tuned winners; the tuned contender is reported unsupported without it),
# BENCH_TIME_BUDGET (seconds after which no new shape starts; default 510), BENCH_KDA_TIME_BUDGET
# (the same for the kda step; default 240), BENCH_SETS (default "all kda"), PYTHON (python3).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export KFORGE_LIB="${KFORGE_LIB:-$ROOT/build/libkforge.so}"
export KFORGE_DB="${KFORGE_DB:-$ROOT/kforge.db}"
PY="${PYTHON:-python3}"
if [ ! -e "$KFORGE_LIB" ]; then
  echo "warning: $KFORGE_LIB not found (build: cmake -S . -B build && cmake --build build -j);" \
       "the kforge contenders will be reported unsupported" >&2
fi
if [ ! -e "$KFORGE_DB" ]; then
  echo "warning: no tuning database at $KFORGE_DB: 'kforge tuned' will be reported unsupported" >&2
fi
"$PY" - <<'PYEOF' || { echo "error: python needs torch with CUDA for the benchmark" >&2; exit 1; }
import torch, sys
sys.exit(0 if torch.cuda.is_available() else 1)
PYEOF
# 5 rounds x 6 samples = 30 samples per contender and shape; flex compiles dominate the time.
for a in "$@"; do
  case "$a" in
    --set|--set=*)
      exec "$PY" -m bench run --set all --rounds 5 --samples 6 --time-budget "${BENCH_TIME_BUDGET:-510}" "$@" ;;
  esac
done
rc=0
for set in ${BENCH_SETS:-all kda}; do
  case "$set" in
    kda) budget="${BENCH_KDA_TIME_BUDGET:-240}" ;;
    *) budget="${BENCH_TIME_BUDGET:-510}" ;;
  esac
  echo "== bench/run.sh: set $set (time budget $budget s)" >&2
  "$PY" -m bench run --set "$set" --rounds 5 --samples 6 --time-budget "$budget" "$@" || {
    r=$?
    echo "error: set $set failed (exit $r); going on with the next set" >&2
    rc=$r
  }
done
exit "$rc"
