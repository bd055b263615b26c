#!/usr/bin/env bash
# tests/device_tune.sh: issue 15 on the H200 from a build made elsewhere: sustained timing, the interleaved band, clocks, the planted-default test, kforge run vs the harness; logs under $OUT
# usage (one command, under 9 minutes; builds nothing):
#   here:    ./build.sh && bash tests/devbuild.sh build .devbuild
#   device:  KF_BUILD=.devbuild bash tests/device_tune.sh          (carry .devbuild)
# Prints a short summary last; full logs in $OUT (env.txt, doctor.log, test_tune_gpu.log, run_*.json/.txt,
# tune_default.jsonl/.err, tune_summary.txt, bench/, compare.txt). BUDGET_S (default 525) bounds the whole.
set -u
OUT=${OUT:-/tmp/kf_out}; mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "$ROOT/${KF_BUILD:-.devbuild}" && pwd)
export LD_LIBRARY_PATH=$B/devlibs:$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KFORGE_LIB=$B/libkforge.so PYTHONUNBUFFERED=1
K=$B/kforge
T0=$(date +%s); END=$((T0 + ${BUDGET_S:-525}))
# a stage's timeout: at most $1 s, leaving $2 s for the stages after it (at least 5 s)
cap() { local l=$((END - $(date +%s) - $2)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
for z in "$B"/tests/*.db.xz; do       # test caches travel xz-compressed (tests/devbuild.sh)
  [ -f "$z" ] && python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$z" "${z%.xz}"
done
SUM=$OUT/summary.txt; : > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }

# 0. the card as found (never changed), and whether NVML is there
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$OUT/env.txt" 2>&1
say "env: $(tail -n 1 "$OUT/env.txt")"
say "NVML: $(ldconfig -p | grep -c 'libnvidia-ml.so.1') libnvidia-ml.so.1 in ldconfig"

# 1. ceilings
DB=/tmp/kf_tune_dev.db; rm -f "$DB"*
timeout "$(cap 60 440)" "$K" doctor --measure --db "$DB" > "$OUT/doctor.log" 2>&1
stamp "doctor --measure exit $?: $(grep -E 'copy|read|gemm' "$OUT/doctor.log" | tr '\n' ' ' | cut -c1-200)" | tee -a "$SUM"
DB2=/tmp/kf_tune_default.db; rm -f "$DB2"*
cp "$DB" "$DB2" 2>/dev/null || true   # the ceilings alone (no binaries): step 4's wall time includes every compile

# 2. the tuner's GPU test: small sweep + resume, planted wrong variant, planted 10%-slower default / identical twin
( cd "$B/tests" && timeout "$(cap 150 380)" ./test_tune_gpu > "$OUT/test_tune_gpu.log" 2>&1 ); rc=$?
stamp "test_tune_gpu exit $rc: $(grep -cE '^\[       OK \]' "$OUT/test_tune_gpu.log") OK, $(grep -cE '^\[  FAILED  \] test' "$OUT/test_tune_gpu.log") failed" | tee -a "$SUM"
grep -E "identical twin|slower default|no NVML|ERROR|LINE" "$OUT/test_tune_gpu.log" | head -8 | tee -a "$SUM"

# 3. kforge run on the issue's prefill shape (1.17 ms burst, 1.31 ms sustained from Python): sustained, then burst
S8="dtype=bf16,b=1,sq=8192,skv=8192,hq=40,hkv=8,d=128,causal=1"
for m in sustained burst; do
  timeout "$(cap 60 300)" "$K" run attn_prefill --shape "$S8" --timing $m --db "$DB" --quiet > "$OUT/run_8k_$m.txt" 2>&1
  stamp "run 8K 40/8 $m exit $?: $(grep -E '^time|^clocks' "$OUT/run_8k_$m.txt" | tr -s ' ' | tr '\n' ' ' | cut -c1-260)" | tee -a "$SUM"
done

# 4. the exhaustive default sweep, sustained and interleaved (band per shape, phase split, wall time)
t=$(date +%s)
timeout "$(cap 250 150)" "$K" tune --sweep default --db "$DB2" --json > "$OUT/tune_default.jsonl" 2> "$OUT/tune_default.err"
rc=$?; stamp "tune --sweep default (exhaustive, sustained) exit $rc after $(( $(date +%s) - t )) s" | tee -a "$SUM"
# the prefill shapes come last in the sweep: when the budget cut the run short, finish them (resumes the rest)
if ! grep -q '"total":true' "$OUT/tune_default.jsonl"; then
  timeout "$(cap 80 120)" "$K" tune attn_prefill --sweep default --db "$DB2" --json >> "$OUT/tune_default.jsonl" \
    2>> "$OUT/tune_default.err"
  stamp "tune attn_prefill --sweep default (the prefill shapes) exit $?" | tee -a "$SUM"
fi
python3 "$ROOT/tests/tune_summary.py" "$OUT/tune_default.jsonl" > "$OUT/tune_summary.txt"
cat "$OUT/tune_summary.txt" | tee -a "$SUM"
grep -E "\| [0-9.]+ s, " "$OUT/tune_default.err" | sed 's/.*\] //' | cut -c1-400 > "$OUT/tune_lines.txt"
"$K" report --db "$DB2" --markdown > "$OUT/report.md" 2>&1

# 5. kforge run (sustained) against the harness's sustained kforge figure, same plan, one prefill shape
S4="dtype=bf16,b=1,sq=4096,skv=4096,hq=32,hkv=8,d=128,causal=1"
timeout "$(cap 45 100)" "$K" run attn_prefill --shape "$S4" --db "$DB" --quiet --json > "$OUT/run_4k_sustained.json" 2>&1
stamp "run 4K 32/8 sustained exit $?" | tee -a "$SUM"
( cd "$ROOT" && KFORGE_DB=$DB PYTHONPATH=$ROOT/python timeout "$(cap 150 10)" python3 -m bench run --set gqa-prefill \
    --shapes d128-q4K-kv4K --contenders kforge-default,sdpa-cudnn --rounds 3 --samples 10 --timing sustained \
    --out "$OUT/bench" --no-append --no-plots > "$OUT/bench.log" 2>&1 )
stamp "harness exit $?" | tee -a "$SUM"
python3 - "$OUT/run_4k_sustained.json" "$OUT/bench/results.json" > "$OUT/compare.txt" 2>&1 <<'EOF'
import json, sys
run = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
res = json.load(open(sys.argv[2]))
def med(xs):
    xs = sorted(xs); n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
for e in res["shapes"]:
    for c in e["contenders"]:
        s = [x for r in c.get("rounds", []) for x in r]
        if not s:
            print(f"{c['name']}: {c['status']} {c.get('message') or ''}"); continue
        ck = [k for k in (c.get("clocks") or []) if k and k.get("sm_mhz_mean")]
        clk = f", SM {sum(k['sm_mhz_mean'] for k in ck) / len(ck):.0f} MHz" if ck else ""
        print(f"harness {c['name']:16s} median {med(s):.4f} ms ({len(s)} samples, {c.get('calls')} calls a sample,"
              f" {c.get('sets')} sets{clk}) variant {c.get('variant')}")
        if c["name"] == "kforge-default":
            r = run["median_ms"] / med(s)
            print(f"kforge run sustained median {run['median_ms']:.4f} ms ({run.get('launches')} calls a sample, "
                  f"{run.get('sets')} sets, SM {run.get('sm_clock_mean')} MHz) variant {run.get('variant')}")
            print(f"  ratio run/harness {r:.4f} -> " + ("within 3%" if abs(r - 1) <= 0.03 else "NOT within 3%"))
EOF
cat "$OUT/compare.txt" | tee -a "$SUM"
stamp "done" | tee -a "$SUM"
