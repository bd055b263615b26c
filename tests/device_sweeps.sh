#!/usr/bin/env bash
# tests/device_sweeps.sh: issue 15's wall-time and band figures: named sweeps tuned exhaustively (sustained, interleaved),
# each into a fresh database (every compile counted), with the phase split and the band of every shape
# usage: KF_BUILD=.devbuild SWEEPS="default:175 prefill:125" BUDGET_S=560 bash tests/device_sweeps.sh
#   each item NAME[:SECONDS[:EXTRA TUNE OPTIONS, commas for spaces]], e.g. models:280:--budget,4,--shard,1/2
# Logs under $OUT (packed): tune_NAME.jsonl/.err, summary_NAME.txt, meas_NAME.csv (every measurement); summary.txt
# holds every table.
KF_LOGS=sweeps; KF_BUDGET_DEFAULT=560; . "$(dirname "$0")/device_lib.sh"
for item in ${SWEEPS:-default:175 prefill:125 kda:100 mla_decode:130}; do
  IFS=: read -r name cap extra <<< "$item"; cap=${cap:-150}; tag=${name}${extra:+_x}
  [ "$(left 0)" -gt 20 ] || { say "$name: skipped (no time left)"; continue; }
  l=$(left 5); [ "$l" -gt "$cap" ] && l=$cap
  db=/tmp/kf_sweep_$tag.db; rm -f "$db"*
  t=$(date +%s)
  # shellcheck disable=SC2086
  timeout "$l" "$K" tune --sweep "$name" ${extra//,/ } --db "$db" --json > "$OUT/tune_$tag.jsonl" 2> "$OUT/tune_$tag.err"
  rc=$?
  say "tune --sweep $name ${extra//,/ } (exhaustive unless a budget is given, sustained): exit $rc after $(( $(date +%s) - t )) s (limit $l s)"
  python3 "$ROOT/tests/tune_summary.py" "$OUT/tune_$tag.jsonl" > "$OUT/summary_$tag.txt" 2>&1
  cat "$OUT/summary_$tag.txt" >> "$SUM"
  grep -E "\| [0-9.]+ s, " "$OUT/tune_$tag.err" | sed 's/.*\] //' | cut -c1-300 > "$OUT/lines_$tag.txt"
  # every measurement (where a shape's timing goes: which variants, how many samples, calls a sample)
  python3 - "$db" > "$OUT/meas_$tag.csv" 2>&1 <<'PY'
import csv, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
w = csv.writer(sys.stdout)
w.writerow(["shape", "variant", "control", "status", "samples", "median_ms", "launches", "sets", "ref_ms", "created"])
for r in con.execute("SELECT shape_key, variant_key, is_control, status, json_array_length(samples), median_ms,"
                     " launches, sets, ref_ms, created FROM measurements ORDER BY id"):
    w.writerow(r)
PY
  pack
done
say "done"
