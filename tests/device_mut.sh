#!/usr/bin/env bash
# tests/device_mut.sh: chosen mutants of test_mutants in one device call, from a build made elsewhere: each index's
# child (-1: the unmutated baseline, which must pass) after all of them are compiled with the GPU hidden (16 cores);
# exit status and the failing rows of each under $OUT. The whole set (test_mutants) outlasts one device command.
# usage: KF_BUILD=.devbuild [BUDGET_S=300] bash tests/device_mut.sh -1 0 3 7   (indices: tests/gpu/gpu_suite.c
#        suite_mutants, from 0)
KF_LOGS=mut; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
export KFORGE_TEST_DB=/tmp/kf_mut_test.db
for m in "$@"; do
  ( cd "$B/tests" && CUDA_VISIBLE_DEVICES= KF_MUTANT_BUILD_ONLY=1 timeout "$(left 30)" ./test_mutants --child "$m" \
      > "$OUT/build_$m.log" 2>&1 )
done
say "built: $(grep -l 'planted in 0 ' "$OUT"/build_*.log 2>/dev/null | wc -l) not planted"
for m in "$@"; do
  [ "$(left 10)" -lt 20 ] && { say "mutant $m: skipped (budget)"; continue; }
  ( cd "$B/tests" && timeout "$(left 10)" ./test_mutants --child "$m" > "$OUT/mutant_$m.log" 2>&1 )
  rc=$?
  case "$m:$rc" in -1:0) v="baseline passes" ;; -1:*) v="BASELINE FAILS" ;; *:1) v=killed ;; *:0) v="SURVIVED" ;; *) v="error" ;; esac
  say "mutant $m: exit $rc, $v; $(grep -E 'cases failed|planted in' "$OUT/mutant_$m.log" | tr '\n' ' ')"
done
say "done"
pack
