#!/usr/bin/env bash
# tests/device_tuned.sh: issue 15's harness row: the default and prefill sweeps tuned (exhaustive, sustained) into one
# database, then the harness's table rows with `kforge tuned` (that database), `kforge default` and its control in one
# run, sustained: tuned >= default beyond the band on every row, and the tuner's >= 3% winners confirmed there.
# usage: KF_BUILD=.devbuild BUDGET_S=480 [SWEEPS="default prefill"] [HARNESS_S=200] bash tests/device_tuned.sh
#   (logs under $OUT, packed; summary.txt last; HARNESS_S: the seconds kept for the harness after the sweeps)
KF_LOGS=tuned; KF_BUDGET_DEFAULT=480; . "$(dirname "$0")/device_lib.sh"
export KFORGE_LIB=$B/libkforge.so PYTHONUNBUFFERED=1
DB=/tmp/kf_tuned.db; rm -f "$DB"*
for s in ${SWEEPS:-default prefill}; do
  t=$(date +%s); l=$(left "${HARNESS_S:-200}"); [ "$l" -gt 150 ] && l=150
  timeout "$l" "$K" tune --sweep $s --db "$DB" --json > "$OUT/tune_$s.jsonl" 2> "$OUT/tune_$s.err"
  say "tune --sweep $s: exit $? after $(( $(date +%s) - t )) s"
  python3 "$ROOT/tests/tune_summary.py" "$OUT/tune_$s.jsonl" > "$OUT/summary_$s.txt" 2>&1
  cat "$OUT/summary_$s.txt" >> "$SUM"
done
"$K" report --db "$DB" --markdown > "$OUT/report.md" 2>&1
ids=$(cd "$ROOT" && python3 -m bench sets 2>/dev/null | awk '/^all:/{a=1;next} /^[a-z]/{a=0} a && $2=="table"{printf "%s%s", s, $1; s=","}')
ids="$ids,prefill-b1-h32x8-d128-q4K-kv4K-causal-bf16"     # the default sweep's other prefill shape
( cd "$ROOT" && KFORGE_DB=$DB PYTHONPATH=$ROOT/python timeout "$(left 5)" python3 -m bench run --set all --shapes "$ids" \
    --db "$DB" --contenders kforge-tuned,kforge-default,kforge-default#2 --rounds 3 --samples 10 --timing sustained \
    --out "$OUT/bench" --no-append --no-plots > "$OUT/bench.log" 2>&1 )
say "harness (tuned, default, control; sustained): exit $?"
grep -E "^\| (decode|prefill)|^\|  \| " "$OUT/bench/results.md" 2>/dev/null | head -n 40 | tee -a "$SUM"
say "done"
