#!/usr/bin/env bash
# tests/device_kda_ab.sh: kda_prefill A/B on the GPU from a build made elsewhere: each shape's default (or PARAMS) under
# the build's embedded templates (A) and under the template folder B_TEMPLATES (B), alternated A B A B, sustained
# (`kforge run --json`, fp64-checked first), then each kernel's time alone for A and B (ncu, first call: the fp64
# check's shape). Logs under $OUT (summary.txt, run_ROUND_SIDE_SHAPE.json, ncu_*.csv), as device_lib.sh packs them.
# usage: KF_BUILD=.devbuild B_TEMPLATES=tests/.tb [SHAPES="n=1,t=1024,h=2,hv=2 ..."] [PARAMS=k=v,...] [ROUNDS=2]
#        [KF_DB=.devbuild/ab.db: binaries compiled here beforehand] BUDGET_S=300 bash tests/device_kda_ab.sh
KF_LOGS=kda_ab; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
DB=/tmp/kf_ab.db; [ -n "${KF_DB:-}" ] && [ -f "$ROOT/$KF_DB" ] && cp "$ROOT/$KF_DB" $DB
TB=$(cd "$ROOT/${B_TEMPLATES:?B_TEMPLATES: the B template folder}" && pwd)
SHAPES=${SHAPES:-"n=1,t=1024,h=2,hv=2 n=1,t=32768,h=8,hv=8 n=1,t=8192,h=16,hv=16 n=1,t=8192,h=64,hv=64 n=8,t=2048,h=16,hv=16"}
one() { # round side shape -> one summary line (tests/device_lib.sh's run_row)
  local tp=(); [ "$2" = B ] && tp=(--templates "$TB")
  say "$2 $3: $(RUN_S=90 run_row "$OUT/run_r$1_$2_$(echo "$3" | tr ',=' '_-').json" kda_prefill "$3,dk=128,dv=128" \
                  ${PARAMS:+--params "$PARAMS"} "${tp[@]}" --db $DB)"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for s in $SHAPES; do
    [ "$(left 60)" -gt 5 ] || { say "out of time at round $r"; break 2; }
    one "$r" A "$s"; one "$r" B "$s"
  done
done
for s in $SHAPES; do
  for side in A B; do
    [ "$(left 10)" -gt 15 ] || break 2
    tp=(); [ $side = B ] && tp=(--templates "$TB")
    f="$OUT/ncu_${side}_$(echo "$s" | tr ',=' '_-').csv"
    timeout 60 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none -c 4 --csv \
      "$K" run kda_prefill --shape "$s,dk=128,dv=128" ${PARAMS:+--params "$PARAMS"} "${tp[@]}" --db $DB --timing burst \
      --quiet > "$f" 2>&1
    say "ncu $side $s: $(grep -E 'kf_kda' "$f" | awk -F'","' '{print $5, $NF}' | tr -d '"' | tr '\n' ';')"
  done
done
say done
