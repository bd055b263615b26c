#!/usr/bin/env bash
# bench/run.sh: the default benchmark (set "all": the design.md reference rows plus the plot
# series) on one GPU, within 10 minutes: kforge tuned / default / control against PyTorch SDPA
# (cuDNN, flash) and compiled flex_attention. Needs python3 with torch (CUDA), triton, matplotlib.
#   bench/run.sh                     # default set, table appended to bench/RESULTS.md
#   bench/run.sh --set gqa-decode --rounds 8 --out /tmp/x    (extra arguments go to `python -m bench run`)
# Environment: KFORGE_LIB (default build/libkforge.so), KFORGE_DB (default ./kforge.db, the
# database of tuned winners; the tuned contender is reported unsupported without it),
# BENCH_TIME_BUDGET (seconds after which no new shape starts; default 510), PYTHON (python3).
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
exec "$PY" -m bench run --set all --rounds 5 --samples 6 --time-budget "${BENCH_TIME_BUDGET:-510}" "$@"
