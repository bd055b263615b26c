#!/usr/bin/env bash
# tests/device_feat.sh: issue 21's GPU checks in one device call, from a build made elsewhere: the features' GPU suite
# cases (window, softcap, sinks: test_attn_gpu filtered), the mutants (the feature mutants among them), and the
# sustained figures the harness can take today (kforge run). Logs tarred under $OUT, summary.txt beside them.
# usage: KF_BUILD=.devbuild bash tests/device_feat.sh      (FIGS_ONLY=1: skip the tests; FIGS=0: the tests alone;
#   EXTRA=0: the issue's rows only)
KF_LOGS=feat; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
cd "$B/tests"
# 1. the GPU cases (the fp64 references themselves are CPU tests: test_ref_feat; the harness's FP8 and paged inputs:
#    test_attn_case) (every row printed: family, shape with win/cap/sinks/e4m3/page, variant, rel_err, lse max-abs,
#    pass/FAIL); the filter takes the FP8 K/V, paged and naive groups too (test_attn_gpu__features_fp8_kv,
#    _features_paged, _features_naive_matches_cpu)
# 2. beside them the mutants (the plain ones and window +1 / -1, softcap after the max, sink in the numerator, the FP8
#    scale of the next head, the block-table row of the next sequence):
#    their NVRTC compiles overlap on the machine's cores
if [ "${FIGS_ONLY:-0}" != 1 ]; then   # FIGS_ONLY=1: the figures alone (the suite ran the tests)
( KF_TEST_FILTER='*features*' KFORGE_TEST_DB=/tmp/kf_feat.db timeout ${GPU_S:-240} ./test_attn_gpu > "$OUT/test_attn_gpu_features.log" 2>&1
  echo $? > "$OUT/features.rc"
  # the bitwise GQA = expanded-MHA pairs, paged prefill among them (mma and the sm_90a impls)
  KF_TEST_FILTER='*bitwise*' KFORGE_TEST_DB=/tmp/kf_feat.db timeout ${GPU_S:-240} ./test_attn_gpu > "$OUT/test_attn_gpu_bitwise.log" 2>&1
  echo $? > "$OUT/bitwise.rc" ) &
( KFORGE_TEST_DB=/tmp/kf_feat_mut.db timeout ${GPU_S:-240} ./test_mutants > "$OUT/test_mutants.log" 2>&1; echo $? > "$OUT/mutants.rc" ) &
wait
say "test_attn_gpu features: exit $(cat "$OUT/features.rc") $(grep -E '[0-9]+ passed, [0-9]+ failed' "$OUT/test_attn_gpu_features.log")"
grep -E 'FAIL|->' "$OUT/test_attn_gpu_features.log" | head -20 >> "$SUM"
say "test_attn_gpu bitwise: exit $(cat "$OUT/bitwise.rc") $(grep -E '[0-9]+ passed, [0-9]+ failed' "$OUT/test_attn_gpu_bitwise.log")"
grep -E 'FAIL' "$OUT/test_attn_gpu_bitwise.log" | head -10 >> "$SUM"
say "test_mutants: exit $(cat "$OUT/mutants.rc") $(grep -iE 'killed|planted' "$OUT/test_mutants.log" | tail -n 3 | tr '\n' ' ')"
fi
[ "${FIGS:-1}" = 1 ] || { say "figures: skipped (FIGS=0)"; exit 0; }
# 3. figures, sustained (kforge run: warm-up, back-to-back over rotating inputs; clock and power in the log)
run() {  # run NAME FAMILY SHAPE [kforge run options, e.g. --page-size 64] (tests/device_lib.sh's run_row)
  say "run $1 ($2 $3 ${*:4}): $(RUN_S=${RUN_S:-45} run_row "$OUT/run_$1.json" "$2" "$3" "${@:4}" --db /tmp/kf_feat_run.db)"
}
P="dtype=bf16,b=1,hq=32,hkv=8,d=128"
run win4096_32k attn_prefill "$P,sq=32768,skv=32768,causal=1,window=4096"
run dense_4k_causal attn_prefill "$P,sq=4096,skv=4096,causal=1"
run dense_4k_full attn_prefill "$P,sq=4096,skv=4096,causal=0"
run dense_32k_causal attn_prefill "$P,sq=32768,skv=32768,causal=1"
run dec_win4096_32k attn_decode "dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=1,window=4096"
run dec_dense_32k attn_decode "dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=0"
run gemma_cap_win attn_prefill "dtype=bf16,b=1,sq=8192,skv=8192,hq=16,hkv=8,d=256,causal=1,window=4096,softcap=50"
run gptoss_sink_win attn_prefill "dtype=bf16,b=1,sq=8192,skv=8192,hq=64,hkv=8,d=64,causal=1,window=128,sinks=1"
# FP8 (e4m3) K/V decode against dec_dense_32k (bf16, the same shape): timing only at this size (the GPU suite checks FP8)
run dec_fp8_32k attn_decode "dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=0,kv_dtype=e4m3"
# paged prefill (pages of 64, a shuffled pool) against dense_4k_causal (contiguous, the same shape), gated on the GPU naive kernel
run paged64_4k_causal attn_prefill "$P,sq=4096,skv=4096,causal=1" --page-size 64
# the same kernel contiguous (a paged shape takes wgmma_pp; the contiguous default is wgmma_tma), other page sizes,
# paged decode, and the FP8 decode at other depths (EXTRA=0 skips them)
if [ "${EXTRA:-1}" = 1 ]; then
  run dense_4k_causal_pp attn_prefill "$P,sq=4096,skv=4096,causal=1" --params impl=wgmma_pp,bm=128,w=8,bn=128,stages=2,sched=grid
  run paged16_4k_causal attn_prefill "$P,sq=4096,skv=4096,causal=1" --page-size 16
  run paged256_4k_causal attn_prefill "$P,sq=4096,skv=4096,causal=1" --page-size 256
  run dec_paged64_32k attn_decode "dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=0" --page-size 64
  run dec_fp8_32k_st3 attn_decode "dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=0,kv_dtype=e4m3" --params impl=mma,tm=16,w=4,bn=128,stages=3,sp=1
  run dec_fp8_32k_w8 attn_decode "dtype=bf16,b=32,sq=1,skv=32768,hq=32,hkv=8,d=128,causal=0,kv_dtype=e4m3" --params impl=mma,tm=16,w=8,bn=128,stages=2,sp=1
fi
python3 - "$OUT" >> "$SUM" <<'PY'
import json, sys, os
o = sys.argv[1]
def ms(n):
    try: return json.load(open(os.path.join(o, "run_%s.json" % n))).get("median_ms")
    except Exception: return None
w, f, c = ms("win4096_32k"), ms("dense_4k_full"), ms("dense_4k_causal")
if w and f: print("figure: window 4096 over 32K, per query token / dense 4K (non-causal, the same keys per token): %.3f (target <= 1.15)" % ((w / 32768) / (f / 4096)))
if w and c: print("        per query token / dense causal 4K: %.3f" % ((w / 32768) / (c / 4096)))
b16, f8 = ms("dec_dense_32k"), ms("dec_fp8_32k")
if b16 and f8: print("figure: FP8 decode 32/8 D128 32K B32: bf16 / fp8 time = %.3fx (target >= 1.8)" % (b16 / f8))
pg, cpp = ms("paged64_4k_causal"), ms("dense_4k_causal_pp")
if pg and c: print("figure: paged (page 64) / contiguous prefill 4K causal (its default): %.3f (target <= 1.05)" % (pg / c))
if pg and cpp: print("        paged (page 64) / contiguous, the same kernel (wgmma_pp): %.3f" % (pg / cpp))
for n in ("paged16_4k_causal", "paged256_4k_causal"):
    if ms(n) and cpp: print("        %s / contiguous wgmma_pp: %.3f" % (n, ms(n) / cpp))
if ms("dec_paged64_32k") and b16: print("        paged (page 64) / contiguous decode 32K B32: %.3f" % (ms("dec_paged64_32k") / b16))
for n in ("dec_fp8_32k_st3", "dec_fp8_32k_w8"):
    if ms(n) and b16: print("        bf16 / %s: %.3fx" % (n, b16 / ms(n)))
PY
say "not measured here: window rows vs SDPA with a mask (no bench set yet)"
pack
