#!/usr/bin/env bash
# tests/device_band.sh: issue 15's control band on one GPU: prefill shapes tuned (band, drift, the default's slot
# medians), then the exhaustive default sweep (wall time, every shape's band) and its resume. CONFIGS=name:VAR=x+VAR=y
# runs the shapes once per environment (for experiments with knobs a build reads; the default: one plain run).
# usage: KF_BUILD=.devbuild BUDGET_S=300 bash tests/device_band.sh   (logs and summary.txt under $OUT)
set -u
OUT=${OUT:-/tmp/kf_out}; mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "$ROOT/${KF_BUILD:-.devbuild}" && pwd)
export LD_LIBRARY_PATH=$B/devlibs:$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
K=$B/kforge
T0=$(date +%s); END=$((T0 + ${BUDGET_S:-300}))
SUM=$OUT/summary.txt; : > "$SUM"
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$SUM"; }
say "env: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader)"
SHAPES=${SHAPES:-"dtype=bf16,causal=1,b=1,sq=16384,skv=16384,hq=32,hkv=8,d=128 dtype=bf16,causal=1,b=1,sq=4096,skv=4096,hq=32,hkv=8,d=128"}
# one compile of every variant of the shapes; each configuration tunes from a copy (binaries, no measurements)
BIN=/tmp/kf_band_bin.db; rm -f "$BIN"*
for s in $SHAPES; do "$K" compile attn_prefill --shape "$s" --all --db "$BIN" --quiet >> "$OUT/compile.log" 2>&1; done
say "compiled: exit $?"
# CONFIGS: name:env assignments separated by '+'
CONFIGS=${CONFIGS:-"now:"}
for c in $CONFIGS; do
  name=${c%%:*}; envs=${c#*:}
  for s in $SHAPES; do
    [ $(( END - $(date +%s) )) -gt 25 ] || { say "out of budget before $name"; break 2; }
    D=/tmp/kf_band_$name.db; cp "$BIN" "$D"
    ( for e in ${envs//+/ }; do [ -n "$e" ] && export "$e"; done
      timeout $(( END - $(date +%s) - 10 )) "$K" tune attn_prefill --shape "$s" --db "$D" > "$OUT/tune_$name.out" 2>> "$OUT/tune_$name.err" )
    line=$(grep -E "band" "$OUT/tune_$name.err" | tail -n 1 | grep -oE "(default kept|x[0-9.]+ over the default)[^|]*" | cut -c1-200)
    sk=$(echo "$s" | grep -oE "sq=[0-9]+")
    say "$name $sk: $line"
    python3 - "$D" >> "$SUM" <<'PY'
import json, sqlite3, statistics as st, sys
db = sqlite3.connect(sys.argv[1])
for key, msg, smp in db.execute("select variant_key, message, samples from measurements where message like 'interleaved default%' order by id desc limit 1"):
    v = json.loads(smp); slot = int(msg.split(" slots of ")[1].split()[0])
    meds = [st.median(v[i:i + slot]) for i in range(0, len(v), slot)]
    print("   default slot medians (ms):", " ".join(f"{m:.4f}" for m in meds))
    print("   ", msg[:160])
PY
  done
done
if [ $(( END - $(date +%s) )) -gt 150 ]; then
  D=/tmp/kf_band_sweep.db; rm -f "$D"*
  t=$(date +%s); timeout $(( END - $(date +%s) - 30 )) "$K" tune --sweep default --db "$D" > "$OUT/sweep.out" 2> "$OUT/sweep.err"
  say "tune --sweep default (exhaustive): exit $?, $(( $(date +%s) - t )) s"
  grep -E "^\[[0-9]+/[0-9]+\]" "$OUT/sweep.err" | sed -E 's/ (ETA|best) [^ ]+( ms [^ ]+)?//g' | cut -c1-330 | tee -a "$SUM"
  tail -n 2 "$OUT/sweep.out" | tee -a "$SUM"
  timeout $(( END - $(date +%s) - 5 )) "$K" tune --sweep default --db "$D" > "$OUT/sweep2.out" 2> "$OUT/sweep2.err"
  say "again (resume): exit $?; $(tail -n 1 "$OUT/sweep2.err" | cut -c1-300)"
fi
say "done"
mkdir -p /tmp/kf_band_logs; mv "$OUT"/*.log "$OUT"/*.err "$OUT"/*.out /tmp/kf_band_logs/ 2>/dev/null; tar czf "$OUT/logs.tgz" -C /tmp/kf_band_logs . 2>/dev/null
