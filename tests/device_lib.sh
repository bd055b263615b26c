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
