#!/usr/bin/env bash
# tests/device_suite.sh: the whole GPU suite in one short device call, from a build made elsewhere: the
# correctness tests side by side (their NVRTC compiles overlap on the machine's cores; none of them times
# anything), then the timing test alone, the Python GPU tests, and two tuner shards on one GPU merged
# (issue 22's one-GPU check); each stage under a deadline. Logs under $OUT; a summary last.
# usage: KF_BUILD=.devbuild BUDGET_S=360 bash tests/device_suite.sh
KF_LOGS=suite; KF_BUDGET_DEFAULT=360; . "$(dirname "$0")/device_lib.sh"
export KFORGE_LIB=$B/libkforge.so PYTHONUNBUFFERED=1
result() {  # result NAME: the test's closing lines
  grep -hE '[0-9]+ passed, [0-9]+ failed|PASSED|FAILED|killed|PASS:|FAIL' "$OUT/$1.log" | tail -n 3 | tr '\n' ' '
}
# 1. correctness, side by side
cd "$B/tests"
par="${TESTS:-test_attn_gpu test_api_gpu test_parts_gpu test_kda_gpu test_kda_api_gpu test_mutants test_kda_mutants}"
lim=${LIM:-$(left 150)}; [ "$lim" -gt 220 ] && lim=220
for t in $par; do ( timeout "$lim" ./$t > "$OUT/$t.log" 2>&1; echo $? > "$OUT/$t.rc" ) & done
# the Python GPU tests check results only: they run beside the C tests (the binding, and the engine path:
# torch ops, compat, MLA, graphs)
for m in test_gpu test_gpu_engine test_gpu_features; do
  [ -f "$ROOT/python/tests/$m.py" ] || continue
  ( cd "$ROOT/python/tests" && KFORGE_DB=/tmp/kf_py_$m.db PYTHONPATH=$ROOT/python:$ROOT/python/tests \
      timeout "$lim" python3 -m unittest -v $m > "$OUT/py_$m.log" 2>&1; echo $? > "$OUT/py_$m.rc" ) &
done
wait
for t in $par; do say "$t: exit $(cat "$OUT/$t.rc"); $(result $t)"; done
for m in test_gpu test_gpu_engine test_gpu_features; do
  [ -f "$OUT/py_$m.rc" ] && say "python $m: exit $(cat "$OUT/py_$m.rc"); $(grep -E '^(OK|FAILED|Ran )' "$OUT/py_$m.log" | tr '\n' ' ')"
done
# 2. the tuner's GPU test alone (it times)
timeout "$(left 70)" ./test_tune_gpu > "$OUT/test_tune_gpu.log" 2>&1
say "test_tune_gpu: exit $?; $(result test_tune_gpu)"
# 3a. the exhaustive default sweep, sustained and interleaved (issue 15: band, wall time), then once more (a resume)
if [ "$(left 90)" -gt 60 ]; then
  D=/tmp/kf_suite_tune.db; rm -f "$D"*
  timeout "$(left 90)" "$K" tune --sweep default --db "$D" > "$OUT/tune.out" 2> "$OUT/tune.err"
  say "tune --sweep default (exhaustive, sustained): exit $?"
  grep -E "^\[[0-9]+/[0-9]+\]" "$OUT/tune.err" | sed -E 's/attn_(decode|prefill) //; s/ (ETA|best) [^ ]+( ms [^ ]+)?//g' | cut -c1-400 | tee -a "$SUM"
  tail -n 3 "$OUT/tune.out" | tee -a "$SUM"
  timeout "$(left 80)" "$K" tune --sweep default --db "$D" > "$OUT/tune2.out" 2> "$OUT/tune2.err"
  say "tune again (resume): exit $?; $(tail -n 2 "$OUT/tune2.err" | tr '\n' ' ' | cut -c1-300)"
fi
# 3b. the prefill rows of the README, sustained, kforge's default against SDPA in the same process
if [ "$(left 60)" -gt 30 ]; then
  ( cd "$ROOT" && KFORGE_DB=/tmp/kf_bench.db PYTHONPATH=$ROOT/python timeout "$(left 60)" python3 -m bench run --set gqa-prefill \
      --shapes d128-q16K,d256-q4K,d64-q8K,d128-q4K --contenders kforge-default,sdpa-cudnn,sdpa-flash --rounds 3 \
      --samples 10 --timing sustained --out "$OUT/bench" --no-append --no-plots > "$OUT/bench.log" 2>&1 )
  say "harness (prefill, sustained): exit $?"
  grep -E "^\| prefill|^\|  \| " "$OUT/bench/results.md" 2>/dev/null | head -n 16 | tee -a "$SUM"
fi
# 4. two shards of a small tuning sweep on one GPU at once, merged, against one run of the whole
W=/tmp/kf_shards; rm -rf "$W"; mkdir -p "$W"
if [ "$(left 0)" -gt 40 ]; then
  A="--sweep default --budget 2 --seed 7 --samples 20 --quiet"
  lim=$(left 5)
  ( timeout "$lim" "$K" tune $A --shard 0/2 --db "$W/s1.db" > "$W/s1.log" 2>&1 ) &
  ( timeout "$lim" "$K" tune $A --shard 1/2 --db "$W/s2.db" > "$W/s2.log" 2>&1 ) &
  wait
  "$K" db merge "$W/s1.db" "$W/s2.db" -o "$W/m.db" > "$W/merge.log" 2>&1
  timeout "$(left 2)" "$K" tune $A --db "$W/one.db" > "$W/one.log" 2>&1
  python3 "$ROOT/tests/tune_dbcmp.py" "shards on one GPU" "$W/one.db" "$W/m.db" "$W/s1.db" "$W/s2.db" 2>&1 | tee -a "$SUM"
else
  say "shards: skipped (no time left)"
fi
say "done"
pack
