/* tests/gpu/gpu_suite.c: the GPU attention suite's cases, variant builds and runs, shared by test_attn_gpu and the mutant test */
#include "tests/gpu/gpu_suite.h"
#include "runtime/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/gpu/gpu_job.h"
#include "tuner/combine_run.h"
#include "runtime/cuda.h"

#define KV(...) .kv_len = {__VA_ARGS__}, .kv_len_n = sizeof((int[]){__VA_ARGS__}) / sizeof(int)
#define QL(...) .q_lens = {__VA_ARGS__}, .q_lens_n = sizeof((int[]){__VA_ARGS__}) / sizeof(int)
#define DEC .family = "attn_decode"
#define PRE .family = "attn_prefill"

/*
 * attn_decode: head ratios 1/1 4/2 16/4 8/4 8/2 6/2 32/8 64/8 128/1; Sq 1 2 4 8 16; ragged
 * kv_len with 0 and 1; causal and not (incl. kv_len < sq: rows that see no key); D 64/128/256;
 * bf16 and fp16; splits 1 and > 1 (same binary: sp is a runtime param); packed q; strided views.
 */
const suite_case suite_decode[] = {
    {DEC, "bf16", 4, 1, 700, 1, 1, 128, 0, KV(700, 0, 1, 333), .params = "sp=1"},
    {DEC, "bf16", 4, 1, 700, 1, 1, 128, 0, KV(700, 0, 1, 333), .params = "sp=4"},
    {DEC, "fp16", 3, 2, 600, 4, 2, 64, 1, KV(600, 1, 0), .params = "sp=1"},
    {DEC, "fp16", 3, 2, 600, 4, 2, 64, 1, KV(600, 1, 0), .params = "sp=8"},
    {DEC, "bf16", 2, 4, 900, 16, 4, 256, 0, KV(900, 17), .params = "sp=1"},
    {DEC, "bf16", 2, 4, 900, 16, 4, 256, 0, KV(900, 17), .params = "sp=2"},
    {DEC, "fp16", 3, 4, 700, 8, 4, 128, 1, KV(700, 0, 1), .params = "sp=1", .mut = MUT_YES},
    {DEC, "fp16", 3, 4, 700, 8, 4, 128, 1, KV(700, 0, 1), .params = "sp=4", .mut = MUT_YES},
    {DEC, "fp16", 3, 4, 700, 8, 4, 128, 1, KV(700, 0, 1), .params = "impl=mma,tm=32,w=8,bn=64,stages=1,sp=2"},
    {DEC, "bf16", 3, 2, 700, 8, 2, 128, 1, KV(513, 1, 0), .params = "sp=1", .mut = MUT_YES},
    {DEC, "bf16", 3, 2, 700, 8, 2, 128, 1, KV(513, 1, 0), .params = "sp=8", .mut = MUT_YES},
    {DEC, "bf16", 2, 8, 500, 8, 2, 64, 0, KV(500, 77), .params = "sp=4", .mut = MUT_YES},
    {DEC, "bf16", 2, 8, 500, 8, 2, 64, 0, KV(500, 77), .params = "impl=mma,tm=64,w=4,bn=128,stages=3,sp=2"},
    {DEC, "fp16", 2, 8, 500, 6, 2, 128, 0, KV(500, 1), .params = "sp=1", .mut = MUT_YES},
    {DEC, "fp16", 2, 8, 500, 6, 2, 128, 1, KV(500, 1), .params = "sp=4", .mut = MUT_YES},
    {DEC, "bf16", 2, 1, 1000, 32, 8, 128, 0, KV(1000, 0), .params = "sp=1"},
    {DEC, "bf16", 2, 1, 1000, 32, 8, 128, 0, KV(1000, 0), .params = "sp=16"},
    {DEC, "fp16", 2, 2, 800, 64, 8, 128, 1, KV(800, 65), .params = "sp=1"},
    {DEC, "fp16", 2, 2, 800, 64, 8, 128, 1, KV(800, 65), .params = "sp=4"},
    {DEC, "bf16", 2, 1, 600, 128, 1, 64, 0, KV(600, 1), .params = "sp=1"},
    {DEC, "bf16", 2, 1, 600, 128, 1, 64, 1, KV(600, 1), .params = "sp=2"},
    {DEC, "fp16", 2, 16, 400, 8, 2, 256, 1, KV(400, 16), .params = "sp=1"},
    {DEC, "fp16", 2, 16, 400, 8, 2, 256, 1, KV(400, 16), .params = "sp=2"},
    {DEC, "bf16", 2, 16, 300, 1, 1, 64, 1, KV(300, 5), .params = "sp=1"},
    {DEC, "bf16", 2, 16, 300, 1, 1, 64, 1, KV(300, 5), .params = "sp=4"},
    /* strided views and packed q */
    {DEC, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 1), .layout = TUNE_LAYOUT_BHSD, .params = "sp=4"},
    {DEC, "fp16", 2, 4, 700, 8, 4, 128, 0, KV(650, 0), .row_pad = 2, .params = "sp=4"},
    {DEC, "bf16", 3, 2, 640, 8, 2, 128, 1, KV(640, 100, 1), QL(2, 1, 2), .params = "sp=4"},
    {DEC, "bf16", 3, 2, 640, 8, 2, 128, 1, KV(640, 100, 1), QL(2, 1, 2), .params = "sp=1"},
};
const int suite_decode_n = sizeof suite_decode / sizeof suite_decode[0];

/*
 * attn_prefill: lengths 1, 17, 63, 64, 65, 1000, 4097 (4097 against the GPU naive kernel),
 * causal with sq < skv, packed varlen (q packed, k/v packed or a cache with kv_len),
 * strided views (rows padded to 2x, a permuted [B,H,S,D] view), tile params.
 */
const suite_case suite_prefill[] = {
    {PRE, "bf16", 2, 1, 1, 8, 2, 128, 0},
    {PRE, "bf16", 2, 1, 1, 8, 2, 128, 1},
    {PRE, "fp16", 2, 17, 17, 4, 1, 64, 1},
    {PRE, "bf16", 1, 63, 63, 8, 4, 256, 1},
    {PRE, "fp16", 1, 64, 64, 6, 2, 128, 0, .mut = MUT_YES},
    {PRE, "bf16", 2, 65, 65, 8, 2, 128, 1, .mut = MUT_YES},
    {PRE, "fp16", 1, 1000, 1000, 8, 2, 128, 1},
    {PRE, "bf16", 1, 4097, 4097, 8, 2, 128, 1, .ref = REF_NAIVE},
    {PRE, "fp16", 1, 4097, 4097, 16, 2, 64, 0, .ref = REF_NAIVE},
    /* causal, sq < skv (bottom-right) */
    {PRE, "fp16", 2, 65, 1000, 8, 2, 64, 1, .mut = MUT_YES},
    {PRE, "bf16", 1, 17, 4097, 32, 8, 128, 1},
    {PRE, "bf16", 2, 63, 200, 8, 4, 128, 1, KV(200, 63)},
    /* packed varlen */
    {PRE, "bf16", 4, 300, 0, 8, 2, 128, 1, KV(1, 64, 400, 0), QL(1, 17, 300, 65), .packed_kv = 1},
    {PRE, "fp16", 3, 200, 512, 6, 2, 64, 0, KV(100, 512, 200), QL(63, 1, 200)},
    /* strided views */
    {PRE, "bf16", 2, 200, 300, 8, 4, 128, 1, .row_pad = 2},
    {PRE, "fp16", 2, 130, 130, 8, 2, 128, 0, .layout = TUNE_LAYOUT_BHSD},
    {PRE, "bf16", 2, 100, 0, 4, 2, 64, 1, KV(150, 37), QL(100, 37), .packed_kv = 1, .layout = TUNE_LAYOUT_BHSD,
     .row_pad = 2},
    /* many tiles (more than SMs: the persistent schedule's cases when the TMA group runs them with sched persist):
     * 1024 and 512 tiles of 128 rows; ragged packed rows with empty sequences, 640 tiles of 192 rows at head dim 64,
     * most of them past their rows */
    {PRE, "bf16", 8, 1000, 1000, 16, 4, 128, 1, .ref = REF_NAIVE},
    {PRE, "bf16", 4, 1000, 1000, 16, 4, 256, 1, .ref = REF_NAIVE},
    {PRE, "fp16", 8, 900, 0, 16, 2, 64, 1, KV(900, 0, 1, 500, 17, 899, 300, 64), QL(900, 0, 1, 333, 17, 640, 300, 64),
     .packed_kv = 1, .ref = REF_NAIVE},
    /* tile params */
    {PRE, "fp16", 1, 300, 333, 8, 2, 64, 1, .params = "impl=mma,bm=64,w=4,bn=128,stages=3,sched=grid"},
    {PRE, "bf16", 1, 300, 333, 8, 2, 128, 0, .params = "impl=mma,bm=64,w=4,bn=32,stages=1,sched=grid"},
    {PRE, "bf16", 1, 257, 257, 6, 2, 256, 1, .params = "impl=mma,bm=64,w=4,bn=32,stages=2,sched=grid"},
};
const int suite_prefill_n = sizeof suite_prefill / sizeof suite_prefill[0];

/*
 * attn_prefill impl=wgmma, wgmma_ov and wgmma_pp (sm_90a, head dims 64, 128 and 256): run in addition to every
 * D 64, 128 and 256 case of suite_prefill, once with each of suite_prefill_sm90_params (D 256: the _d256 ones,
 * 64-key blocks; see test_attn_gpu.c). Extra here: GQA 8/4 and 8/2 at more lengths, stages 3, rows that see no
 * key (causal, kv_len < sq), non-causal 4097; the same for head dims 64 and 256.
 */
const char *const suite_prefill_sm90_params[3] = {"impl=wgmma,bm=128,w=8,bn=128,stages=2,sched=grid",
                                                  "impl=wgmma_ov,bm=128,w=8,bn=128,stages=2,sched=grid",
                                                  "impl=wgmma_pp,bm=128,w=8,bn=128,stages=2,sched=grid"};
const char *const suite_prefill_sm90_params_d256[3] = {"impl=wgmma,bm=128,w=8,bn=64,stages=2,sched=grid",
                                                       "impl=wgmma_ov,bm=128,w=8,bn=64,stages=2,sched=grid",
                                                       "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid"};
#define WG2 .params = "impl=wgmma,bm=128,w=8,bn=128,stages=2,sched=grid"
#define WG3 .params = "impl=wgmma,bm=128,w=8,bn=128,stages=3,sched=grid"
#define OV2 .params = "impl=wgmma_ov,bm=128,w=8,bn=128,stages=2,sched=grid"
#define OV3 .params = "impl=wgmma_ov,bm=128,w=8,bn=128,stages=3,sched=grid"
#define PP2 .params = "impl=wgmma_pp,bm=128,w=8,bn=128,stages=2,sched=grid"
#define PP3 .params = "impl=wgmma_pp,bm=128,w=8,bn=128,stages=3,sched=grid"
/* wgmma_tma's cases named here run persistent (sched persist); its other cases (every wgmma case again, the default
 * ones) one CTA a tile, the default */
#define TMA2 .params = "impl=wgmma_tma,bm=128,w=8,bn=128,stages=2,sched=persist"
#define TMA3 .params = "impl=wgmma_tma,bm=128,w=8,bn=128,stages=3,sched=persist"
#define TMA256 .params = "impl=wgmma_tma,bm=128,w=8,bn=64,stages=2,sched=persist"
#define TMA256_80 .params = "impl=wgmma_tma,bm=128,w=8,bn=80,stages=2,sched=grid"   /* 80-key blocks, head dim 256 */
#define TMA256_80P .params = "impl=wgmma_tma,bm=128,w=8,bn=80,stages=2,sched=persist"
#define TMA192 .params = "impl=wgmma_tma,bm=192,w=12,bn=128,stages=2,sched=persist"   /* three consumers, head dim 64 */
#define TMA192S3 .params = "impl=wgmma_tma,bm=192,w=12,bn=128,stages=3,sched=persist"
const suite_case suite_prefill_sm90[] = {
    {PRE, "fp16", 2, 17, 17, 8, 4, 128, 1, WG2, .mut = MUT_YES},
    {PRE, "fp16", 2, 17, 17, 8, 4, 128, 1, OV3, .mut = MUT_YES},
    {PRE, "bf16", 1, 63, 63, 8, 4, 128, 1, WG3},
    {PRE, "bf16", 1, 64, 64, 8, 2, 128, 1, OV3},
    {PRE, "fp16", 2, 65, 65, 8, 4, 128, 0, WG3},
    {PRE, "fp16", 2, 129, 129, 8, 4, 128, 1, OV2},
    {PRE, "bf16", 1, 1000, 1000, 8, 4, 128, 0, WG2, .mut = MUT_YES},
    {PRE, "bf16", 1, 1000, 1000, 8, 4, 128, 0, OV2, .mut = MUT_YES},
    {PRE, "bf16", 1, 1000, 1000, 8, 2, 128, 1, WG3},
    {PRE, "bf16", 1, 1000, 1000, 8, 2, 128, 1, OV3},
    {PRE, "fp16", 1, 4097, 4097, 16, 2, 128, 0, WG3, .ref = REF_NAIVE},
    {PRE, "fp16", 1, 4097, 4097, 16, 2, 128, 0, OV3, .ref = REF_NAIVE},
    {PRE, "bf16", 2, 300, 300, 8, 2, 128, 1, KV(300, 100), WG2},      /* causal, kv_len < sq: rows with no key */
    {PRE, "bf16", 2, 300, 300, 8, 2, 128, 1, KV(300, 100), OV2},
    {PRE, "fp16", 2, 300, 777, 8, 4, 128, 1, KV(777, 129), WG3},
    {PRE, "fp16", 2, 300, 777, 8, 4, 128, 1, KV(777, 129), OV3},
    {PRE, "bf16", 3, 260, 0, 8, 2, 128, 1, KV(260, 1, 129), QL(260, 129, 1), .packed_kv = 1, WG3},
    {PRE, "bf16", 3, 260, 0, 8, 2, 128, 1, KV(260, 1, 129), QL(260, 129, 1), .packed_kv = 1, OV2},
    {PRE, "bf16", 2, 200, 300, 8, 2, 128, 0, .row_pad = 2, .layout = TUNE_LAYOUT_BHSD, WG3},
    {PRE, "bf16", 2, 200, 300, 8, 2, 128, 0, .row_pad = 2, .layout = TUNE_LAYOUT_BHSD, OV3},
    {PRE, "fp16", 2, 17, 17, 8, 4, 128, 1, PP3},
    {PRE, "bf16", 1, 1000, 1000, 8, 2, 128, 1, PP3},
    {PRE, "fp16", 1, 4097, 4097, 16, 2, 128, 0, PP3, .ref = REF_NAIVE},
    {PRE, "bf16", 2, 300, 300, 8, 2, 128, 1, KV(300, 100), PP3},
    {PRE, "bf16", 3, 260, 0, 8, 2, 128, 1, KV(260, 1, 129), QL(260, 129, 1), .packed_kv = 1, PP3},
    /* head dim 64 */
    {PRE, "fp16", 2, 17, 17, 8, 4, 64, 1, WG3, .mut = MUT_YES},
    {PRE, "bf16", 1, 1000, 1000, 8, 4, 64, 1, PP3},
    {PRE, "bf16", 1, 1000, 1000, 8, 2, 64, 0, OV3},
    {PRE, "fp16", 2, 300, 777, 8, 2, 64, 1, KV(777, 129), OV3},
    {PRE, "bf16", 2, 300, 300, 8, 2, 64, 1, KV(300, 100), PP3},
    {PRE, "fp16", 1, 4097, 4097, 16, 2, 64, 1, WG3, .ref = REF_NAIVE},
    {PRE, "bf16", 2, 200, 300, 8, 2, 64, 0, .row_pad = 2, .layout = TUNE_LAYOUT_BHSD, PP3},
    /* head dim 256 (64-key blocks, 2 stages) */
    {PRE, "fp16", 2, 17, 17, 8, 4, 256, 1, .params = "impl=wgmma,bm=128,w=8,bn=64,stages=2,sched=grid", .mut = MUT_YES},
    {PRE, "bf16", 1, 1000, 1000, 8, 2, 256, 1, .params = "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 1, 1000, 1000, 8, 4, 256, 0, .params = "impl=wgmma_ov,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "fp16", 2, 300, 777, 8, 4, 256, 1, KV(777, 129), .params = "impl=wgmma_ov,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 2, 300, 300, 8, 2, 256, 1, KV(300, 100), .params = "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "fp16", 1, 4097, 4097, 16, 2, 256, 0, .params = "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid", .ref = REF_NAIVE},
    {PRE, "bf16", 3, 260, 0, 8, 2, 256, 1, KV(260, 1, 129), QL(260, 129, 1), .packed_kv = 1,
     .params = "impl=wgmma,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 2, 200, 300, 8, 2, 256, 0, .row_pad = 2, .layout = TUNE_LAYOUT_BHSD,
     .params = "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid"},
};
const int suite_prefill_sm90_n = sizeof suite_prefill_sm90 / sizeof suite_prefill_sm90[0];

/* attn_naive against the CPU fp64 reference: small cases (the naive kernel is the fast gate for big shapes) */
const suite_case suite_naive[] = {
    {.family = "attn_naive", "bf16", 2, 3, 100, 8, 2, 128, 1, KV(100, 0)},
    {.family = "attn_naive", "fp16", 1, 17, 33, 6, 2, 64, 0},
    {.family = "attn_naive", "bf16", 3, 9, 0, 4, 1, 256, 1, KV(7, 3, 20), QL(5, 0, 9), .packed_kv = 1,
     .layout = TUNE_LAYOUT_BHSD, .row_pad = 2},
    {.family = "attn_naive", "fp16", 2, 1, 500, 32, 8, 128, 0, KV(500, 1)},
    {.family = "attn_naive", "bf16", 1, 65, 200, 8, 2, 128, 1},
};
const int suite_naive_n = sizeof suite_naive / sizeof suite_naive[0];

/* attn_combine: d is dv, splits the number of partials */
const suite_case suite_combine[] = {
    {.family = "attn_combine", "bf16", 2, 3, 0, 8, 1, 128, .splits = 4},
    {.family = "attn_combine", "fp16", 1, 1, 0, 32, 1, 64, .splits = 3, .params = "rows=2,vec=2"},
    {.family = "attn_combine", "bf16", 2, 2, 0, 4, 1, 256, .splits = 16, .params = "rows=1,vec=8"},
    {.family = "attn_combine", "fp16", 1, 5, 0, 6, 1, 512, .splits = 2, .params = "rows=1,vec=4"},
};
const int suite_combine_n = sizeof suite_combine / sizeof suite_combine[0];

/*
 * The model features (issue 21). Window: smaller than a tile (5), 1, 0, >= the length; softcap with large logits
 * (scale 1: scores ~ N(0, d)); sinks with empty sequences (o 0, lse the sink); combined. Split-KV decode with sinks
 * (the combine adds the sink). Every case against the CPU fp64 reference.
 */
#define WIN(w) .window = 1, .window_left = (w)
const suite_case suite_feat[] = {
    /* sliding window, prefill (mma) */
    {PRE, "bf16", 2, 300, 300, 8, 2, 128, 1, WIN(5), .mut = MUT_YES},
    {PRE, "fp16", 2, 200, 450, 8, 4, 64, 1, KV(450, 130), WIN(1), .mut = MUT_YES},
    {PRE, "bf16", 1, 100, 100, 6, 2, 128, 1, WIN(0)},
    {PRE, "bf16", 2, 257, 257, 8, 2, 128, 1, WIN(300)},
    {PRE, "fp16", 1, 700, 900, 8, 2, 128, 1, WIN(129), .params = "impl=mma,bm=64,w=4,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 3, 200, 0, 8, 2, 64, 1, KV(300, 1, 0), QL(200, 1, 0), .packed_kv = 1, WIN(64)},
    /* sliding window, decode (split-KV: the splits cover the window only) */
    {DEC, "bf16", 3, 4, 900, 8, 2, 128, 1, KV(900, 3, 0), WIN(100), .params = "sp=1", .mut = MUT_YES},
    {DEC, "bf16", 3, 4, 900, 8, 2, 128, 1, KV(900, 3, 0), WIN(100), .params = "sp=4", .mut = MUT_YES},
    {DEC, "fp16", 2, 1, 1000, 32, 8, 128, 1, KV(1000, 1), WIN(1), .params = "sp=8"},
    {DEC, "bf16", 2, 2, 300, 8, 4, 64, 1, WIN(500), .params = "sp=2"},
    /* softcap, large logits */
    {PRE, "bf16", 2, 130, 260, 8, 2, 128, 1, .softcap = 5.0, .scale = 1.0, .mut = MUT_YES},
    {PRE, "fp16", 1, 65, 65, 8, 4, 64, 0, .softcap = 30.0, .scale = 1.0},
    /* scale 8: raw scaled logits ~ N(0, 90), the capped ones within +-5: a max taken before the cap (the mutant)
     * leaves exp(cap - max) below fp32's range, where at smaller logits the shift would cancel out */
    {DEC, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 17), .softcap = 5.0, .scale = 8.0, .params = "sp=1", .mut = MUT_YES},
    {PRE, "fp16", 1, 200, 300, 8, 2, 128, 1, .softcap = 5.0, .scale = 8.0, .params = "impl=mma,bm=128,w=8,bn=128,stages=2,sched=grid",
     .mut = MUT_YES},
    {DEC, "fp16", 2, 1, 700, 8, 2, 128, 0, KV(700, 17), .softcap = 50.0, .scale = 2.0, .params = "sp=4"},
    /* sinks, empty sequences included */
    {PRE, "bf16", 3, 100, 120, 8, 2, 128, 1, KV(120, 0, 1), .sinks = 1, .mut = MUT_YES},
    {PRE, "fp16", 2, 64, 0, 6, 2, 64, 1, KV(64, 0), QL(64, 3), .packed_kv = 1, .sinks = 1},
    {DEC, "bf16", 3, 1, 800, 8, 2, 128, 0, KV(800, 0, 5), .sinks = 1, .params = "sp=1", .mut = MUT_YES},
    {DEC, "bf16", 3, 1, 800, 8, 2, 128, 0, KV(800, 0, 5), .sinks = 1, .params = "sp=8", .mut = MUT_YES},
    {DEC, "fp16", 2, 4, 600, 64, 8, 128, 1, KV(600, 0), .sinks = 1, .params = "sp=4"},
    /* combined: gpt-oss (sinks + window 128), Gemma-2 (softcap 50 + window) */
    {PRE, "bf16", 2, 400, 500, 8, 2, 64, 1, KV(500, 401), WIN(128), .sinks = 1},
    {PRE, "bf16", 1, 300, 300, 8, 2, 128, 1, WIN(64), .softcap = 50.0, .scale = 0.5},
    {DEC, "bf16", 3, 2, 900, 8, 2, 64, 1, KV(900, 0, 1), WIN(128), .sinks = 1, .params = "sp=4", .mut = MUT_YES},
    {DEC, "fp16", 2, 1, 900, 16, 8, 128, 1, WIN(200), .softcap = 20.0, .sinks = 1, .scale = 1.0, .params = "sp=2"},
    /* the combine alone, with sinks (some rows with every split empty: o 0, lse the sink) */
    {.family = "attn_combine", "bf16", 2, 3, 0, 8, 1, 128, .splits = 4, .sinks = 1},
    {.family = "attn_combine", "fp16", 1, 2, 0, 6, 1, 64, .splits = 3, .sinks = 1, .params = "rows=2,vec=2"},
};
const int suite_feat_n = sizeof suite_feat / sizeof suite_feat[0];

/* The same on the sm_90a impls (wgmma, wgmma_ov, wgmma_pp) */
const suite_case suite_feat_sm90[] = {
    {PRE, "bf16", 2, 300, 300, 8, 2, 128, 1, WIN(5), WG2, .mut = MUT_YES},
    {PRE, "fp16", 2, 200, 450, 8, 4, 128, 1, KV(450, 130), WIN(1), OV3},
    {PRE, "bf16", 2, 257, 257, 8, 2, 128, 1, WIN(300), PP3},
    {PRE, "bf16", 1, 700, 900, 8, 2, 64, 1, WIN(129), PP3},
    {PRE, "bf16", 3, 260, 0, 8, 2, 128, 1, KV(300, 1, 0), QL(260, 1, 0), .packed_kv = 1, WIN(64), OV2},
    {PRE, "bf16", 2, 130, 260, 8, 2, 128, 1, .softcap = 5.0, .scale = 1.0, WG3},
    {PRE, "fp16", 1, 300, 300, 8, 4, 128, 0, .softcap = 30.0, .scale = 1.0, PP3},
    {PRE, "bf16", 3, 100, 120, 8, 2, 128, 1, KV(120, 0, 1), .sinks = 1, OV3, .mut = MUT_YES},
    {PRE, "bf16", 2, 400, 500, 8, 2, 64, 1, KV(500, 401), WIN(128), .sinks = 1, PP3},
    {PRE, "bf16", 1, 300, 300, 8, 2, 256, 1, WIN(64), .softcap = 50.0, .scale = 0.5,
     .params = "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 2, 300, 300, 8, 2, 256, 1, KV(300, 95), WIN(100), .softcap = 50.0, .scale = 0.5, .sinks = 1, TMA256_80},
    /* wgmma_tma's 192-row tile (three consumers, head dim 64): a window inside and across its rows, sinks over
     * ragged lengths (0 and 1 among them), softcap */
    {PRE, "bf16", 3, 400, 500, 8, 2, 64, 1, KV(500, 401, 0), WIN(100), .sinks = 1, TMA192, .mut = MUT_YES},
    /* persistent with more units than SMs (512 units of two tiles; ragged lengths): the schedule's mutants die here */
    {PRE, "bf16", 8, 1000, 1000, 8, 2, 64, 1, KV(1000, 999, 640, 1, 0, 1000, 300, 129), WIN(700), .sinks = 1, TMA3,
     .mut = MUT_YES},
    {PRE, "fp16", 2, 385, 385, 8, 4, 64, 1, KV(385, 1), .softcap = 20.0, .scale = 1.0, TMA192S3},
};
const int suite_feat_sm90_n = sizeof suite_feat_sm90 / sizeof suite_feat_sm90[0];

/*
 * FP8 (e4m3) K/V (issue 21): bytes up to +-448 (K saturates there past 2.8 sigma), per-head scales that differ
 * between neighbouring heads (tune_attn_kv_scale), 0x7f (e4m3 NaN) in every byte a kernel must not read; against the
 * CPU fp64 reference on the same dequantised values. Decode: ratios 8/2, 8/4 and 32/8, splits 1 and > 1, ragged
 * lengths with 0 and 1, paged, with a window and sinks; the mma prefill (2+ stages). The decode cases name impl=mma
 * (FP8's default is impl=direct: test_attn_gpu runs each of them again on it).
 */
#define E4M3 .kv_fp8 = 1
#define MMA8(sp) .params = "impl=mma,tm=16,w=4,bn=128,stages=2,sp=" #sp
const suite_case suite_kv8[] = {
    {DEC, "bf16", 3, 1, 700, 8, 2, 128, 0, KV(700, 0, 1), E4M3, MMA8(1), .mut = MUT_YES},
    {DEC, "bf16", 3, 1, 700, 8, 2, 128, 0, KV(700, 0, 1), E4M3, MMA8(4), .mut = MUT_YES},
    {DEC, "fp16", 3, 4, 600, 8, 4, 128, 1, KV(600, 1, 0), E4M3, MMA8(1), .mut = MUT_YES},
    {DEC, "fp16", 3, 4, 600, 8, 4, 128, 1, KV(600, 1, 0), E4M3, MMA8(8), .mut = MUT_YES},
    {DEC, "bf16", 2, 2, 900, 8, 4, 64, 1, KV(900, 333), E4M3, MMA8(2)},
    {DEC, "bf16", 2, 1, 1000, 32, 8, 128, 0, KV(1000, 17), E4M3, MMA8(1)},
    {DEC, "bf16", 2, 1, 1000, 32, 8, 128, 0, KV(1000, 17), E4M3, MMA8(16)},
    {DEC, "bf16", 2, 8, 500, 8, 2, 128, 1, KV(500, 77), E4M3, .params = "impl=mma,tm=64,w=4,bn=64,stages=3,sp=2"},
    {DEC, "bf16", 3, 1, 700, 8, 2, 128, 0, KV(700, 0, 1), E4M3, .page_size = 64, MMA8(4), .mut = MUT_YES},
    {DEC, "bf16", 2, 1, 800, 8, 2, 128, 1, KV(800, 5), WIN(128), .sinks = 1, E4M3, MMA8(4)},
    /* bf16 decode scales Q into fp16 by the CTA's largest |q| (attn/fwd.cuh, K16): q past fp16's range, and tiny
     * q near bf16's subnormals, the softmax scale keeping the logits O(1) */
    {DEC, "bf16", 2, 1, 700, 8, 2, 128, 0, KV(700, 5), E4M3, .q_amp = 1e5, .scale = 8.838834764831845e-07,
     MMA8(2), .mut = MUT_YES},
    {DEC, "bf16", 2, 4, 600, 8, 4, 64, 1, KV(600, 1), E4M3, .q_amp = 1e-30, .scale = 1.25e29, MMA8(1)},
    {PRE, "bf16", 2, 130, 300, 8, 2, 128, 1, KV(300, 64), E4M3, .params = "impl=mma,bm=64,w=4,bn=64,stages=2,sched=grid",
     .mut = MUT_YES},
    {PRE, "fp16", 1, 200, 200, 8, 4, 64, 0, E4M3, .params = "impl=mma,bm=64,w=4,bn=64,stages=3,sched=grid"},
};
const int suite_kv8_n = sizeof suite_kv8 / sizeof suite_kv8[0];

/*
 * attn_naive with the model features (issue 21), against the CPU fp64 reference: the naive kernel gates the big
 * feature shapes (sweeps/models.lua), so it is checked on them here first. Window 1, 5 and >= the length (ragged
 * lengths, packed), softcap 5 at scale 8 (raw scaled logits ~ N(0, 90)), sinks with empty sequences and rows with
 * no visible key (o 0, lse the sink), FP8 (e4m3) K/V with per-head scales != 1 (tune_attn_kv_scale; 0x7f past
 * every length) dense, paged and at head dim 256, and the features combined.
 */
#define NAIVE .family = "attn_naive"
const suite_case suite_naive_feat[] = {
    {NAIVE, "bf16", 2, 300, 300, 8, 2, 128, 1, WIN(5)},
    {NAIVE, "fp16", 2, 200, 450, 8, 4, 64, 1, KV(450, 130), WIN(1)},
    {NAIVE, "bf16", 2, 257, 257, 8, 2, 128, 1, WIN(300)},
    {NAIVE, "bf16", 3, 200, 0, 8, 2, 64, 1, KV(300, 1, 0), QL(200, 1, 0), .packed_kv = 1, WIN(64)},
    {NAIVE, "fp16", 1, 200, 300, 8, 2, 128, 1, .softcap = 5.0, .scale = 8.0},
    {NAIVE, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 17), .softcap = 5.0, .scale = 8.0},
    {NAIVE, "bf16", 3, 100, 120, 8, 2, 128, 1, KV(120, 0, 1), .sinks = 1},
    {NAIVE, "fp16", 2, 64, 0, 6, 2, 64, 1, KV(64, 0), QL(64, 3), .packed_kv = 1, .sinks = 1},
    {NAIVE, "bf16", 3, 1, 700, 8, 2, 128, 0, KV(700, 0, 1), E4M3},
    {NAIVE, "fp16", 3, 4, 600, 8, 4, 128, 1, KV(600, 1, 0), E4M3},
    {NAIVE, "bf16", 3, 1, 700, 8, 2, 128, 0, KV(700, 0, 1), E4M3, .page_size = 64},
    {NAIVE, "bf16", 2, 130, 300, 8, 2, 256, 1, KV(300, 64), E4M3},
    {NAIVE, "bf16", 2, 400, 500, 8, 2, 64, 1, KV(500, 401), WIN(128), .sinks = 1},
    {NAIVE, "fp16", 2, 1, 900, 16, 8, 128, 1, WIN(200), .softcap = 20.0, .sinks = 1, .scale = 1.0},
    {NAIVE, "bf16", 2, 1, 800, 8, 2, 128, 1, KV(800, 5), WIN(128), .sinks = 1, .softcap = 30.0, E4M3},
};
const int suite_naive_feat_n = sizeof suite_naive_feat / sizeof suite_naive_feat[0];

/*
 * Paged K/V: a shuffled pool of pages (tune_attn_case.page_size), NaN in the pages no sequence owns, in the block
 * table's spare column and past each kv_len; ragged lengths with 0 and 1; dense q (bottom-right causal, kv_len >= and
 * < sq) and packed q over the paged cache; pages of 16, 64 and 128; a [B, H, S, D] pool with padded rows; a window.
 */
#define PG(n) .page_size = (n)
const suite_case suite_paged[] = {
    {PRE, "bf16", 4, 200, 700, 8, 2, 128, 1, KV(700, 0, 1, 333), PG(16), .params = "impl=mma,bm=64,w=4,bn=64,stages=2,sched=grid",
     .mut = MUT_YES},
    {PRE, "fp16", 4, 150, 600, 8, 4, 64, 1, KV(600, 1, 0, 257), QL(150, 1, 0, 100), PG(64), .mut = MUT_YES},
    {PRE, "bf16", 2, 300, 1000, 8, 2, 128, 1, KV(1000, 129), PG(128), .params = "impl=mma,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "fp16", 2, 65, 500, 6, 2, 128, 0, KV(500, 64), PG(16), .params = "impl=mma,bm=64,w=4,bn=128,stages=3,sched=grid"},
    {PRE, "bf16", 2, 100, 300, 8, 4, 128, 1, KV(300, 100), PG(64), .layout = TUNE_LAYOUT_BHSD, .row_pad = 2,
     .params = "impl=mma,bm=64,w=4,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 2, 200, 700, 8, 2, 128, 1, KV(700, 300), PG(64), WIN(128), .params = "impl=mma,bm=64,w=4,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 1, 64, 64, 8, 2, 256, 1, PG(16), .params = "impl=mma,bm=64,w=4,bn=32,stages=2,sched=grid"},
    {DEC, "bf16", 3, 4, 700, 8, 2, 128, 1, KV(700, 0, 1), PG(16), .params = "sp=4", .mut = MUT_YES},
    {DEC, "fp16", 2, 1, 900, 32, 8, 128, 0, KV(900, 65), PG(128), .params = "sp=1"},
};
const int suite_paged_n = sizeof suite_paged / sizeof suite_paged[0];

const suite_case suite_paged_sm90[] = {
    {PRE, "bf16", 4, 200, 700, 8, 2, 128, 1, KV(700, 0, 1, 333), PG(16), WG2, .mut = MUT_YES},
    {PRE, "fp16", 4, 150, 600, 8, 4, 128, 1, KV(600, 1, 0, 257), QL(150, 1, 0, 100), PG(64), OV3, .mut = MUT_YES},
    {PRE, "bf16", 2, 300, 1000, 8, 2, 128, 1, KV(1000, 129), PG(128), PP3},
    {PRE, "bf16", 2, 300, 1000, 8, 2, 64, 1, KV(1000, 129), PG(64), WG3},
    {PRE, "fp16", 2, 130, 400, 8, 4, 128, 0, KV(400, 1), PG(16), OV2},
    {PRE, "bf16", 2, 200, 500, 8, 2, 256, 1, KV(500, 1), PG(64), .params = "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {PRE, "bf16", 2, 200, 700, 8, 2, 128, 1, KV(700, 300), PG(64), WIN(128), .sinks = 1, WG2},
    {PRE, "fp16", 2, 130, 500, 8, 2, 128, 1, KV(500, 77), PG(48), PP2},   /* no page map serves 48 */
    /* wgmma_tma by page maps (session 7): boxes of min(bn, page) rows, pages 8..256, the tail block by cp.async */
    {PRE, "bf16", 4, 200, 700, 8, 2, 128, 1, KV(700, 0, 1, 333), PG(16), TMA2, .mut = MUT_YES},
    {PRE, "fp16", 4, 150, 600, 8, 4, 128, 1, KV(600, 1, 0, 257), QL(150, 1, 0, 100), PG(64), TMA3, .mut = MUT_YES},
    {PRE, "bf16", 2, 300, 1000, 8, 2, 128, 1, KV(1000, 129), PG(256), TMA2, .mut = MUT_YES},
    {PRE, "bf16", 2, 300, 1000, 8, 2, 64, 1, KV(1000, 256), PG(128), TMA3},
    {PRE, "fp16", 2, 130, 400, 8, 4, 128, 0, KV(400, 128), PG(8), TMA2},
    {PRE, "bf16", 2, 200, 500, 8, 2, 256, 1, KV(500, 1), PG(32), TMA256},
    {PRE, "bf16", 2, 200, 520, 8, 2, 256, 0, KV(520, 192), PG(192), TMA256},
    {PRE, "bf16", 2, 200, 500, 8, 2, 256, 1, KV(500, 161), PG(16), TMA256_80},
    {PRE, "fp16", 2, 170, 400, 8, 4, 256, 1, KV(400, 81), PG(80), TMA256_80},
    {PRE, "bf16", 2, 200, 700, 8, 2, 128, 1, KV(700, 300), PG(64), WIN(128), .sinks = 1, TMA2},
    {PRE, "fp16", 2, 300, 777, 8, 8, 128, 1, KV(777, 640), PG(64), .softcap = 30.f, TMA3},
    {PRE, "bf16", 3, 200, 700, 8, 2, 64, 1, KV(700, 0, 333), PG(64), TMA192, .mut = MUT_YES},
    {PRE, "fp16", 2, 385, 1000, 8, 4, 64, 1, KV(1000, 256), PG(16), TMA192S3},
};
const int suite_paged_sm90_n = sizeof suite_paged_sm90 / sizeof suite_paged_sm90[0];

/*
 * attn_decode impl=direct (attn/decode_direct.cuh: keys as the MMA's rows, K/V loaded straight into registers),
 * besides every decode case of the other groups run again on it (test_attn_gpu): lengths on and off its 16- and
 * 32-key steps (0, 1, 15, 16, 17, 31, 33, 65, 4097) with NaN past each; 8 and 16 query columns a CTA, packed rows
 * filling 1/8 .. 16/16 of them and more rows than one CTA holds; warps with no step (short lengths, 8 warps);
 * splits up to 8 with empty ones; pages of 8, 16, 24 (a step's rows on two pages) and 64 with NaN in unused pages;
 * FP8 (32-key steps, the e4m3 MMA) and 16-bit K/V at head dims 64 and 128; Q past fp16's range and near bf16's
 * subnormals (the FP8 path scales Q into its e4m3 terms);
 * strided and packed q; window 1, 17 and 128 (not step-aligned), softcap, sinks with empty sequences.
 */
#define DD(tm, w, bn, st, sp) .params = "impl=direct,tm=" #tm ",w=" #w ",bn=" #bn ",stages=" #st ",sp=" #sp
const suite_case suite_decode_direct[] = {
    {DEC, "bf16", 4, 1, 700, 32, 8, 128, 0, KV(700, 0, 1, 17), E4M3, DD(8, 4, 32, 1, 1), .mut = MUT_YES},
    {DEC, "bf16", 4, 1, 700, 32, 8, 128, 0, KV(700, 0, 1, 17), E4M3, DD(8, 8, 32, 1, 4), .mut = MUT_YES},
    {DEC, "fp16", 3, 1, 999, 8, 2, 64, 0, KV(999, 16, 15), E4M3, DD(8, 8, 32, 1, 1)},
    {DEC, "bf16", 3, 2, 640, 8, 4, 64, 1, KV(640, 31, 33), E4M3, DD(8, 4, 32, 2, 2), .mut = MUT_YES},
    {DEC, "bf16", 2, 4, 4097, 8, 2, 128, 1, KV(4097, 65), E4M3, DD(8, 4, 32, 1, 8), .mut = MUT_YES},
    {DEC, "fp16", 2, 16, 500, 8, 8, 64, 1, KV(500, 16), E4M3, DD(16, 8, 32, 1, 1)},
    {DEC, "bf16", 2, 1, 800, 128, 8, 128, 0, KV(800, 3), E4M3, DD(8, 4, 32, 1, 2)},
    {DEC, "bf16", 2, 8, 300, 8, 2, 128, 1, KV(300, 9), E4M3, DD(8, 4, 32, 1, 1)},
    {DEC, "bf16", 2, 1, 900, 8, 2, 64, 0, KV(900, 129), E4M3, DD(16, 4, 32, 2, 2)},
    {DEC, "fp16", 2, 2, 600, 8, 2, 64, 1, KV(600, 31), E4M3, DD(8, 8, 32, 2, 1)},
    /* paged: pages of 16, 8, 24 and 64, NaN in the pages no sequence owns */
    {DEC, "bf16", 3, 1, 700, 8, 2, 128, 0, KV(700, 0, 1), E4M3, PG(16), DD(8, 4, 32, 1, 4), .mut = MUT_YES},
    {DEC, "fp16", 3, 2, 600, 8, 4, 64, 1, KV(600, 1, 255), E4M3, PG(8), DD(8, 4, 32, 2, 1)},
    {DEC, "bf16", 2, 1, 777, 32, 8, 64, 0, KV(777, 100), E4M3, PG(24), DD(8, 8, 32, 2, 2)},
    {DEC, "bf16", 2, 1, 900, 32, 8, 128, 0, KV(900, 65), PG(64), DD(8, 4, 16, 2, 1)},
    {DEC, "fp16", 3, 4, 700, 8, 2, 128, 1, KV(700, 0, 1), PG(16), DD(16, 4, 16, 1, 4), .mut = MUT_YES},
    /* Q past fp16's range and near bf16's subnormals (the FP8 path scales Q into e4m3 terms by 2^e) */
    {DEC, "bf16", 2, 1, 700, 8, 2, 128, 0, KV(700, 5), E4M3, .q_amp = 1e5, .scale = 8.838834764831845e-07,
     DD(8, 4, 32, 1, 2), .mut = MUT_YES},
    {DEC, "bf16", 2, 4, 600, 8, 4, 64, 1, KV(600, 1), E4M3, .q_amp = 1e-30, .scale = 1.25e29, DD(16, 4, 32, 1, 1)},
    /* strided views and packed q */
    {DEC, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 1), .layout = TUNE_LAYOUT_BHSD, DD(8, 4, 16, 2, 4)},
    {DEC, "fp16", 2, 4, 700, 8, 4, 128, 0, KV(650, 0), .row_pad = 2, DD(16, 4, 16, 1, 4)},
    {DEC, "bf16", 3, 2, 640, 8, 2, 128, 1, KV(640, 100, 1), QL(2, 1, 2), DD(8, 4, 16, 2, 4)},
    {DEC, "bf16", 3, 2, 640, 8, 2, 128, 1, KV(640, 100, 1), QL(2, 1, 2), E4M3, DD(8, 8, 32, 1, 1)},
    /* 16-bit K/V: ratios 1/1, 2/1 with Sq 4, 3/1 with Sq 8 (24 rows), 4/1 at head dim 64 */
    {DEC, "bf16", 4, 1, 700, 1, 1, 128, 0, KV(700, 0, 1, 333), DD(8, 4, 16, 2, 4)},
    {DEC, "fp16", 3, 4, 700, 8, 4, 128, 1, KV(700, 0, 1), DD(16, 4, 16, 1, 4), .mut = MUT_YES},
    {DEC, "fp16", 2, 8, 500, 6, 2, 128, 1, KV(500, 1), DD(8, 4, 16, 1, 2), .mut = MUT_YES},
    {DEC, "bf16", 2, 8, 500, 8, 2, 64, 0, KV(500, 77), DD(16, 8, 32, 2, 4)},
    /* the model features: window 128 / 1 / 17, softcap at large logits, sinks with empty sequences, combined */
    {DEC, "bf16", 3, 2, 900, 8, 2, 64, 1, KV(900, 0, 1), WIN(128), .sinks = 1, E4M3, DD(8, 4, 32, 2, 4),
     .mut = MUT_YES},
    {DEC, "bf16", 2, 1, 800, 8, 2, 128, 1, KV(800, 5), WIN(1), E4M3, DD(8, 4, 32, 1, 2)},
    {DEC, "fp16", 2, 4, 700, 8, 2, 128, 1, KV(700, 37), WIN(17), DD(8, 4, 16, 2, 4), .mut = MUT_YES},
    {DEC, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 17), .softcap = 5.0, .scale = 8.0, E4M3, DD(8, 4, 32, 1, 1),
     .mut = MUT_YES},
    {DEC, "bf16", 3, 1, 800, 8, 2, 128, 0, KV(800, 0, 5), .sinks = 1, E4M3, DD(8, 8, 32, 1, 8), .mut = MUT_YES},
    {DEC, "fp16", 2, 1, 900, 16, 8, 128, 1, WIN(200), .softcap = 20.0, .sinks = 1, .scale = 1.0, DD(8, 4, 16, 2, 2)},
    /* tm 4 (FP8 at bf16): Q's and P's two e4m3 terms as the MMA's columns: 4 rows in one CTA (32/8, 8/4 Sq 2), 16
     * rows in four, ragged and paged, splits, Q at both ends of its range, packed q, window + sinks, softcap */
    {DEC, "bf16", 4, 1, 700, 32, 8, 128, 0, KV(700, 0, 1, 17), E4M3, DD(4, 4, 32, 1, 1), .mut = MUT_YES},
    {DEC, "bf16", 3, 2, 640, 8, 4, 64, 1, KV(640, 31, 33), E4M3, DD(4, 8, 32, 2, 2)},
    {DEC, "bf16", 2, 4, 4097, 8, 2, 128, 1, KV(4097, 65), E4M3, DD(4, 4, 32, 1, 8)},
    {DEC, "bf16", 2, 1, 800, 128, 8, 128, 0, KV(800, 3), E4M3, DD(4, 4, 32, 1, 2)},
    {DEC, "bf16", 2, 1, 777, 32, 8, 64, 0, KV(777, 100), E4M3, PG(24), DD(4, 4, 32, 2, 2)},
    {DEC, "bf16", 2, 1, 700, 8, 2, 128, 0, KV(700, 5), E4M3, .q_amp = 1e5, .scale = 8.838834764831845e-07,
     DD(4, 4, 32, 1, 2), .mut = MUT_YES},
    {DEC, "bf16", 2, 4, 600, 8, 4, 64, 1, KV(600, 1), E4M3, .q_amp = 1e-30, .scale = 1.25e29, DD(4, 4, 32, 1, 1)},
    {DEC, "bf16", 3, 2, 640, 8, 2, 128, 1, KV(640, 100, 1), QL(2, 1, 2), E4M3, DD(4, 4, 32, 1, 1)},
    {DEC, "bf16", 3, 2, 900, 8, 2, 64, 1, KV(900, 0, 1), WIN(128), .sinks = 1, E4M3, DD(4, 4, 32, 2, 4),
     .mut = MUT_YES},
    {DEC, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 17), .softcap = 5.0, .scale = 8.0, E4M3, DD(4, 8, 32, 1, 1),
     .mut = MUT_YES},
};
const int suite_decode_direct_n = sizeof suite_decode_direct / sizeof suite_decode_direct[0];

/*
 * attn_decode impl=wg8 (attn/decode_wg8.cuh, sm_90a: FP8 K/V on wgmma e4m3, the keys as its rows, bf16 Q at head dim
 * 128), besides every FP8 case of the other groups it serves run again on it (test_attn_gpu): lengths 0, 1, 17, 63,
 * 64, 65, 4097 and 40 000 (off and on its 64- and 128-key blocks) with NaN past each; tm 4, 8 and 16 (8, 16, 32
 * wgmma columns) at ratios 8/2, 8/4, 32/8, 64/8, 128/8, rows filling part of a CTA and more rows than one holds;
 * splits up to 8 with empty ones; pages of 5, 8 (a 16-row copy round over several pages), 16, 24, 64 and 256 with
 * NaN in unused pages; Q past fp16's range and near bf16's subnormals; BHSD and row-padded views, packed q;
 * window 1, 17, 128, softcap at large logits, sinks with empty sequences.
 */
#define DW(tm, bn, st, sp) .params = "impl=wg8,tm=" #tm ",w=4,bn=" #bn ",stages=" #st ",sp=" #sp
const suite_case suite_decode_wg8[] = {
    {DEC, "bf16", 4, 1, 700, 32, 8, 128, 0, KV(700, 0, 1, 17), E4M3, DW(4, 64, 4, 1), .mut = MUT_YES},
    {DEC, "bf16", 4, 1, 700, 32, 8, 128, 0, KV(700, 0, 1, 17), E4M3, DW(4, 128, 3, 4), .mut = MUT_YES},
    {DEC, "bf16", 3, 2, 640, 8, 4, 128, 1, KV(640, 63, 65), E4M3, DW(4, 64, 3, 2), .mut = MUT_YES},
    {DEC, "bf16", 2, 4, 4097, 8, 2, 128, 1, KV(4097, 64), E4M3, DW(16, 128, 2, 8), .mut = MUT_YES},
    {DEC, "bf16", 2, 1, 800, 64, 8, 128, 0, KV(800, 3), E4M3, DW(8, 64, 4, 1)},
    {DEC, "bf16", 2, 1, 900, 128, 8, 128, 0, KV(900, 129), E4M3, DW(16, 128, 3, 2)},
    {DEC, "bf16", 2, 8, 300, 8, 2, 128, 1, KV(300, 9), E4M3, DW(4, 64, 2, 1), .mut = MUT_YES},
    {DEC, "bf16", 2, 3, 500, 8, 2, 128, 1, KV(500, 130), E4M3, DW(8, 64, 4, 2)},
    {DEC, "bf16", 1, 1, 40000, 32, 8, 128, 0, E4M3, DW(4, 128, 4, 8)},
    /* paged */
    {DEC, "bf16", 3, 1, 700, 8, 2, 128, 0, KV(700, 0, 1), E4M3, PG(16), DW(4, 64, 4, 4), .mut = MUT_YES},
    {DEC, "bf16", 3, 2, 600, 8, 4, 128, 1, KV(600, 1, 255), E4M3, PG(8), DW(8, 128, 3, 1), .mut = MUT_YES},
    {DEC, "bf16", 2, 1, 777, 32, 8, 128, 0, KV(777, 100), E4M3, PG(24), DW(4, 64, 4, 2)},
    {DEC, "bf16", 2, 1, 1000, 32, 8, 128, 0, KV(1000, 300), E4M3, PG(256), DW(4, 128, 4, 1)},
    {DEC, "bf16", 2, 2, 500, 8, 2, 128, 1, KV(500, 77), E4M3, PG(5), DW(8, 64, 2, 2)},
    {DEC, "bf16", 2, 1, 900, 32, 8, 128, 1, KV(900, 65), E4M3, PG(64), WIN(100), .sinks = 1, DW(4, 64, 3, 1)},
    /* Q at both ends of its range */
    {DEC, "bf16", 2, 1, 700, 8, 2, 128, 0, KV(700, 5), E4M3, .q_amp = 1e5, .scale = 8.838834764831845e-07,
     DW(4, 64, 4, 2), .mut = MUT_YES},
    {DEC, "bf16", 2, 4, 600, 8, 4, 128, 1, KV(600, 1), E4M3, .q_amp = 1e-30, .scale = 1.25e29, DW(16, 64, 2, 1)},
    /* strided views and packed q */
    {DEC, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 1), E4M3, .layout = TUNE_LAYOUT_BHSD, DW(8, 64, 4, 4)},
    {DEC, "bf16", 2, 4, 700, 8, 4, 128, 0, KV(650, 0), E4M3, .row_pad = 16, DW(16, 64, 4, 4)},
    {DEC, "bf16", 3, 2, 640, 8, 2, 128, 1, KV(640, 100, 1), QL(2, 1, 2), E4M3, DW(8, 64, 3, 1)},
    /* the model features */
    {DEC, "bf16", 2, 1, 800, 8, 2, 128, 1, KV(800, 5), WIN(128), .sinks = 1, E4M3, DW(4, 64, 4, 1), .mut = MUT_YES},
    {DEC, "bf16", 3, 4, 700, 8, 2, 128, 1, KV(700, 0, 33), WIN(17), .sinks = 1, E4M3, DW(16, 64, 3, 2),
     .mut = MUT_YES},
    {DEC, "bf16", 2, 2, 600, 8, 4, 128, 1, KV(600, 200), WIN(1), E4M3, DW(4, 128, 2, 1)},
    {DEC, "bf16", 2, 2, 700, 8, 2, 128, 1, KV(700, 17), .softcap = 5.0, .scale = 8.0, E4M3, DW(4, 64, 4, 1),
     .mut = MUT_YES},
    {DEC, "bf16", 3, 1, 800, 8, 2, 128, 0, KV(800, 0, 5), .sinks = 1, E4M3, DW(4, 64, 4, 8), .mut = MUT_YES},
};
const int suite_decode_wg8_n = sizeof suite_decode_wg8 / sizeof suite_decode_wg8[0];

/*
 * attn_prefill impl=wgmma_tma (issue 19; sm_90a): test_attn_gpu runs every D 64, 128 and 256 case of suite_prefill,
 * suite_prefill_sm90 and suite_feat_sm90 again with the impl swapped to wgmma_tma (same bn and stages), and these:
 * key lengths whose last block is partial, with NaN past the length (that block goes by cp.async with zero fill;
 * the map would read the NaNs: P = 0 times NaN is NaN), lengths on block edges (127..129, 255..257, 640 of a
 * 777-row cache: whole blocks, NaN right after), packed varlen whose boxes run into the next sequence, strided
 * views, GQA 8/4 and 8/2, stages 3, D 64 and 256, the model features with ragged lengths; the 192-row tile of
 * head dim 64 (bm 192: test_attn_gpu also runs every head dim 64 case of this group on it).
 */
const suite_case suite_prefill_tma[] = {
    {PRE, "bf16", 2, 300, 777, 8, 2, 128, 1, KV(777, 129), TMA2},
    {PRE, "fp16", 2, 300, 777, 8, 4, 128, 0, KV(640, 1), TMA3},
    {PRE, "bf16", 3, 129, 513, 8, 2, 128, 1, KV(127, 255, 257), TMA2},
    {PRE, "fp16", 3, 128, 300, 8, 4, 128, 1, KV(128, 256, 129), TMA3},
    {PRE, "bf16", 2, 65, 4097, 8, 2, 128, 0, KV(4097, 4000), TMA3},
    {PRE, "bf16", 4, 300, 0, 8, 2, 128, 1, KV(1, 64, 400, 0), QL(1, 17, 300, 65), .packed_kv = 1, TMA2},
    {PRE, "bf16", 3, 260, 0, 8, 4, 128, 0, KV(129, 260, 7), QL(260, 129, 1), .packed_kv = 1, TMA3},
    {PRE, "fp16", 2, 200, 300, 8, 4, 128, 1, KV(300, 150), .row_pad = 2, .layout = TUNE_LAYOUT_BHSD, TMA2},
    {PRE, "bf16", 2, 200, 333, 8, 2, 128, 0, KV(333, 200), .row_pad = 2, TMA3},
    /* head dim 64 and 256 */
    {PRE, "fp16", 2, 300, 777, 8, 2, 64, 1, KV(777, 129), TMA3},
    {PRE, "bf16", 3, 200, 0, 8, 4, 64, 1, KV(200, 63, 1), QL(200, 63, 1), .packed_kv = 1, TMA2},
    {PRE, "bf16", 2, 300, 777, 8, 4, 256, 1, KV(777, 65), TMA256},
    /* the 192-row tile (three consumers, head dim 64): query lengths on and off its rows (1, 17, 191..193, 385),
     * ratios 8/8, 8/4, 8/2 and 16/16, Sq < Skv, packed varlen with 0, strided, one long causal sequence */
    {PRE, "bf16", 2, 193, 777, 8, 2, 64, 1, KV(777, 129), TMA192},
    {PRE, "fp16", 2, 17, 17, 8, 8, 64, 1, TMA192S3},
    {PRE, "bf16", 4, 385, 0, 8, 4, 64, 1, KV(385, 192, 1, 0), QL(385, 191, 1, 0), .packed_kv = 1, TMA192S3},
    {PRE, "bf16", 2, 192, 200, 16, 16, 64, 0, KV(200, 191), TMA192},
    {PRE, "fp16", 2, 200, 333, 8, 2, 64, 1, KV(333, 200), .row_pad = 2, .layout = TUNE_LAYOUT_BHSD, TMA192},
    {PRE, "bf16", 1, 4097, 4097, 16, 2, 64, 1, TMA192S3, .ref = REF_NAIVE},
    /* head dim 256 with 80-key blocks: lengths one past a block and on two (81, 160), packed with 79, 80 and 1,
     * strided, causal 16/16 over 1000 keys */
    {PRE, "bf16", 2, 300, 777, 8, 4, 256, 1, KV(777, 81), TMA256_80},
    {PRE, "bf16", 3, 500, 640, 8, 2, 256, 1, KV(640, 0, 161), .sinks = 1, TMA256_80P},
    {PRE, "fp16", 2, 200, 300, 8, 2, 256, 0, KV(300, 160), .row_pad = 2, .layout = TUNE_LAYOUT_BHSD, TMA256_80},
    {PRE, "bf16", 3, 161, 0, 8, 4, 256, 1, KV(161, 80, 1), QL(161, 79, 1), .packed_kv = 1, TMA256_80},
    {PRE, "bf16", 1, 1000, 1000, 16, 16, 256, 1, .ref = REF_NAIVE, TMA256_80},
    /* one CTA a tile (sched grid) */
    {PRE, "bf16", 2, 300, 777, 8, 2, 128, 1, KV(777, 129), .params = "impl=wgmma_tma,bm=128,w=8,bn=128,stages=2,sched=grid"},
    {PRE, "fp16", 3, 385, 0, 8, 4, 64, 1, KV(385, 191, 0), QL(385, 191, 0), .packed_kv = 1,
     .params = "impl=wgmma_tma,bm=192,w=12,bn=128,stages=3,sched=grid"},
    {PRE, "fp16", 2, 200, 300, 8, 2, 256, 0, KV(300, 100), .row_pad = 2, .layout = TUNE_LAYOUT_BHSD, TMA256},
    /* the model features over ragged lengths */
    {PRE, "bf16", 2, 300, 450, 8, 2, 128, 1, KV(450, 130), WIN(100), TMA2},
    {PRE, "fp16", 3, 100, 120, 8, 4, 128, 1, KV(120, 0, 1), .sinks = 1, TMA3},
    {PRE, "bf16", 2, 130, 260, 8, 2, 128, 1, KV(260, 131), .softcap = 5.0, .scale = 1.0, TMA2},
};
const int suite_prefill_tma_n = sizeof suite_prefill_tma / sizeof suite_prefill_tma[0];

/* Head-mapping bugs, an off-by-one causal bound, wrong split boundaries (templates/attn/fwd.cuh). */
const suite_mutant suite_mutants[] = {
    {"kvhead (h/hkv)%hkv", "KF_MUTANT_KVHEAD", "h / KF_G", "(h / p.hkv) % p.hkv"},
    {"kvhead h/hkv", "KF_MUTANT_KVHEAD", "h / KF_G", "h / p.hkv"},
    {"kvhead h%hkv", "KF_MUTANT_KVHEAD", "h / KF_G", "h % p.hkv"},
    {"causal bound +1", "KF_MUTANT_CAUSAL", "n_kv - n_q", "n_kv - n_q + 1"},
    {"causal bound -1", "KF_MUTANT_CAUSAL", "n_kv - n_q", "n_kv - n_q - 1"},
    {"split end -1", "KF_MUTANT_SPLIT", "kbeg + bps * KF_BN)", "kbeg + bps * KF_BN - 1)"},
    {"split start overlaps", "KF_MUTANT_SPLIT", "split * bps * KF_BN,", "split * (bps - 1) * KF_BN,"},
    /* the persistent schedule of attn_prefill wgmma_tma (attn/fwd_sm90.cuh; the cases with more tiles than SMs) */
    {"persist: a unit skipped", "KF_MUTANT_SCHED", "ustep = gridDim.x;", "ustep = gridDim.x + 1;", 1},
    {"persist: a tile twice", "KF_MUTANT_SCHED2", "const int tl = tile;",
     "const int tl = tile == 2 * npair * nbh - 2 ? tile + 1 : tile;", 1},
    {"persist: wrong head", "KF_MUTANT_SCHEDHEAD", "bh - b * p.hq;", "(bh - b * p.hq) % p.hkv;", 1},
    /* the model features (issue 21): only in the sources built with them (suite_feat) */
    {"window +1", "KF_MUTANT_WINDOW", "p.window_left;", "p.window_left + 1;"},
    {"window -1", "KF_MUTANT_WINDOW", "p.window_left;", "p.window_left - 1;"},
    {"softcap after the max", "KF_MUTANT_CAPORDER", "KF_CAP_BEFORE_MAX 1", "KF_CAP_BEFORE_MAX 0"},
    {"sink in the numerator too", "KF_MUTANT_SINK", "expf(lse0 - lse)", "1.f"},
    /* FP8 K/V: the next kv head's scales (only in the sources built with kv_dtype=e4m3: suite_kv8) */
    {"fp8 scale of the next head", "KF_MUTANT_FP8HEAD", "sh8 = kvh;", "sh8 = (kvh + 1) % p.hkv;"},
    /* bf16 FP8 decode's Q scale (K16): 2^-e not undone in the score scale */
    {"q scale not undone", "KF_MUTANT_QSCALE", " * qinv", ""},
    /* paged K/V: the block-table row of the next sequence. The marker is the line's own text, the same in
     * attn/fwd.cuh and attn/fwd_sm90.cuh: a marker comment there would re-key every binary (and fwd_sm90.cuh is not
     * this change's to edit); it reaches every GQA source, and only the paged cases (suite_paged*) can see it */
    {"page of the wrong sequence", "p.block_table + (long long)b * p.bt_sb", "(long long)b * p.bt_sb",
     "(long long)((b + 1) % p.b) * p.bt_sb"},
    /* wgmma_tma's page walk (kf_sm90_pages): the next window of table entries not taken (pages of 16: four blocks
     * a window), the entry not advanced when a block's rows wrap a page longer than the block (pages of 256) */
    {"paged: window not advanced", "KF_MUTANT_PAGEWIN", "cur = nxt;", "cur = cur;", 1},
    {"paged: page row wraps in place", "KF_MUTANT_PAGEROW", "row -= ps, ++off;", "row -= ps;", 1},
};
const int suite_mutants_n = sizeof suite_mutants / sizeof suite_mutants[0];

/* ---- build side ------------------------------------------------------------------ */

int suite_open(suite *s, int have_gpu, int mutant)
{
    memset(s, 0, sizeof *s);
    s->mutant = mutant;
    s->host = gen_host_new(NULL);
    if (!s->host) {
        fprintf(stderr, "error: cannot start the template host\n");
        return -1;
    }
    gen_device dev;
    const char *arch = "sm_90a";
    rt_devinfo info;
    core_err err = CORE_ERR_INIT;
    if (have_gpu && rt_device_info(0, &info, &err) == 0) {
        rt_gen_device(&info, &dev);
        arch = dev.arch;
    } else {
        gen_device_for_arch(&dev, arch);
    }
    if (gen_target_init(&s->tg, arch, 0, &dev)) {
        fprintf(stderr, "error: unknown arch '%s'\n", arch);
        return -1;
    }
    const char *p = getenv("KFORGE_TEST_DB");
    snprintf(s->db_path, sizeof s->db_path, "%s", p && *p ? p : "test_gpu.db");
    if (db_open(&s->db, s->db_path, DB_CREATE) != DB_OK) {
        fprintf(stderr, "error: %s\n", db_errmsg(s->db));
        db_close(s->db);
        s->db = NULL;
        return -1;
    }
    return 0;
}

void suite_close(suite *s)
{
    for (int i = 0; i < s->n_jobs; i++)
        gen_job_free(&s->jobs[i]);
    free(s->jobs);
    db_close(s->db);
    gen_host_free(s->host);
    memset(s, 0, sizeof *s);
}

static int mutate(suite *s, gen_job *j, char *why, size_t whyn)
{
    const suite_mutant *m = &suite_mutants[s->mutant];
    if (!gpu_job_mutate(j, s->tg.arch, m->marker, &m->from, &m->to, 1, 8)) {
        snprintf(why, whyn, "mutant '%s' not planted: no line with %s containing '%s'", m->name, m->marker, m->from);
        return -1;
    }
    return 0;
}

static void case_shape(const suite_case *c, gen_kvset *shape)
{
    gen_kv_clear(shape);
    gen_kv_set_str(shape, "dtype", c->dtype);
    gen_kv_set_int(shape, "b", c->b);
    gen_kv_set_int(shape, "sq", c->sq);
    gen_kv_set_int(shape, "hq", c->hq);
    if (!strcmp(c->family, "attn_combine")) {
        gen_kv_set_int(shape, "dv", c->d);
        if (c->sinks)
            gen_kv_set_int(shape, "sinks", 1);
        return;
    }
    gen_kv_set_int(shape, "skv", c->skv);
    gen_kv_set_int(shape, "hkv", c->expand ? c->hq : c->hkv);
    gen_kv_set_int(shape, "d", c->d);
    gen_kv_set_int(shape, "causal", c->causal);
    if (c->window)
        gen_kv_set_int(shape, "window", c->window_left);
    if (c->softcap > 0)
        gen_kv_set_int(shape, "softcap", (long long)(c->softcap + 0.999));
    if (c->sinks)
        gen_kv_set_int(shape, "sinks", 1);
    if (c->kv_fp8)
        gen_kv_set_str(shape, "kv_dtype", "e4m3");
    if (c->page_size)   /* paged K/V, as the runtime's shape of a paged desc (wgmma_tma serves none) */
        gen_kv_set_int(shape, "page_size", c->page_size);
}

int suite_job(suite *s, const suite_case *c, int naive, char *why, size_t whyn)
{
    const char *family = naive ? "attn_naive" : c->family;
    gen_tmpl *t = gen_tmpl_load(s->host, family);
    if (!t) {
        snprintf(why, whyn, "%s", gen_host_errmsg(s->host));
        return -1;
    }
    gen_kvset shape, fixed, params;
    case_shape(c, &shape);
    if (gen_tmpl_fixed(t, &shape, &fixed) || gen_tmpl_default(t, &shape, &s->tg.dev, &params)) {
        snprintf(why, whyn, "%s", gen_host_errmsg(s->host));
        return -1;
    }
    if (c->params && !naive) {
        gen_kvset over;
        char e[256];
        gen_kv_clear(&over);
        if (gen_kv_parse(&over, c->params, e, sizeof e)) {
            snprintf(why, whyn, "bad params '%s': %s", c->params, e);
            return -1;
        }
        gen_kv_merge(&params, &over);
    }
    if (gen_tmpl_check_params(t, &params)) {
        snprintf(why, whyn, "%s", gen_host_errmsg(s->host));
        return -1;
    }
    char w[256];
    int ok = gen_tmpl_valid(t, &fixed, &params, &s->tg.dev, w, sizeof w);
    if (ok <= 0) {
        snprintf(why, whyn, "variant not valid: %s", ok < 0 ? gen_host_errmsg(s->host) : w);
        return -1;
    }
    char vkey[512];
    if (gen_variant_key(t, &fixed, &params, 0, vkey, sizeof vkey)) {
        snprintf(why, whyn, "%s", gen_host_errmsg(s->host));
        return -1;
    }
    for (int i = 0; i < s->n_jobs; i++)
        if (!strcmp(s->jobs[i].variant_key, vkey))
            return i;
    if (s->n_jobs == s->cap_jobs) {
        s->cap_jobs = s->cap_jobs ? 2 * s->cap_jobs : 64;
        s->jobs = realloc(s->jobs, sizeof *s->jobs * (size_t)s->cap_jobs);
    }
    gen_job *j = &s->jobs[s->n_jobs];
    memset(j, 0, sizeof *j);
    j->tmpl = t;
    j->fixed = fixed;
    j->params = params;
    if (gen_build_prepare(j, &s->tg)) {
        snprintf(why, whyn, "%s", gen_host_errmsg(s->host));
        gen_job_free(j);
        return -1;
    }
    int gqa = !strcmp(family, "attn_decode") || !strcmp(family, "attn_prefill");
    if (s->mutant >= 0 && gqa) {
        char w[256];
        if (mutate(s, j, w, sizeof w) == 0)
            s->planted++;
        else if (s->unplanted++ == 0)
            snprintf(s->unplanted_why, sizeof s->unplanted_why, "%s", w);
    }
    return s->n_jobs++;
}

static void progress(const gen_job *j, int done, int total, void *arg)
{
    (void)arg;
    if (j->failed)
        fprintf(stderr, "[%d/%d] FAILED %s: %s\n", done, total, j->binary_key, j->err);
    else if (!j->cache_hit)
        fprintf(stderr, "[%d/%d] compiled %s (%.0f ms)\n", done, total, j->binary_key, j->bin.ms);
}

int suite_build(suite *s)
{
    /* one compile per distinct binary; duplicates (runtime params) get a copy of the image */
    int *uniq = calloc((size_t)s->n_jobs + 1, sizeof(int)), nu = 0;
    gen_job *tmp = calloc((size_t)s->n_jobs + 1, sizeof *tmp);
    for (int i = 0; i < s->n_jobs; i++) {
        if (s->jobs[i].bin.image)
            continue;
        int dup = 0;
        for (int k = 0; k < nu && !dup; k++)
            dup = !strcmp(s->jobs[uniq[k]].cache_key, s->jobs[i].cache_key);
        if (!dup) {
            tmp[nu] = s->jobs[i];
            uniq[nu++] = i;
        }
    }
    char dberr[512] = "";
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    if (nu)
        fprintf(stderr, "resolving %d binar%s (cache %s, compiling the misses)\n", nu, nu == 1 ? "y" : "ies", s->db_path);
    int failed = nu ? gen_build_run(tmp, nu, (int)(nproc > 0 ? nproc : 1), s->db, &s->tg, progress, NULL, dberr,
                                    sizeof dberr)
                    : 0;
    if (failed < 0) {
        fprintf(stderr, "error: %s\n", dberr);
        failed = nu;
    }
    for (int k = 0; k < nu; k++) {
        gen_job *j = &s->jobs[uniq[k]];
        j->bin = tmp[k].bin;
        j->failed = tmp[k].failed;
        j->cache_hit = tmp[k].cache_hit;
        memcpy(j->err, tmp[k].err, sizeof j->err);
    }
    for (int i = 0; i < s->n_jobs; i++) {
        gen_job *j = &s->jobs[i];
        if (j->bin.image || j->failed)
            continue;
        for (int k = 0; k < nu; k++) {
            const gen_job *u = &s->jobs[uniq[k]];
            if (strcmp(u->cache_key, j->cache_key))
                continue;
            j->failed = u->failed;
            memcpy(j->err, u->err, sizeof j->err);
            if (u->bin.image) {
                j->bin.image = malloc(u->bin.size + 1);
                memcpy(j->bin.image, u->bin.image, u->bin.size);
                ((char *)j->bin.image)[u->bin.size] = 0;
                j->bin.size = u->bin.size;
                j->bin.is_ptx = u->bin.is_ptx;
            }
        }
    }
    free(uniq);
    free(tmp);
    s->failed_builds = failed;
    return failed;
}

/* ---- running ------------------------------------------------------------------ */

void suite_attn_case(const suite_case *c, tune_attn_case *tc)
{
    memset(tc, 0, sizeof *tc);
    tc->dtype = !strcmp(c->dtype, "fp16") ? CHECK_FP16 : CHECK_BF16;
    tc->b = c->b;
    tc->sq = c->sq;
    tc->skv = c->skv;
    tc->hq = c->hq;
    tc->hkv = c->hkv;
    tc->d = c->d;
    tc->causal = c->causal;
    tc->kv_len = c->kv_len_n ? c->kv_len : NULL;
    tc->q_lens = c->q_lens_n ? c->q_lens : NULL;
    tc->packed_kv = c->packed_kv;
    tc->layout = c->layout;
    tc->row_pad = c->row_pad;
    tc->expand_kv = c->expand;
    tc->window = c->window, tc->window_left = c->window_left, tc->softcap = c->softcap, tc->sinks = c->sinks;
    tc->scale = c->scale;
    tc->kv_fp8 = c->kv_fp8;
    tc->q_amp = c->q_amp;
    tc->page_size = c->page_size;
}

int suite_ref_mode(const suite_case *c)
{
    if (c->ref)
        return c->ref;
    tune_attn_case tc;
    suite_attn_case(c, &tc);
    return tune_attn_ref_work(&tc) > TUNE_ATTN_CPU_REF_MAX ? REF_NAIVE : REF_CPU;
}

void suite_case_str(const suite_case *c, char *buf, size_t n)
{
    size_t w = 0;
    w += (size_t)snprintf(buf + w, n - w, "%s b%d sq%d", c->dtype, c->b, c->sq);
    if (!strcmp(c->family, "attn_combine")) {
        snprintf(buf + w, n - w, " hq%d dv%d splits%d%s", c->hq, c->d, c->splits, c->sinks ? " sinks" : "");
        return;
    }
    w += (size_t)snprintf(buf + w, n - w, " skv%d %d/%d d%d c%d", c->skv, c->hq, c->hkv, c->d, c->causal);
    if (c->kv_len_n && w < n) {
        w += (size_t)snprintf(buf + w, n - w, " kv[");
        for (int i = 0; i < c->kv_len_n && w < n; i++)
            w += (size_t)snprintf(buf + w, n - w, "%s%d", i ? "," : "", c->kv_len[i]);
        w += (size_t)snprintf(buf + w, n - w, "]");
    }
    if (c->q_lens_n && w < n) {
        w += (size_t)snprintf(buf + w, n - w, " q[");
        for (int i = 0; i < c->q_lens_n && w < n; i++)
            w += (size_t)snprintf(buf + w, n - w, "%s%d", i ? "," : "", c->q_lens[i]);
        w += (size_t)snprintf(buf + w, n - w, "]%s", c->packed_kv ? " packed-kv" : "");
    }
    if (c->layout == TUNE_LAYOUT_BHSD && w < n)
        w += (size_t)snprintf(buf + w, n - w, " bhsd");
    if (c->row_pad > 1 && w < n)
        w += (size_t)snprintf(buf + w, n - w, " pad%d", c->row_pad);
    if (c->expand && w < n)
        w += (size_t)snprintf(buf + w, n - w, " expanded");
    if (c->window && w < n)
        w += (size_t)snprintf(buf + w, n - w, " win%d", c->window_left);
    if (c->softcap > 0 && w < n)
        w += (size_t)snprintf(buf + w, n - w, " cap%g", c->softcap);
    if (c->sinks && w < n)
        w += (size_t)snprintf(buf + w, n - w, " sinks");
    if (c->scale > 0 && w < n)
        w += (size_t)snprintf(buf + w, n - w, " scale%g", c->scale);
    if (c->kv_fp8 && w < n)
        w += (size_t)snprintf(buf + w, n - w, " e4m3");
    if (c->page_size && w < n)
        snprintf(buf + w, n - w, " page%d", c->page_size);
}

static const char *short_key(const char *key)
{
    const char *dot = key ? strchr(key, '.') : NULL;
    return dot ? dot + 1 : (key ? key : "?");
}

int suite_run_case(suite *s, tune_ctx *ctx, const suite_case *c, int quiet)
{
    char shape[256], why[2600] = "";
    suite_case_str(c, shape, sizeof shape);
    tune_attn_result r;
    memset(&r, 0, sizeof r);
    const char *vkey = "?";
    int ok = 0;
    int ji = suite_job(s, c, 0, why, sizeof why);
    int mode = suite_ref_mode(c);
    int ni = (ji >= 0 && mode == REF_NAIVE) ? suite_job(s, c, 1, why, sizeof why) : -1;
    tune_compiled v, nv;
    if (ji >= 0) {
        vkey = s->jobs[ji].variant_key;
        if (tune_compiled_from_job(&v, &s->jobs[ji]))
            snprintf(why, sizeof why, "not built: %s", s->jobs[ji].err);
        else if (mode == REF_NAIVE && (ni < 0 || tune_compiled_from_job(&nv, &s->jobs[ni])))
            snprintf(why, sizeof why, "naive reference not built%s%s", ni >= 0 ? ": " : "",
                     ni >= 0 ? s->jobs[ni].err : "");
        else if (!strcmp(c->family, "attn_combine")) {
            tune_combine_case cc = {.dtype = !strcmp(c->dtype, "fp16") ? CHECK_FP16 : CHECK_BF16,
                                    .b = c->b, .sq = c->sq, .hq = c->hq, .dv = c->d, .splits = c->splits,
                                    .sinks = c->sinks};
            int rc = tune_attn_check_combine(ctx, &v, &cc, &r);
            ok = !rc && r.pass;
            snprintf(why, sizeof why, "%s", rc ? tune_ctx_errmsg(ctx) : r.msg);
        } else {
            tune_attn_case tc;
            suite_attn_case(c, &tc);
            int rc = tune_attn_check(ctx, &v, &tc, mode == REF_NAIVE ? &nv : NULL, 0, &r, NULL);
            ok = !rc && r.pass;
            snprintf(why, sizeof why, "%s", rc ? tune_ctx_errmsg(ctx) : r.msg);
        }
    }
    if (!quiet) {
        if (r.ran)
            printf("%-12s %-58s %-44s %9.2e %9.2e %-9s %s\n", c->family, shape, short_key(vkey), r.o.rel_err,
                   r.lse.max_abs, r.ref, ok ? "pass" : "FAIL");
        else
            printf("%-12s %-58s %-44s %9s %9s %-9s %s\n", c->family, shape, short_key(vkey), "-", "-", r.ref, "FAIL");
        if (!ok)
            printf("    -> %s\n", why);
        fflush(stdout);
    }
    tune_attn_result_free(&r);
    return ok;
}
