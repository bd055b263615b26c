#!/usr/bin/env bash
# tests/device_diag.sh: the open kernel questions of issue 21 in one device call, from a build made elsewhere:
# (1) FP8 K/V decode (32/8 D128 32K B32) over a grid of key blocks, warps, stages and splits against the bf16
# default, sustained (kforge run): do smaller blocks with more CTAs a multiprocessor hide the conversion?
# (2) paged prefill (4K causal, wgmma_tma page maps, PAGE default 16) against contiguous: Nsight Compute's
# warp-state and scheduler sections of one launch of each (where ncu can read the counters).
# (3) Nsight Compute's warp states, occupancy and memory sections of the FP8 and the bf16 decode kernels.
# Logs under $OUT (packed), summary.txt beside them.
# usage: KF_BUILD=.devbuild BUDGET_S=300 [PARTS="1 2 3"] bash tests/device_diag.sh   (PARTS: which of the three)
KF_LOGS=diag; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
run() {  # run NAME FAMILY SHAPE [kforge run options] (tests/device_lib.sh's run_row)
  say "run $1 (${*:4}): $(RUN_S=${RUN_S:-40} run_row "$OUT/run_$1.json" "$2" "$3" "${@:4}" --db /tmp/kf_diag.db)"
}
want() { case " ${PARTS:-1 2 3} " in *" $1 "*) return 0 ;; esac; return 1; }
D="dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=0"
want 1 && run dec_bf16 attn_decode "$D"
# (valid: keys per warp bn / w >= 16; shared memory at bn 64: 52 KB at stages 2, 68 KB at 3: four or three CTAs)
for p in bn=64,w=4,stages=2,sp=1 bn=64,w=4,stages=2,sp=2 bn=64,w=4,stages=3,sp=2 bn=64,w=4,stages=3,sp=4 \
         bn=128,w=4,stages=2,sp=2 bn=128,w=8,stages=2,sp=2; do
  want 1 && [ "$(left 90)" -gt 5 ] || break
  run "fp8_${p//[=,]/_}" attn_decode "$D,kv_dtype=e4m3" --params "impl=mma,tm=16,$p"
done
P="dtype=bf16,b=1,hq=32,hkv=8,d=128,sq=4096,skv=4096,causal=1"
PP=${PAGED_PARAMS:-impl=wgmma_tma,bm=128,w=8,bn=128,stages=2}   # session 6 read wgmma_pp; page maps since session 7
if want 2 && command -v ncu > /dev/null && [ "$(left 20)" -gt 60 ]; then
  for side in contiguous paged; do
    extra=(); [ $side = paged ] && extra=(--page-size "${PAGE:-16}")
    timeout "$(left 10)" ncu --clock-control none -k regex:kf_attn_prefill --launch-skip 8 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
      "$K" run attn_prefill --shape "$P" --params "$PP" "${extra[@]}" --timing burst --db /tmp/kf_diag.db \
      > "$OUT/ncu_$side.txt" 2>&1
    say "ncu $side: exit $?; $(grep -E 'Duration|Issued Warp|No Eligible|Stall' "$OUT/ncu_$side.txt" | head -n 6 | tr -s ' ' | tr '\n' ';')"
  done
else
  say "ncu: skipped (not found or no time)"
fi
# (3) FP8 decode against bf16 decode, one launch each: where the FP8 kernel's warps stall (session 7: 0.73x the bf16
# speed at 1980 MHz and ~500 W, 1.5 TB/s: neither power- nor bandwidth-bound)
if want 3 && command -v ncu > /dev/null && [ "$(left 10)" -gt 40 ]; then
  for side in bf16 fp8; do
    extra=""; [ $side = fp8 ] && extra=",kv_dtype=e4m3"
    timeout "$(left 5)" ncu --clock-control none -k regex:kf_attn_decode --launch-skip 8 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
      "$K" run attn_decode --shape "$D$extra" --timing burst --db /tmp/kf_diag.db > "$OUT/ncu_dec_$side.txt" 2>&1
    say "ncu decode $side: exit $?; $(grep -E 'Duration|Issued Warp|No Eligible|Achieved Occupancy|Stall' "$OUT/ncu_dec_$side.txt" | head -n 8 | tr -s ' ' | tr '\n' ';')"
  done
fi
pack
