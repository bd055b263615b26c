# tests/device_lib.sh: the shared start of the device scripts, sourced: logs in a folder of their own packed into $OUT after each step (the device tool brings back at most 8 files), the carried build's paths, a deadline, say / left / pack, the GPU's line
# usage, at the top of a script: KF_LOGS=name; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
#   then: say "text" (to summary.txt, with the seconds since the start), left N (seconds to the deadline minus N, at
#   least 5), pack; $ROOT the tree, $B the build (KF_BUILD, default .devbuild), $K its kforge, $OUT the logs' folder.
set -u
OUT=${OUT:-/tmp/kf_out}; mkdir -p "$OUT"
RET=$OUT; OUT=/tmp/kf_${KF_LOGS:-device}_logs; rm -rf "$OUT"; mkdir -p "$OUT"
pack() { tar czf "$RET/logs.tgz" -C "$OUT" . 2>/dev/null; cp "$OUT/summary.txt" "$RET/summary.txt" 2>/dev/null; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[1]:-$0}")/.." && pwd)
B=$(cd "$ROOT/${KF_BUILD:-.devbuild}" && pwd)
export LD_LIBRARY_PATH=$B/devlibs:$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
K=$B/kforge
# the tests' binary caches travel xz-compressed (tests/devbuild.sh): unpacked once, where the tests look for them
for z in "$B"/tests/*.db.xz; do
  [ -f "$z" ] && [ ! -f "${z%.xz}" ] && python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$z" "${z%.xz}"
done
T0=$(date +%s); END=$((T0 + ${BUDGET_S:-${KF_BUDGET_DEFAULT:-300}}))
left() { local l=$((END - $(date +%s) - ${1:-0})); [ "$l" -lt 5 ] && l=5; echo "$l"; }
SUM=$OUT/summary.txt; : > "$SUM"
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$SUM"; pack; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader > "$OUT/env.txt" 2>&1
say "env: $(cat "$OUT/env.txt"); $("$K" --version 2>/dev/null || echo 'kforge ?')"
# a row's shape fields ($shp) and, for a row ending in @N, its --page-size N ($pg)
split_row() { shp=${1%@*}; pg=$( [ "$shp" != "$1" ] && echo "--page-size ${1##*@}" ); }
# attn_suite FILTER...: test_attn_gpu's binaries first (the machine's cores, GPU hidden), then each cmocka filter in a
# process of its own; the result lines and each filter's failing rows into the summary
attn_suite() {
  ( cd "$B/tests" && CUDA_VISIBLE_DEVICES= KFORGE_TEST_PRECOMPILE=1 timeout "$(left 60)" ./test_attn_gpu \
      > "$OUT/precompile.log" 2>&1 )
  say "precompile: $(grep -E 'variants ready' "$OUT/precompile.log" | tail -1)"
  local f n
  for f in "$@"; do
    n=$(echo "$f" | tr -d '*')
    ( cd "$B/tests" && KF_TEST_FILTER="$f" timeout "$(left 60)" ./test_attn_gpu > "$OUT/test_attn_gpu_$n.log" 2>&1 )
    say "test_attn_gpu $f: exit $? $(grep -E '[0-9]+ passed, [0-9]+ failed' "$OUT/test_attn_gpu_$n.log" | tail -1)"
    grep -E 'FAIL|->|not valid|not built' "$OUT/test_attn_gpu_$n.log" | head -10 >> "$SUM"
  done
}
# mutants MODE INDEX...: test_mutants' children (suite_mutants indices, -1 the unmutated baseline that must pass; MODE
# "" for every case, ":wg8" for impl wg8's alone), all built first with the GPU hidden, then each run
mutants() {
  local mode=$1 m rc v; shift
  for m in "$@"; do
    ( cd "$B/tests" && CUDA_VISIBLE_DEVICES= KF_MUTANT_BUILD_ONLY=1 timeout "$(left 30)" ./test_mutants --child "$m$mode" \
        > "$OUT/build_$m.log" 2>&1 )
  done
  say "built: $(grep -l 'planted in 0 ' "$OUT"/build_*.log 2>/dev/null | wc -l) not planted"
  for m in "$@"; do
    [ "$(left 10)" -lt 20 ] && { say "mutant $m$mode: skipped (budget)"; continue; }
    ( cd "$B/tests" && timeout "$(left 10)" ./test_mutants --child "$m$mode" > "$OUT/mutant_$m.log" 2>&1 )
    rc=$?
    case "$m:$rc" in -1:0) v="baseline passes" ;; -1:*) v="BASELINE FAILS" ;; *:1) v=killed ;; *:0) v="SURVIVED" ;; *) v="error" ;; esac
    say "mutant $m$mode: exit $rc, $v; $(grep -E 'cases failed|planted in' "$OUT/mutant_$m.log" | tr '\n' ' ')"
  done
}
# run_row FILE FAMILY SHAPE [kforge run options]: one `kforge run --json --quiet` (fp64-checked first; sustained unless
# the options say --timing burst; --db, --params, --templates, --page-size go in the options) into FILE, its stderr into
# FILE.err, within RUN_S seconds (default 60); prints the run's short line: median, throughput, pass, error, SM clock,
# power and variant, or the exit status and why there is no result
run_row() {
  local f=$1 fam=$2 shp=$3 rc; shift 3
  timeout "${RUN_S:-60}" "$K" run "$fam" --shape "$shp" "$@" --json --quiet > "$f" 2> "$f.err"; rc=$?
  python3 - "$f" "$rc" <<'PY'
import json, sys
f, rc = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(f))
    tp = "" if d.get("throughput") is None else " %.4g %s" % (d["throughput"], d.get("throughput_unit") or "")
    print("%.4f ms%s pass %s rel %s %s MHz %s W %s" % (d["median_ms"], tp, d.get("pass"), d.get("rel_err"),
          d.get("sm_clock_mean"), d.get("power_mean"), d.get("variant")))
except Exception as e:
    err = open(f + ".err", errors="replace").read().strip().replace("\n", " ")[-240:]
    print("exit %s, no result (%s) %s" % (rc, e, err))
PY
}
