/* tests/gpu/test_attn_gpu.c: attention kernels on the GPU against the CPU fp64 reference (and the GPU naive kernel for big shapes), plus the GQA bitwise check */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cuda.h"
#include "tests/gpu/gpu_suite.h"
#include "tuner/attn_run.h"

/*
 * Needs a GPU: prints "skipped: no CUDA device" and returns 77 without one.
 * Compiled variants are cached in $KFORGE_TEST_DB (default ./test_gpu.db, in the build folder
 * under CTest), so reruns do not call NVRTC. With KFORGE_TEST_PRECOMPILE=1 and no GPU, the
 * variants are compiled for sm_90a into that database first (then the test skips), so a GPU
 * machine with the same NVRTC finds them all in the cache.
 */

static suite g_suite;
static tune_ctx *g_ctx;
static int g_pass, g_fail;

/* Bitwise pairs: fp16 GQA on (K, V) against the same family with G = 1 on K/V expanded to hq heads,
 * same tile/split params. */
static const suite_case bitwise_cases[] = {
    {.family = "attn_decode", "fp16", 2, 4, 900, 16, 4, 128, 0, .kv_len = {900, 333}, .kv_len_n = 2,
     .params = "impl=mma,tm=16,w=4,bn=64,stages=2,sp=4"},
    {.family = "attn_decode", "fp16", 2, 2, 700, 8, 2, 64, 1, .kv_len = {700, 1}, .kv_len_n = 2,
     .params = "impl=mma,tm=16,w=4,bn=64,stages=2,sp=1"},
    {.family = "attn_decode", "fp16", 2, 8, 500, 6, 2, 128, 1, .kv_len = {500, 77}, .kv_len_n = 2,
     .params = "impl=mma,tm=32,w=4,bn=64,stages=2,sp=2"},
    {.family = "attn_prefill", "fp16", 1, 300, 300, 8, 2, 128, 1, .params = "impl=mma,bm=64,w=4,bn=64,stages=2,sched=grid"},
    {.family = "attn_prefill", "fp16", 2, 65, 200, 6, 2, 64, 0, .params = "impl=mma,bm=128,w=8,bn=64,stages=2,sched=grid"},
    {.family = "attn_prefill", "fp16", 1, 300, 300, 8, 2, 128, 1, .params = "impl=wgmma,bm=128,w=8,bn=128,stages=2,sched=grid"},
    {.family = "attn_prefill", "fp16", 2, 65, 300, 8, 4, 128, 0, .params = "impl=wgmma_ov,bm=128,w=8,bn=128,stages=3,sched=grid"},
    {.family = "attn_prefill", "fp16", 1, 200, 200, 8, 2, 128, 1, .params = "impl=wgmma_pp,bm=128,w=8,bn=128,stages=2,sched=grid"},
    {.family = "attn_prefill", "fp16", 1, 200, 200, 8, 2, 64, 1, .params = "impl=wgmma_pp,bm=128,w=8,bn=128,stages=3,sched=grid"},
    {.family = "attn_prefill", "fp16", 1, 200, 200, 8, 2, 256, 1, .params = "impl=wgmma_pp,bm=128,w=8,bn=64,stages=2,sched=grid"},
    /* paged prefill (shuffled pages; the expanded twin pages exactly alike): mma and the sm_90a impls */
    {.family = "attn_prefill", "fp16", 3, 200, 600, 8, 2, 128, 1, .kv_len = {600, 1, 0}, .kv_len_n = 3, .page_size = 64,
     .params = "impl=mma,bm=64,w=4,bn=64,stages=2,sched=grid"},
    {.family = "attn_prefill", "fp16", 2, 130, 500, 8, 4, 64, 1, .kv_len = {500, 129}, .kv_len_n = 2,
     .q_lens = {130, 17}, .q_lens_n = 2, .page_size = 16, .params = "impl=mma,bm=128,w=8,bn=64,stages=3,sched=grid"},
    {.family = "attn_prefill", "fp16", 3, 200, 600, 8, 2, 128, 1, .kv_len = {600, 1, 0}, .kv_len_n = 3, .page_size = 16,
     .params = "impl=wgmma,bm=128,w=8,bn=128,stages=2,sched=grid"},
    {.family = "attn_prefill", "fp16", 2, 300, 700, 8, 4, 128, 1, .kv_len = {700, 300}, .kv_len_n = 2, .page_size = 128,
     .params = "impl=wgmma_pp,bm=128,w=8,bn=128,stages=3,sched=grid"},
    {.family = "attn_prefill", "fp16", 2, 300, 700, 8, 2, 128, 0, .kv_len = {700, 65}, .kv_len_n = 2, .page_size = 64,
     .params = "impl=wgmma_ov,bm=128,w=8,bn=128,stages=2,sched=grid"},
    {.family = "attn_decode", "fp16", 2, 4, 900, 16, 4, 128, 0, .kv_len = {900, 333}, .kv_len_n = 2, .page_size = 64,
     .params = "impl=mma,tm=16,w=4,bn=64,stages=2,sp=4"},
    {.family = "attn_prefill", "fp16", 1, 200, 200, 8, 2, 128, 1, .params = "impl=wgmma_tma,bm=128,w=8,bn=128,stages=2"},
    /* attn_decode impl=direct: 8 query columns of 4 heads against 8 of 1 head (4 CTAs), pages, splits */
    {.family = "attn_decode", "fp16", 2, 2, 900, 16, 4, 128, 1, .kv_len = {900, 333}, .kv_len_n = 2,
     .params = "impl=direct,tm=8,w=4,bn=16,stages=2,sp=4"},
    {.family = "attn_decode", "fp16", 2, 1, 700, 8, 2, 64, 0, .kv_len = {700, 17}, .kv_len_n = 2, .page_size = 16,
     .params = "impl=direct,tm=16,w=8,bn=32,stages=1,sp=1"},
    {.family = "attn_prefill", "fp16", 2, 65, 300, 8, 4, 64, 0, .kv_len = {300, 129}, .kv_len_n = 2,
     .params = "impl=wgmma_tma,bm=128,w=8,bn=128,stages=3"},
};
#define N_BITWISE (int)(sizeof bitwise_cases / sizeof bitwise_cases[0])

/* impl=wgmma* cases run only where the target is sm_90a (they are not valid elsewhere) */
static int g_sm90;
static int is_sm90_case(const suite_case *c)
{
    return c->params && (strstr(c->params, "impl=wgmma") != NULL || strstr(c->params, "impl=wg8") != NULL);
}

/* The wgmma group: every D 64, 128 and 256 case of suite_prefill with each impl's params, then suite_prefill_sm90. */
#define MAX_WGMMA_CASES 128
static suite_case g_wgmma_cases[MAX_WGMMA_CASES];
static int g_wgmma_n;

static void build_wgmma_cases(void)
{
    g_wgmma_n = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < suite_prefill_n; i++)
            if ((suite_prefill[i].d == 64 || suite_prefill[i].d == 128 || suite_prefill[i].d == 256) &&
                g_wgmma_n < MAX_WGMMA_CASES) {
                g_wgmma_cases[g_wgmma_n] = suite_prefill[i];
                g_wgmma_cases[g_wgmma_n++].params = suite_prefill[i].d == 256 ? suite_prefill_sm90_params_d256[k]
                                                                              : suite_prefill_sm90_params[k];
            }
    for (int i = 0; i < suite_prefill_sm90_n && g_wgmma_n < MAX_WGMMA_CASES; i++)
        g_wgmma_cases[g_wgmma_n++] = suite_prefill_sm90[i];
}

/* The wgmma_tma group (issue 19): every case of the wgmma group and of suite_feat_sm90 with its impl swapped to
 * wgmma_tma (same bn and stages), then suite_prefill_tma, then each head dim 64 case of these on bm 192. */
#define MAX_TMA_CASES 256
static suite_case g_tma_cases[MAX_TMA_CASES];
static char g_tma_params[MAX_TMA_CASES][96];
static int g_tma_n;

static void add_tma_case(const suite_case *c)
{
    const char *rest = c->params ? strstr(c->params, ",bm=") : NULL;
    if (!rest || g_tma_n >= MAX_TMA_CASES)
        return;
    /* the rest with sched persist for its sched grid (the other impls' only schedule; wgmma_tma's default); a case
     * naming wgmma_tma's sched keeps it */
    const char *g = strstr(rest, ",sched=grid");
    if (g)
        snprintf(g_tma_params[g_tma_n], sizeof g_tma_params[0], "impl=wgmma_tma%.*s,sched=persist%s", (int)(g - rest),
                 rest, g + strlen(",sched=grid"));
    else
        snprintf(g_tma_params[g_tma_n], sizeof g_tma_params[0], "impl=wgmma_tma%s", rest);
    g_tma_cases[g_tma_n] = *c;
    g_tma_cases[g_tma_n].params = g_tma_params[g_tma_n];
    g_tma_cases[g_tma_n].mut = MUT_NONE;
    g_tma_n++;
}

static void build_tma_cases(void)
{
    g_tma_n = 0;
    for (int i = 0; i < g_wgmma_n; i++)   /* each suite_prefill case thrice there (one per impl): once here */
        if (i >= 2 * (g_wgmma_n - suite_prefill_sm90_n) / 3)
            add_tma_case(&g_wgmma_cases[i]);
    for (int i = 0; i < suite_feat_sm90_n; i++)
        add_tma_case(&suite_feat_sm90[i]);
    for (int i = 0; i < suite_prefill_tma_n && g_tma_n < MAX_TMA_CASES; i++)
        g_tma_cases[g_tma_n++] = suite_prefill_tma[i];
    /* head dim 64 on the 192-row tile (three consumer warpgroups): every such case above again */
    const int n = g_tma_n;
    for (int i = 0; i < n && g_tma_n < MAX_TMA_CASES; i++) {
        const char *rest = g_tma_cases[i].params ? strstr(g_tma_cases[i].params, ",bn=") : NULL;
        if (g_tma_cases[i].d != 64 || !rest || !strstr(g_tma_cases[i].params, ",bm=128,w=8,"))
            continue;
        snprintf(g_tma_params[g_tma_n], sizeof g_tma_params[0], "impl=wgmma_tma,bm=192,w=12%s", rest);
        g_tma_cases[g_tma_n] = g_tma_cases[i];
        g_tma_cases[g_tma_n].params = g_tma_params[g_tma_n];
        g_tma_n++;
    }
}

/* Case c again on impl `impl` (an impl group: its own params, no mutant runs), with c's split count and the first of
 * the nt tile params that gives a valid variant, starting at a different one for each case (*n of them so far);
 * appended to out (params text kept in params) unless max are there or no tile is valid. */
static void add_impl_case(const suite_case *c, const char *impl, const char *const *tiles, int nt, suite_case *out,
                          char (*params)[96], int *n, int max)
{
    if (*n >= max)
        return;
    const char *sp = c->params ? strstr(c->params, "sp=") : NULL;
    char spv[16] = "sp=1";
    if (sp)
        snprintf(spv, sizeof spv, "%.*s", (int)strcspn(sp, ","), sp);
    for (int k = 0; k < nt; k++) {
        char why[512];
        suite_case e = *c;
        snprintf(params[*n], 96, "impl=%s,%s,%s", impl, tiles[(*n + k) % nt], spv);
        e.params = params[*n];
        e.mut = MUT_NONE;
        if (suite_job(&g_suite, &e, 0, why, sizeof why) >= 0) {
            out[(*n)++] = e;
            return;
        }
    }
}

/* The impl=direct group: every attn_decode case of suite_decode, suite_kv8, suite_feat and suite_paged again on
 * attn/decode_direct.cuh, with its sp and the first valid of the tile params below (starting at a different one
 * for each case, so every set meets every group; head dim 256 has none and is left to mma, so has FP8 with fp16
 * Q at 128), then suite_decode_direct. */
#define MAX_DIRECT_CASES 128
static suite_case g_direct_cases[MAX_DIRECT_CASES];
static char g_direct_params[MAX_DIRECT_CASES][96];
static int g_direct_n;

static void add_direct_case(const suite_case *c)
{
    static const char *const tiles[] = {"tm=8,w=4,bn=16,stages=2", "tm=4,w=4,bn=32,stages=1",
                                        "tm=16,w=4,bn=16,stages=1", "tm=8,w=8,bn=32,stages=1",
                                        "tm=8,w=4,bn=32,stages=2", "tm=4,w=8,bn=32,stages=2",
                                        "tm=8,w=4,bn=16,stages=1", "tm=8,w=4,bn=32,stages=1",
                                        "tm=16,w=8,bn=32,stages=1"};
    if (!strcmp(c->family, "attn_decode"))
        add_impl_case(c, "direct", tiles, sizeof tiles / sizeof tiles[0], g_direct_cases, g_direct_params,
                      &g_direct_n, MAX_DIRECT_CASES);
}

static void build_direct_cases(void)
{
    const suite_case *sets[] = {suite_decode, suite_kv8, suite_feat, suite_paged};
    const int ns[] = {suite_decode_n, suite_kv8_n, suite_feat_n, suite_paged_n};
    g_direct_n = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < ns[k]; i++)
            add_direct_case(&sets[k][i]);
    for (int i = 0; i < suite_decode_direct_n && g_direct_n < MAX_DIRECT_CASES; i++)
        g_direct_cases[g_direct_n++] = suite_decode_direct[i];
}

/* The impl=wg8 group (sm_90a): every FP8 decode case of suite_kv8, suite_feat, suite_paged and suite_decode_direct
 * that it serves (bf16 Q, head dim 128) again on attn/decode_wg8.cuh, with its sp and the first valid of the tile
 * params below (starting at a different one for each case), then suite_decode_wg8. */
#define MAX_WG8_CASES 96
static suite_case g_wg8_cases[MAX_WG8_CASES];
static char g_wg8_params[MAX_WG8_CASES][96];
static int g_wg8_n;

static void add_wg8_case(const suite_case *c)
{
    static const char *const tiles[] = {"tm=4,w=4,bn=64,stages=4", "tm=8,w=4,bn=128,stages=2",
                                        "tm=16,w=4,bn=64,stages=3", "tm=4,w=4,bn=128,stages=3",
                                        "tm=8,w=4,bn=64,stages=2", "tm=16,w=4,bn=128,stages=4"};
    if (!strcmp(c->family, "attn_decode") && c->kv_fp8 && !strcmp(c->dtype, "bf16") && c->d == 128)
        add_impl_case(c, "wg8", tiles, sizeof tiles / sizeof tiles[0], g_wg8_cases, g_wg8_params, &g_wg8_n,
                      MAX_WG8_CASES);
}

static void build_wg8_cases(void)
{
    const suite_case *sets[] = {suite_kv8, suite_feat, suite_paged, suite_decode_direct};
    const int ns[] = {suite_kv8_n, suite_feat_n, suite_paged_n, suite_decode_direct_n};
    g_wg8_n = 0;
    if (!g_sm90)
        return;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < ns[k]; i++)
            add_wg8_case(&sets[k][i]);
    for (int i = 0; i < suite_decode_wg8_n && g_wg8_n < MAX_WG8_CASES; i++)
        g_wg8_cases[g_wg8_n++] = suite_decode_wg8[i];
}

static void register_jobs(const suite_case *cs, int n)
{
    char why[512];
    for (int i = 0; i < n; i++) {
        if (!g_sm90 && is_sm90_case(&cs[i]))
            continue;
        if (suite_job(&g_suite, &cs[i], 0, why, sizeof why) < 0)   /* shows again when the case runs */
            fprintf(stderr, "warning: %s: %s\n", cs[i].family, why);
        if (strcmp(cs[i].family, "attn_combine") && suite_ref_mode(&cs[i]) == REF_NAIVE)
            suite_job(&g_suite, &cs[i], 1, why, sizeof why);
        if (cs == bitwise_cases) {
            suite_case e = cs[i];
            e.expand = 1;
            suite_job(&g_suite, &e, 0, why, sizeof why);
        }
    }
}

static void header(const char *title)
{
    printf("\n== %s\n%-12s %-58s %-44s %9s %9s %-9s %s\n", title, "family", "shape", "variant", "rel_err",
           "lse_err", "ref", "result");
}

static int run_group(const suite_case *cs, int n, const char *title)
{
    header(title);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        int ok = suite_run_case(&g_suite, g_ctx, &cs[i], 0);
        ok ? g_pass++ : (g_fail++, failed++);
    }
    return failed;
}

static void test_attn_gpu__naive_matches_cpu(void **state)
{
    (void)state;
    assert_int_equal(run_group(suite_naive, suite_naive_n, "attn_naive vs CPU fp64"), 0);
}

/* The naive kernel with the model features (issue 21): the reference of the big feature shapes' gates */
static void test_attn_gpu__features_naive_matches_cpu(void **state)
{
    (void)state;
    assert_int_equal(run_group(suite_naive_feat, suite_naive_feat_n,
                               "attn_naive with window, softcap, sinks, FP8 K/V vs CPU fp64"), 0);
}

static void test_attn_gpu__decode(void **state)
{
    (void)state;
    assert_int_equal(run_group(suite_decode, suite_decode_n, "attn_decode"), 0);
}

static void test_attn_gpu__decode_direct(void **state)
{
    (void)state;
    assert_int_equal(run_group(g_direct_cases, g_direct_n,
                               "attn_decode impl=direct (keys as the MMA's rows, K/V straight to registers)"), 0);
}

static void test_attn_gpu__decode_wg8(void **state)
{
    (void)state;
    if (!g_sm90) {
        printf("\n== attn_decode impl=wg8: skipped, the target is %s, not sm_90a\n", g_suite.tg.arch);
        return;
    }
    assert_int_equal(run_group(g_wg8_cases, g_wg8_n, "attn_decode impl=wg8 (FP8 K/V on wgmma e4m3, sm_90a)"), 0);
}

static void test_attn_gpu__prefill(void **state)
{
    (void)state;
    assert_int_equal(run_group(suite_prefill, suite_prefill_n, "attn_prefill"), 0);
}

static void test_attn_gpu__prefill_wgmma(void **state)
{
    (void)state;
    if (!g_sm90) {
        printf("\n== attn_prefill impl=wgmma: skipped, the target is %s, not sm_90a\n", g_suite.tg.arch);
        return;
    }
    assert_int_equal(run_group(g_wgmma_cases, g_wgmma_n, "attn_prefill impl=wgmma, wgmma_ov, wgmma_pp (sm_90a)"), 0);
}

static void test_attn_gpu__prefill_tma(void **state)
{
    (void)state;
    if (!g_sm90) {
        printf("\n== attn_prefill impl=wgmma_tma: skipped, the target is %s, not sm_90a\n", g_suite.tg.arch);
        return;
    }
    assert_int_equal(run_group(g_tma_cases, g_tma_n, "attn_prefill impl=wgmma_tma (sm_90a, tensor maps)"), 0);
}

/* The model features (issue 21): window, softcap, sinks alone and combined, decode, prefill, combine */
static void test_attn_gpu__features(void **state)
{
    (void)state;
    int bad = run_group(suite_feat, suite_feat_n, "features (window, softcap, sinks): mma.sync, decode, combine");
    if (g_sm90)
        bad += run_group(suite_feat_sm90, suite_feat_sm90_n, "features (window, softcap, sinks): attn_prefill wgmma impls");
    else
        printf("\n== features on the wgmma impls: skipped, the target is %s, not sm_90a\n", g_suite.tg.arch);
    assert_int_equal(bad, 0);
}

/* FP8 (e4m3) K/V with per-head scales (issue 21): decode, split and not, and the mma prefill */
static void test_attn_gpu__features_fp8_kv(void **state)
{
    (void)state;
    assert_int_equal(run_group(suite_kv8, suite_kv8_n, "FP8 (e4m3) K/V, per-head scales: decode, mma prefill"), 0);
}

/* Paged K/V through a shuffled block table: prefill on mma.sync (and decode), then the sm_90a impls */
static void test_attn_gpu__features_paged(void **state)
{
    (void)state;
    int bad = run_group(suite_paged, suite_paged_n, "paged K/V (shuffled pages): attn_prefill mma.sync, attn_decode");
    if (g_sm90)
        bad += run_group(suite_paged_sm90, suite_paged_sm90_n, "paged K/V (shuffled pages): attn_prefill wgmma impls");
    else
        printf("\n== paged prefill on the wgmma impls: skipped, the target is %s, not sm_90a\n", g_suite.tg.arch);
    assert_int_equal(bad, 0);
}

static void test_attn_gpu__combine(void **state)
{
    (void)state;
    assert_int_equal(run_group(suite_combine, suite_combine_n, "attn_combine"), 0);
}

/* One side of a bitwise pair: the case run with a fixed seed, outputs kept. */
static int run_kept(const suite_case *c, uint64_t seed, tune_attn_result *r, char *why, size_t whyn,
                    const char **vkey)
{
    int ji = suite_job(&g_suite, c, 0, why, whyn);
    tune_compiled v;
    if (ji < 0)
        return -1;
    *vkey = g_suite.jobs[ji].variant_key;
    if (tune_compiled_from_job(&v, &g_suite.jobs[ji])) {
        snprintf(why, whyn, "not built: %s", g_suite.jobs[ji].err);
        return -1;
    }
    tune_attn_case tc;
    suite_attn_case(c, &tc);
    tc.seed = seed;
    tc.keep_outputs = 1;
    if (tune_attn_check(g_ctx, &v, &tc, NULL, 0, r, NULL)) {
        snprintf(why, whyn, "%s", tune_ctx_errmsg(g_ctx));
        return -1;
    }
    return 0;
}

static void test_attn_gpu__gqa_bitwise_equals_expanded(void **state)
{
    (void)state;
    header("bitwise: fp16 GQA (K,V) == G=1 on K/V expanded to hq heads (O and LSE, bit for bit)");
    int failed = 0;
    for (int i = 0; i < N_BITWISE; i++) {
        const suite_case *c = &bitwise_cases[i];
        if (!g_sm90 && is_sm90_case(c))
            continue;
        suite_case e = *c;
        e.expand = 1;
        uint64_t seed = check_fresh_seed();
        tune_attn_result a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        char why[2600] = "", shape[256];
        const char *ka = "?", *kb = "?";
        int ok = 0;
        suite_case_str(c, shape, sizeof shape);
        if (run_kept(c, seed, &a, why, sizeof why, &ka) == 0 && run_kept(&e, seed, &b, why, sizeof why, &kb) == 0) {
            size_t n = (size_t)a.rows * c->hq, no = n * (size_t)c->d, od = 0, ld = 0;
            double maxd = 0;
            const uint16_t *oa = a.o_out, *ob = b.o_out;
            for (size_t k = 0; k < no; k++)
                if (oa[k] != ob[k]) {
                    od++;
                    double d = fabs(check_load(CHECK_FP16, oa, k) - check_load(CHECK_FP16, ob, k));
                    if (d > maxd)
                        maxd = d;
                }
            for (size_t k = 0; k < n; k++)
                if (memcmp(&a.lse_out[k], &b.lse_out[k], 4))
                    ld++;
            ok = a.rows == b.rows && od == 0 && ld == 0 && a.pass && b.pass;
            snprintf(why, sizeof why,
                     "o: %zu of %zu elements differ (max |diff| %.3g); lse: %zu of %zu differ; gqa %s, expanded %s; "
                     "expanded variant %s; seed %llu",
                     od, no, maxd, ld, n, a.pass ? "pass" : "FAIL", b.pass ? "pass" : "FAIL", kb,
                     (unsigned long long)seed);
        }
        printf("%-12s %-58s %-44s %9.2e %9.2e %-9s %s\n", c->family, shape, ka, a.o.rel_err, a.lse.max_abs,
               "expanded", ok ? "pass" : "FAIL");
        printf("    -> %s\n", why);
        ok ? g_pass++ : (g_fail++, failed++);
        tune_attn_result_free(&a);
        tune_attn_result_free(&b);
    }
    assert_int_equal(failed, 0);
}

int main(void)
{
    core_err err = CORE_ERR_INIT;
    int have_gpu = rt_cuda(&err) != NULL;
    const char *pre = getenv("KFORGE_TEST_PRECOMPILE");
    if (!have_gpu && !(pre && *pre && strcmp(pre, "0"))) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    if (suite_open(&g_suite, have_gpu, -1))
        return 1;
    g_sm90 = strcmp(g_suite.tg.arch, "sm_90a") == 0;
    time_t t0 = time(NULL);
    register_jobs(suite_naive, suite_naive_n);
    register_jobs(suite_naive_feat, suite_naive_feat_n);
    register_jobs(suite_decode, suite_decode_n);
    register_jobs(suite_prefill, suite_prefill_n);
    build_direct_cases();
    register_jobs(g_direct_cases, g_direct_n);
    build_wg8_cases();
    register_jobs(g_wg8_cases, g_wg8_n);
    build_wgmma_cases();
    register_jobs(g_wgmma_cases, g_wgmma_n);
    build_tma_cases();
    register_jobs(g_tma_cases, g_tma_n);
    register_jobs(suite_combine, suite_combine_n);
    register_jobs(bitwise_cases, N_BITWISE);
    register_jobs(suite_feat, suite_feat_n);
    if (g_sm90)
        register_jobs(suite_feat_sm90, suite_feat_sm90_n);
    register_jobs(suite_kv8, suite_kv8_n);
    register_jobs(suite_paged, suite_paged_n);
    if (g_sm90)
        register_jobs(suite_paged_sm90, suite_paged_sm90_n);
    int bad = suite_build(&g_suite);
    fprintf(stderr, "%d variants ready (%d failed to build) in %ld s for %s\n", g_suite.n_jobs, bad,
            (long)(time(NULL) - t0), g_suite.tg.arch);
    if (!have_gpu) {
        suite_close(&g_suite);
        printf("skipped: no CUDA device (variants precompiled into %s)\n", getenv("KFORGE_TEST_DB") ? getenv("KFORGE_TEST_DB") : "test_gpu.db");
        return 77;
    }
    g_ctx = tune_open(0, &err);
    if (!g_ctx) {
        printf("skipped: no CUDA device (%s)\n", err.msg);
        suite_close(&g_suite);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_gpu__naive_matches_cpu),
        cmocka_unit_test(test_attn_gpu__features_naive_matches_cpu),
        cmocka_unit_test(test_attn_gpu__decode),
        cmocka_unit_test(test_attn_gpu__decode_direct),
        cmocka_unit_test(test_attn_gpu__decode_wg8),
        cmocka_unit_test(test_attn_gpu__prefill),
        cmocka_unit_test(test_attn_gpu__prefill_wgmma),
        cmocka_unit_test(test_attn_gpu__prefill_tma),
        cmocka_unit_test(test_attn_gpu__combine),
        cmocka_unit_test(test_attn_gpu__gqa_bitwise_equals_expanded),
        cmocka_unit_test(test_attn_gpu__features),
        cmocka_unit_test(test_attn_gpu__features_fp8_kv),
        cmocka_unit_test(test_attn_gpu__features_paged),
    };
    const char *only = getenv("KF_TEST_FILTER");   /* e.g. "*features*" (tests/device_feat.sh: also FP8 and paged) */
    if (only && *only)
        cmocka_set_test_filter(only);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    printf("\n%d passed, %d failed (%ld s)\n", g_pass, g_fail, (long)(time(NULL) - t0));
    tune_close(g_ctx);
    suite_close(&g_suite);
    return rc ? 1 : 0;
}
