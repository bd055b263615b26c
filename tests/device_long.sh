#!/usr/bin/env bash
# tests/device_long.sh: the two longest GPU tests (test_parts_gpu, test_kda_gpu) side by side and alone, from a build made elsewhere:
# in device_suite.sh they share the machine with eight others and can pass its stage deadline. Logs under $OUT.
# usage: KF_BUILD=.devbuild BUDGET_S=400 bash tests/device_long.sh
KF_LOGS=long; KF_BUDGET_DEFAULT=400; . "$(dirname "$0")/device_lib.sh"
cd "$B/tests"
for t in test_parts_gpu test_kda_gpu; do ( timeout "$(left 20)" ./$t > "$OUT/$t.log" 2>&1; echo $? > "$OUT/$t.rc" ) & done
wait
for t in test_parts_gpu test_kda_gpu; do say "$t: exit $(cat $OUT/$t.rc); $(grep -hE '[0-9]+ passed, [0-9]+ failed|PASSED|FAILED|killed' $OUT/$t.log | tail -n 4 | tr '\n' ' ')"; done
pack
