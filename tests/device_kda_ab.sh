#!/usr/bin/env bash
# tests/device_kda_ab.sh: kda_prefill sides against each other on the GPU from a build made elsewhere: each shape under
# each side (a template folder and params), the sides alternated within a round, sustained (`kforge run --json`,
# fp64-checked first), then each kernel's time alone a side (ncu, first call: the fp64 check's shape). Logs under $OUT
# (summary.txt, run_ROUND_SIDE_SHAPE.json, ncu_*.csv), as device_lib.sh packs them.
# usage: KF_BUILD=.devbuild B_TEMPLATES=tests/.tb [SHAPES="n=1,t=1024,h=2,hv=2 ..."] [PARAMS=k=v,...] [ROUNDS=2]
#        [KF_DB=.devbuild/ab.db: binaries compiled here beforehand] [NCU=0] BUDGET_S=300 bash tests/device_kda_ab.sh
#   The sides: A, the build's embedded templates, and B, the folder B_TEMPLATES, both with PARAMS (none: each shape's
#   default); or SIDES="name:folder:params ...", a side a word, folder relative to the tree (empty: the embedded
#   templates), params as --params takes them, commas inside (empty: the default), e.g.
#   SIDES="old:.tvk2: new:: w8::chunk=16,tr=1,fused=1,mma=1,seg=1,prep=0,impl=recurrent,vs=16,w=8"
KF_LOGS=kda_ab; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
DB=/tmp/kf_ab.db; [ -n "${KF_DB:-}" ] && [ -f "$ROOT/$KF_DB" ] && cp "$ROOT/$KF_DB" $DB
SIDES=${SIDES:-"A::${PARAMS:-} B:${B_TEMPLATES:?B_TEMPLATES: the B template folder, or SIDES}:${PARAMS:-}"}
SHAPES=${SHAPES:-"n=1,t=1024,h=2,hv=2 n=1,t=32768,h=8,hv=8 n=1,t=8192,h=16,hv=16 n=1,t=8192,h=64,hv=64 n=8,t=2048,h=16,hv=16"}
side_args() { # side word -> $name and the kforge run options in $opt
  local rest=${1#*:} dir pr
  name=${1%%:*}; dir=${rest%%:*}; pr=${rest#*:}; [ "$pr" = "$rest" ] && pr=
  opt=(); [ -n "$pr" ] && opt+=(--params "$pr")
  if [ -n "$dir" ]; then
    [ -d "$ROOT/$dir" ] || { say "side $name: no template folder $dir"; return 1; }
    opt+=(--templates "$(cd "$ROOT/$dir" && pwd)")
  fi
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for s in $SHAPES; do
    [ "$(left 60)" -gt 5 ] || { say "out of time at round $r"; break 2; }
    for sd in $SIDES; do
      side_args "$sd" || continue
      say "$name $s: $(RUN_S=90 run_row "$OUT/run_r${r}_${name}_$(echo "$s" | tr ',=' '_-').json" kda_prefill \
                         "$s,dk=128,dv=128" "${opt[@]}" --db $DB)"
    done
  done
done
[ "${NCU:-1}" = 0 ] && { say done; exit 0; }
for s in $SHAPES; do
  for sd in $SIDES; do
    [ "$(left 10)" -gt 15 ] || break 2
    side_args "$sd" || continue
    f="$OUT/ncu_${name}_$(echo "$s" | tr ',=' '_-').csv"
    timeout 60 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none -c 4 --csv \
      "$K" run kda_prefill --shape "$s,dk=128,dv=128" "${opt[@]}" --db $DB --timing burst --quiet > "$f" 2>&1
    say "ncu $name $s: $(grep -E 'kf_kda' "$f" | awk -F'","' '{print $5, $NF}' | tr -d '"' | tr '\n' ';')"
  done
done
say done
