#!/usr/bin/env bash
# tests/device_pdl.sh: programmatic dependent launch under test in one device call, from a build made elsewhere:
# test_api_gpu and test_kda_api_gpu as they are (their chained and graphed calls read what the last call wrote), then
# both again over a copy of the tree's templates whose KF_PDL_ENTRY keeps launch_dependents but drops, and whose KF_PDL_WAIT drops,
# griddepcontrol.wait (KFORGE_TEMPLATE_DIR): the mutant, which the chained calls must kill. Logs under $OUT (packed),
# summary.txt beside them.
# usage: KF_BUILD=.devbuild [BUDGET_S=300] bash tests/device_pdl.sh
KF_LOGS=pdl; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
M=/tmp/kf_pdl_mutant; rm -rf "$M"; mkdir -p "$M"; cp -r "$ROOT/templates" "$M/"
sed -i -e 's/"griddepcontrol.wait;\\n\\tgriddepcontrol.launch_dependents;"/"griddepcontrol.launch_dependents;"/' \
  -e 's/KF_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")/KF_PDL_WAIT() ((void)0)/' \
  "$M/templates/common/types.cuh"
if grep -q 'griddepcontrol.wait;' "$M/templates/common/types.cuh"; then
  say "the mutant was not planted (KF_PDL_ENTRY's text in common/types.cuh changed?)"; pack; exit 1
fi
for t in test_api_gpu test_kda_api_gpu; do
  for mode in plain mutant; do
    [ "$(left 10)" -lt 30 ] && { say "$t $mode: skipped (budget)"; continue; }
    tdir=$( [ $mode = mutant ] && echo "$M/templates" )
    ( cd "$B/tests" && KFORGE_TEMPLATE_DIR=$tdir KFORGE_TEST_DB=/tmp/kf_pdl_$mode.db timeout "$(left 10)" ./$t \
        > "$OUT/${t}_$mode.log" 2>&1 )
    rc=$?
    case "$mode:$rc" in plain:0) v="passes" ;; plain:*) v="FAILS" ;; mutant:0) v="mutant SURVIVED" ;; mutant:124) v="timed out" ;;
                        mutant:*) v="mutant killed" ;; esac
    say "$t $mode: exit $rc, $v; $(grep -hE '^(chain|graph) of|FAILED' "$OUT/${t}_$mode.log" | cut -c1-160 | tr '\n' ' ')"
  done
done
say "done"
pack
