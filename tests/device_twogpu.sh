#!/usr/bin/env bash
# tests/device_twogpu.sh: issue 22 on a two-GPU machine (kind nvidia-h200-x2), from a build made elsewhere: one sweep on
# one GPU, the same with --devices 0,1 (wall-time ratio, winners, rows), two --shard runs on the two GPUs at once merged
# by `kforge db merge`, and a worker killed (kill -9) mid-sweep, then resumed (nothing re-timed).
# usage: KF_BUILD=.devbuild [SWEEP=default] [TUNE="--samples 20"] BUDGET_S=560 bash tests/device_twogpu.sh
# Logs under $OUT (packed), summary.txt beside them. Each sweep goes into a fresh database (every compile counted).
KF_LOGS=twogpu; KF_BUDGET_DEFAULT=560; . "$(dirname "$0")/device_lib.sh"
SW=${SWEEP:-default}; X=${TUNE:-}
W=/tmp/kf_twogpu; rm -rf "$W"; mkdir -p "$W"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
say "GPUs: $ngpu ($(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr -s ' ' | tr '\n' ';'))"
[ "$ngpu" -ge 2 ] || { say "fewer than two GPUs: nothing to do"; exit 0; }
cmp() { python3 "$ROOT/tests/tune_dbcmp.py" "$@" 2>&1 | tee -a "$SUM"; pack; }
tune() {  # tune NAME SECONDS [kforge tune options]: wall time in $W/NAME.wall
  local n=$1 l=$2; shift 2
  local t=$(date +%s)
  # shellcheck disable=SC2086
  timeout "$l" "$K" tune --sweep "$SW" $X "$@" --json > "$W/$n.jsonl" 2> "$W/$n.err"
  local rc=$?
  echo $(( $(date +%s) - t )) > "$W/$n.wall"
  say "$n ($*): exit $rc after $(cat "$W/$n.wall") s"
  cp "$W/$n.jsonl" "$W/$n.err" "$OUT/" 2>/dev/null
}
# 1. one GPU, then the same sweep on both
tune one "$(left 330)" --devices 0 --db "$W/one.db"
tune two "$(left 230)" --devices 0,1 --db "$W/two.db"
say "wall time one GPU / two GPUs: $(python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{a:.0f} / {b:.0f} s = {a / max(b, 1):.2f}x')" "$(cat "$W/one.wall")" "$(cat "$W/two.wall")")"
cmp "--devices 0,1" "$W/one.db" "$W/two.db"
# 2. two shards, one a GPU, at once, merged
( CUDA_VISIBLE_DEVICES=0 timeout "$(left 130)" "$K" tune --sweep "$SW" $X --shard 0/2 --db "$W/s0.db" --quiet > "$W/s0.log" 2>&1 ) &
( CUDA_VISIBLE_DEVICES=1 timeout "$(left 130)" "$K" tune --sweep "$SW" $X --shard 1/2 --db "$W/s1.db" --quiet > "$W/s1.log" 2>&1 ) &
wait
"$K" db merge "$W/s0.db" "$W/s1.db" -o "$W/merged.db" > "$W/merge.log" 2>&1
say "shards 0/2 and 1/2 on GPUs 0 and 1, merged: exit $?"
cmp "shards merged" "$W/one.db" "$W/merged.db" "$W/s0.db" "$W/s1.db"
# 3. kill -9 of one worker mid-sweep, then the same command again: it resumes, re-timing at most the shape it was in
"$K" tune --sweep "$SW" $X --devices 0,1 --db "$W/kill.db" --json > "$W/kill1.jsonl" 2> "$W/kill1.err" &
parent=$!
sleep "${KILL_AFTER:-40}"
victim=$(pgrep -P "$parent" | head -n 1)
if [ -n "$victim" ]; then kill -9 "$victim"; say "killed worker $victim of $parent after ${KILL_AFTER:-40} s"; else say "no worker to kill"; fi
wait "$parent"; say "the killed run: exit $?"
snap() { python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('select coalesce(max(id),0) from measurements').fetchone()[0])" "$W/kill.db" 2>&1; }
last=$(snap); cp "$W/kill.db" "$W/kill_before.db" 2>/dev/null
tune resume "$(left 5)" --devices 0,1 --db "$W/kill.db"
# nothing re-timed: no measurement after the resume's start of a shape that had its winner before it
python3 - "$W/kill_before.db" "$W/kill.db" "$last" <<'PY' 2>&1 | tee -a "$SUM"
import sqlite3, sys
before, after, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
done = {r for r in sqlite3.connect(before).execute("SELECT family, shape_key FROM winners")}
rows = sqlite3.connect(after).execute("SELECT family, shape_key FROM measurements WHERE id > ?", (last,)).fetchall()
again = sum(1 for r in rows if tuple(r) in done)
print(f"resume: {len(done)} shapes had winners before it; it took {len(rows)} measurements, {again} of them of those shapes "
      + ("(nothing re-timed)" if again == 0 else "(RE-TIMED)"))
PY
pack
cmp "killed and resumed" "$W/one.db" "$W/kill.db"
say "done"
