#!/usr/bin/env bash
# tests/device_pre.sh: issue 19's GPU checks in one device call, from a build made elsewhere: attn_prefill impl=wgmma_tma
# (TMA producer) on the GPU suite's prefill cases (test_attn_gpu filtered: the wgmma_tma group, then the bitwise GQA
# pairs, wgmma_tma's among them), then sustained figures of wgmma_tma against the default (wgmma_pp) on issue 19's
# four rows, interleaved (default, tma, default, tma). Logs tarred under $OUT, summary.txt beside them. <= ~4 minutes.
# usage: KF_BUILD=.devbuild bash tests/device_pre.sh      (BUDGET_S=230 by default; ROUNDS=2)
KF_LOGS=pre; KF_BUDGET_DEFAULT=230; . "$(dirname "$0")/device_lib.sh"
cd "$B/tests"
DB=$B/tests/test_gpu.db; [ -f "$DB" ] || DB=/tmp/kf_pre.db
# 1. correctness: the wgmma_tma group (every wgmma case with the impl swapped, the features' sm90 cases, and
#    suite_prefill_tma: NaN past ragged key lengths, block edges, packed boxes into the next sequence, strided
#    views, D 64/128/256), then the bitwise pairs (a second process, cmocka takes one filter; after the first, so
#    that every variant it builds is in the cache by then)
KF_TEST_FILTER='*prefill_tma*' KFORGE_TEST_DB=$DB timeout ${GPU_S:-120} ./test_attn_gpu > "$OUT/test_attn_gpu_tma.log" 2>&1
echo $? > "$OUT/tma.rc"
KF_TEST_FILTER='*bitwise*' KFORGE_TEST_DB=$DB timeout ${GPU_S:-60} ./test_attn_gpu > "$OUT/test_attn_gpu_bitwise.log" 2>&1
echo $? > "$OUT/bitwise.rc"
say "test_attn_gpu prefill_tma: exit $(cat "$OUT/tma.rc") $(grep -E '[0-9]+ passed, [0-9]+ failed' "$OUT/test_attn_gpu_tma.log")"
grep -E 'FAIL|->|not valid|not built' "$OUT/test_attn_gpu_tma.log" | head -20 >> "$SUM"
say "test_attn_gpu bitwise: exit $(cat "$OUT/bitwise.rc") $(grep -E '[0-9]+ passed, [0-9]+ failed' "$OUT/test_attn_gpu_bitwise.log")"
grep -E 'wgmma_tma' "$OUT/test_attn_gpu_bitwise.log" | head -4 >> "$SUM"
# 2. figures, sustained (kforge run: warm-up to steady state, back-to-back calls over rotating inputs; clock and power)
run() {  # run NAME SHAPE [PARAMS]
  [ "$(left)" -lt 20 ] && { say "run $1: skipped (budget)"; return; }
  local lim=$(left); [ "$lim" -gt ${RUN_S:-45} ] && lim=${RUN_S:-45}
  timeout "$lim" "$K" run attn_prefill --shape "$2" ${3:+--params "$3"} --db /tmp/kf_pre_run.db --json > "$OUT/run_$1.json" 2> "$OUT/run_$1.err"
  local rc=$?
  say "run $1: exit $rc $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("median_ms", d.get("median_ms"), "pass", d.get("pass"), "sm_mhz", d.get("sm_clock_mean"), "W", d.get("power_mean"), "variant", d.get("variant"))' "$OUT/run_$1.json" 2>/dev/null)"
}
S="dtype=bf16,causal=1,b=1,hq=32,hkv=8"
TMA="impl=wgmma_tma,bm=128,w=8,stages=2"
for r in $(seq 1 ${ROUNDS:-2}); do
  for row in "d128_16k:d=128,sq=16384,skv=16384:128" "d256_4k:d=256,sq=4096,skv=4096:64" \
             "d64_8k:d=64,sq=8192,skv=8192:128" "d128_4k:d=128,sq=4096,skv=4096:128"; do
    IFS=: read -r name shp bn <<< "$row"
    run "${name}_default_r$r" "$S,$shp"
    run "${name}_tma_r$r" "$S,$shp" "$TMA,bn=$bn"
  done
done
python3 - "$OUT" >> "$SUM" <<'PY'
import json, sys, os, glob
o = sys.argv[1]
def get(n):
    try: return json.load(open(os.path.join(o, "run_%s.json" % n)))
    except Exception: return {}
print("row        default_ms  tma_ms   default/tma  (medians over rounds; sm MHz and W: default / tma)")
for row in ("d128_16k", "d256_4k", "d64_8k", "d128_4k"):
    d = [get(f) for f in sorted(os.path.basename(p)[4:-5] for p in glob.glob(os.path.join(o, "run_%s_default_r*.json" % row)))]
    t = [get(f) for f in sorted(os.path.basename(p)[4:-5] for p in glob.glob(os.path.join(o, "run_%s_tma_r*.json" % row)))]
    dm = sorted(x["median_ms"] for x in d if x.get("median_ms")); tm = sorted(x["median_ms"] for x in t if x.get("median_ms"))
    if not dm or not tm: print("%-10s  (missing)" % row); continue
    a, b = dm[len(dm) // 2], tm[len(tm) // 2]
    clk = lambda xs, k: "/".join("%s" % x.get(k) for x in xs)
    print("%-10s  %9.4f  %8.4f  %8.3fx    mhz %s | %s  W %s | %s" % (row, a, b, a / b, clk(d, "sm_clock_mean"), clk(t, "sm_clock_mean"),
          clk(d, "power_mean"), clk(t, "power_mean")))
PY
pack
