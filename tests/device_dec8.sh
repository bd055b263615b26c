#!/usr/bin/env bash
# tests/device_dec8.sh: issue 21's FP8 decode checks in one device call, from a build made elsewhere: the GPU suite's
# filters (test_attn_gpu, its binaries first compiled on the GPU machine's cores with the GPU hidden), chosen mutants on
# attn_decode impl=wg8's cases alone, then sustained kforge run figures of parameter sets against each other on
# decode rows, interleaved by round. Logs tarred under $OUT, summary.txt beside them.
# usage: KF_BUILD=.devbuild [TESTS='*wg8*'] [MUT='-1 0 4'] [ROWS='b=32,hq=32,hkv=8,skv=32k,kv_dtype=e4m3'] \
#        [PARAMS='default impl=wg8,tm=4,w=4,bn=64,stages=4'] [ROUNDS=2] [BUDGET_S=500] bash tests/device_dec8.sh
#   ROWS: shape fields after dtype=bf16,sq=1,d=128,causal=0 (space-separated; a row ending in @N runs K/V in pages of N
#   rows; "kv_dtype=e4m3" makes it FP8); PARAMS: --params sets for every row ("default" for none; a set naming sp
#   keeps it, else the template's default sp for the row is added by kforge run); MUT: suite_mutants indices (-1: the
#   unmutated baseline) run with `test_mutants --child m:wg8`; TESTS=" ": no suite.
KF_LOGS=dec8; KF_BUDGET_DEFAULT=500; . "$(dirname "$0")/device_lib.sh"
export KFORGE_TEST_DB=/tmp/kf_dec8_test.db
# 1. correctness: the suite's filters; 2. mutants on impl=wg8's cases alone (tests/device_lib.sh)
attn_suite ${TESTS-'*wg8*'}
mutants ":wg8" ${MUT:-}
# 3. figures, sustained (kforge run: warm-up to steady state, back-to-back calls over rotating inputs; clock and power)
ROWS=${ROWS:-"b=32,hq=32,hkv=8,skv=32k,kv_dtype=e4m3 b=32,hq=32,hkv=8,skv=32k"}
PARAMS=${PARAMS:-"default"}
for r in $(seq 1 "${ROUNDS:-1}"); do
  for row in $ROWS; do
    for pr in $PARAMS; do
      case "$row|$pr" in *e4m3*) ;; *impl=wg8*|*impl=direct*) continue ;; esac   # FP8-only impls on 16-bit rows
      [ "$(left 30)" -lt 25 ] && { say "run $row $pr: skipped (budget)"; continue; }
      split_row "$row"
      say "run r$r $row $pr: $(RUN_S=90 run_row "$OUT/run_r${r}_$(echo "$row $pr" | tr -c 'a-z0-9=\n' '_').json" \
        attn_decode "dtype=bf16,sq=1,d=128,causal=0,$shp" $pg $( [ "$pr" != default ] && echo --params "$pr" ) \
        --db /tmp/kf_dec8_run.db)"
    done
  done
done
say "done"
