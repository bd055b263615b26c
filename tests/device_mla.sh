#!/usr/bin/env bash
# tests/device_mla.sh: issue 18 (MLA decode at FlashMLA's level) in one short device call, from a build made
# elsewhere: the parts GPU suite (every impl's cases, wgmma_ks included, and the mutants), then the figure rows
# with `kforge run` (sustained: back-to-back over rotating inputs, clock and power beside each), the keys-split
# kernel against the default. Each stage under a deadline; logs under $OUT (packed, at most 8 files come back).
# KSL=1 (the default): the lagged keys-split kernel (impl=wgmma_ksl) against wgmma_ks on the four figure rows, then the
# suite filtered to its cases and mutants (KFORGE_TEST_FILTER=impl=wgmma_ksl); KSL=0: the earlier run (all rows, all cases).
# W8=1: impl wg8 (the FP8 latent cache on e4m3 wgmma): its suite cases and mutants (KFORGE_TEST_FILTER=impl=wg8),
# then the FP8 row B128 Hq16 4K (stages 2..4) against the bf16 default, the FP8 default (wg8) and the mma kernel
# (the FP8 default before 0d5243a), two rounds.
# W8ROWS' fourth field: a template folder of the tree for that row (an A/B copy). W8FILTERS='f1 f2': the suite's filters (default impl=wg8); W8TEST=0: no suite; NCU='name|shape|params ...': Nsight Compute rows (W8 mode); W8ROWS='name|shape|params ...': these
# rows instead of the FP8 row set.
# usage: KF_BUILD=.devbuild BUDGET_S=240 [W8=1] bash tests/device_mla.sh
KF_LOGS=mla; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
export KFORGE_TEMPLATE_DIR=$ROOT/templates

# 1. the figure rows first (a hang or trap in the suite must not cost them): keys-split kernel and the default
DB=/tmp/kf_mla.db; rm -f "$DB"*
# a binary cache made elsewhere (kforge compile --arch sm_90a --db $KF_BUILD/mla.db) saves the rows NVRTC time here
[ -f "$B/mla.db" ] && cp "$B/mla.db" "$DB"
MLA="dtype=bf16,hkv=1,parts=latent512_rope64,value=alias_latent,dv=512,layers=1,page_size=64"
KS="impl=wgmma_ks,tm=64,wn=1,bn=64,stages=2"
row() {  # row NAME SHAPE PARAMS (empty: the template default) [TEMPLATES: a folder of the tree, a copy to A/B]
  local f="$OUT/run_$1.log" pa=()
  [ -n "$3" ] && pa=(--params "$3")
  [ -n "${4:-}" ] && pa+=(--templates "$ROOT/$4")
  timeout "$(left 150)" "$K" run attn_parts_decode --shape "$MLA,$2" "${pa[@]}" --db "$DB" > "$f" 2>&1
  say "$1 ($2${3:+ | $3}): exit $?; $(grep -iE 'error|ms|TFLOP|TB/s|clock|MHz' "$f" | tr -s ' ' | tr '\n' ' ' | cut -c1-400)"
}
if [ "${W8:-0}" = 1 ]; then
  # impl wg8 (parts/decode_wg8.cuh, the FP8 latent cache on e4m3 wgmma): its suite cases and mutants first, then the
  # issue's FP8 row against the bf16 default, the FP8 default and the mma kernel, interleaved (issue 18: >= 1.8x bf16)
  cd "$B/tests"
  if [ "${W8TEST:-1}" = 1 ]; then
    # W8FILTERS: the suite's filters, one process each (default impl=wg8); W8ALT=DIR: the same again over the template
    # copy DIR of the tree (an A/B candidate), its binaries in tests/test_parts_gpu_alt.db
    for td in templates ${W8ALT:-}; do
      for flt in ${W8FILTERS:-impl=wg8}; do
        lg="$OUT/test_parts_gpu_${td//[^a-z0-9]/}_${flt//[^a-z0-9_]/_}.log" tdb=test_parts_gpu.db
        [ "$td" != templates ] && tdb=test_parts_gpu_alt.db
        KFORGE_TEMPLATE_DIR=$ROOT/$td KFORGE_TEST_DB=$tdb KFORGE_TEST_FILTER=$flt timeout "$(left 150)" ./test_parts_gpu > "$lg" 2>&1
        say "test_parts_gpu ($td, filter $flt): exit $?; $(grep -hE 'FAIL|PASS|mutants killed|SURVIVED|NOT PLANTED' "$lg" | tail -n 12 | tr '\n' ' ')"
        grep -iE 'fail|error|trap' "$lg" | head -n 40 >> "$SUM"
      done
    done
  fi
  cd "$ROOT"
  # NCU="name|shape|params ...": Nsight Compute on one split-kernel launch of each (--set full, source lines by
  # KFORGE_LINEINFO=1): the details page, the raw metrics, the SASS with its per-instruction samples (CSV)
  for nrow in ${NCU:-}; do
    command -v ncu > /dev/null || { say "ncu: not found"; break; }
    [ "$(left 20)" -lt 60 ] && { say "ncu $nrow: skipped (budget)"; continue; }
    IFS='|' read -r nn nshape nparams <<< "$nrow"
    f="$OUT/ncu_$nn"
    KFORGE_LINEINFO=1 timeout "$(left 15)" ncu --set full --import-source yes -k regex:kf_parts_decode --launch-skip 3 \
      --launch-count 1 -f -o "$f" "$K" run attn_parts_decode --shape "$MLA,$nshape" ${nparams:+--params "$nparams"} \
      --timing burst --db "$DB" --quiet > "$f.log" 2>&1
    rc=$?
    ncu --import "$f.ncu-rep" --page details --print-units base > "$f.txt" 2>&1
    ncu --import "$f.ncu-rep" --page raw --csv > "$f.raw.csv" 2>&1
    ncu --import "$f.ncu-rep" --page source --print-source sass --csv > "$f.sass.csv" 2>&1
    say "ncu $nn: exit $rc $(grep -E '^ +(Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy) ' "$f.txt" | tr -s ' ' | tr '\n' ';')"
    say "  stalls: $(python3 "$ROOT/tests/ncu_stalls.py" "$f.raw.csv" 2>&1 | tr '\n' ' ')"
    rm -f "$f.ncu-rep"
  done
  [ -n "${W8ROWS:-}" ] && { for wr in $W8ROWS; do IFS='|' read -r wn ws wp wt <<< "$wr"; row "$wn" "$ws" "$wp" "$wt"; done; pack; exit 0; }
  for r in 1 2; do
    row "hq16_4k_bf16_r$r" "b=128,sq=1,skv=4096,hq=16,causal=0" ""
    row "hq16_4k_fp8def_r$r" "b=128,sq=1,skv=4096,hq=16,causal=0,kv_dtype=e4m3" ""
    row "hq16_4k_fp8mma_r$r" "b=128,sq=1,skv=4096,hq=16,causal=0,kv_dtype=e4m3" "impl=mma,tm=16,wn=4,bn=64,stages=2,sp=1"
    for st in 2 3 4; do
      row "hq16_4k_wg8_st${st}_r$r" "b=128,sq=1,skv=4096,hq=16,causal=0,kv_dtype=e4m3" "impl=wg8,tm=16,wn=1,bn=64,stages=$st,sp=1"
    done
  done
  # two CTAs an SM (stages 2: 110 KB of shared memory, 255 registers x 128 threads) where the splits give them
  row hq16_4k_wg8_st2_sp2 "b=128,sq=1,skv=4096,hq=16,causal=0,kv_dtype=e4m3" "impl=wg8,tm=16,wn=1,bn=64,stages=2,sp=2"
  row b1_64k_hq16_wg8 "b=1,sq=1,skv=65536,hq=16,causal=0,kv_dtype=e4m3" "impl=wg8,tm=16,wn=1,bn=64,stages=3,sp=64"
  row b1_64k_hq16_bf16 "b=1,sq=1,skv=65536,hq=16,causal=0" ""
  pack
  exit 0
fi
if [ "${KSL:-1}" = 1 ]; then
  # the lagged schedule against the current default (wgmma_ks) on the issue's four rows, interleaved
  KSL_P="impl=wgmma_ksl,tm=64,wn=1,bn=64,stages=2"
  row hq128_4k_ks    "b=128,sq=1,skv=4096,hq=128,causal=0" "$KS,sp=1"
  row hq128_4k_ksl   "b=128,sq=1,skv=4096,hq=128,causal=0" "$KSL_P,sp=1"
  row sq2_8k_ks      "b=64,sq=2,skv=8192,hq=128,causal=1" "$KS,sp=1"
  row sq2_8k_ksl     "b=64,sq=2,skv=8192,hq=128,causal=1" "$KSL_P,sp=1"
  row b1_64k_ks64    "b=1,sq=1,skv=65536,hq=128,causal=0" "$KS,sp=64"
  row b1_64k_ksl64   "b=1,sq=1,skv=65536,hq=128,causal=0" "$KSL_P,sp=64"
  row b1_64k_ksl128  "b=1,sq=1,skv=65536,hq=128,causal=0" "$KSL_P,sp=128"
  row hq16_4k_ks     "b=128,sq=1,skv=4096,hq=16,causal=0" "$KS,sp=1"
  row hq16_4k_ksl    "b=128,sq=1,skv=4096,hq=16,causal=0" "$KSL_P,sp=1"
  row hq128_4k_ks2   "b=128,sq=1,skv=4096,hq=128,causal=0" "$KS,sp=1"
  row hq128_4k_ksl2  "b=128,sq=1,skv=4096,hq=128,causal=0" "$KSL_P,sp=1"
  cd "$B/tests"
  KFORGE_TEST_FILTER=impl=wgmma_ksl timeout "$(left 5)" ./test_parts_gpu > "$OUT/test_parts_gpu.log" 2>&1
  say "test_parts_gpu (filter impl=wgmma_ksl): exit $?; $(grep -hE 'FAIL|PASS|mutants killed|SURVIVED|NOT PLANTED' "$OUT/test_parts_gpu.log" | tail -n 12 | tr '\n' ' ')"
  grep -iE 'fail|error|trap|ms ' "$OUT/test_parts_gpu.log" | head -n 40 >> "$SUM"
  pack
  exit 0
fi
row hq128_4k_ks   "b=128,sq=1,skv=4096,hq=128,causal=0" "$KS,sp=1"
row hq128_4k_def  "b=128,sq=1,skv=4096,hq=128,causal=0" ""
row sq2_8k_ks     "b=64,sq=2,skv=8192,hq=128,causal=1" "$KS,sp=1"
row sq2_8k_def    "b=64,sq=2,skv=8192,hq=128,causal=1" ""
row hq16_4k_ks    "b=128,sq=1,skv=4096,hq=16,causal=0" "$KS,sp=1"
row hq16_4k_def   "b=128,sq=1,skv=4096,hq=16,causal=0" ""
row b1_64k_ks64   "b=1,sq=1,skv=65536,hq=128,causal=0" "$KS,sp=64"
row b1_64k_ks32   "b=1,sq=1,skv=65536,hq=128,causal=0" "$KS,sp=32"
row b1_64k_def    "b=1,sq=1,skv=65536,hq=128,causal=0" ""

# 2. the parts GPU suite: every case (wgmma_ks among them), the API, the tuner's runner rows, the mutants
cd "$B/tests"
timeout "$(left 10)" ./test_parts_gpu > "$OUT/test_parts_gpu.log" 2>&1
say "test_parts_gpu: exit $?; $(grep -hE 'FAIL|PASS|mutants killed|SURVIVED|NOT PLANTED' "$OUT/test_parts_gpu.log" | tail -n 12 | tr '\n' ' ')"
grep -E 'wgmma_ks|impl=wgmma_ks' "$OUT/test_parts_gpu.log" | grep -iE 'fail|error|ms' | head -n 40 >> "$SUM"
pack
