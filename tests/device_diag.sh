#!/usr/bin/env bash
# tests/device_diag.sh: the two open kernel questions of issue 21 in one device call, from a build made elsewhere:
# (1) FP8 K/V decode (32/8 D128 32K B32) over a grid of key blocks, warps, stages and splits against the bf16
# default, sustained (kforge run): do smaller blocks with more CTAs a multiprocessor hide the conversion?
# (2) paged prefill (4K causal, wgmma_pp, page 64) against contiguous: Nsight Compute's warp-state and
# scheduler sections of one launch of each (where ncu can read the counters), to place the 2.2x.
# Logs under $OUT (packed), summary.txt beside them.
# usage: KF_BUILD=.devbuild BUDGET_S=300 bash tests/device_diag.sh
KF_LOGS=diag; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
run() {  # run NAME FAMILY SHAPE [kforge run options]
  timeout "${RUN_S:-40}" "$K" run "$2" --shape "$3" "${@:4}" --db /tmp/kf_diag.db --json > "$OUT/run_$1.json" 2> "$OUT/run_$1.err"
  say "run $1 (${*:4}): exit $? $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("median_ms", d.get("median_ms"), "pass", d.get("pass"), "sm_mhz", d.get("sm_clock_mean"), "W", d.get("power_mean"))' "$OUT/run_$1.json" 2>/dev/null)"
}
D="dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=0"
run dec_bf16 attn_decode "$D"
# (valid: keys per warp bn / w >= 16; shared memory at bn 64: 52 KB at stages 2, 68 KB at 3: four or three CTAs)
for p in bn=64,w=4,stages=2,sp=1 bn=64,w=4,stages=2,sp=2 bn=64,w=4,stages=3,sp=2 bn=64,w=4,stages=3,sp=4 \
         bn=128,w=4,stages=2,sp=2 bn=128,w=8,stages=2,sp=2; do
  [ "$(left 90)" -gt 5 ] || break
  run "fp8_${p//[=,]/_}" attn_decode "$D,kv_dtype=e4m3" --params "tm=16,$p"
done
P="dtype=bf16,b=1,hq=32,hkv=8,d=128,sq=4096,skv=4096,causal=1"
PP="impl=wgmma_pp,bm=128,w=8,bn=128,stages=2"
if command -v ncu > /dev/null && [ "$(left 20)" -gt 60 ]; then
  for side in contiguous paged; do
    extra=(); [ $side = paged ] && extra=(--page-size 64)
    timeout "$(left 10)" ncu --clock-control none -k regex:kf_attn_prefill --launch-skip 8 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
      "$K" run attn_prefill --shape "$P" --params "$PP" "${extra[@]}" --timing burst --db /tmp/kf_diag.db \
      > "$OUT/ncu_$side.txt" 2>&1
    say "ncu $side: exit $?; $(grep -E 'Duration|Issued Warp|No Eligible|Stall' "$OUT/ncu_$side.txt" | head -n 6 | tr -s ' ' | tr '\n' ';')"
  done
else
  say "ncu: skipped (not found or no time)"
fi
pack
