#!/usr/bin/env bash
# tests/device_mla.sh: issue 18 (MLA decode at FlashMLA's level) in one short device call, from a build made
# elsewhere: the parts GPU suite (every impl's cases, wgmma_ks included, and the mutants), then the figure rows
# with `kforge run` (sustained: back-to-back over rotating inputs, clock and power beside each), the keys-split
# kernel against the default. Each stage under a deadline; logs under $OUT (packed, at most 8 files come back).
# KSL=1 (the default): the lagged keys-split kernel (impl=wgmma_ksl) against wgmma_ks on the four figure rows, then the
# suite filtered to its cases and mutants (KFORGE_TEST_FILTER=impl=wgmma_ksl); KSL=0: the earlier run (all rows, all cases).
# usage: KF_BUILD=.devbuild BUDGET_S=240 bash tests/device_mla.sh
KF_LOGS=mla; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
export KFORGE_TEMPLATE_DIR=$ROOT/templates

# 1. the figure rows first (a hang or trap in the suite must not cost them): keys-split kernel and the default
DB=/tmp/kf_mla.db; rm -f "$DB"*
MLA="dtype=bf16,hkv=1,parts=latent512_rope64,value=alias_latent,dv=512,layers=1,page_size=64"
KS="impl=wgmma_ks,tm=64,wn=1,bn=64,stages=2"
row() {  # row NAME SHAPE PARAMS (empty: the template default)
  local f="$OUT/run_$1.log" pa=()
  [ -n "$3" ] && pa=(--params "$3")
  timeout "$(left 150)" "$K" run attn_parts_decode --shape "$MLA,$2" "${pa[@]}" --db "$DB" > "$f" 2>&1
  say "$1 ($2${3:+ | $3}): exit $?; $(grep -iE 'error|ms|TFLOP|TB/s|clock|MHz' "$f" | tr -s ' ' | tr '\n' ' ' | cut -c1-400)"
}
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
