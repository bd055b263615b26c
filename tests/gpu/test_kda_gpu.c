/* tests/gpu/test_kda_gpu.c: KDA kernels (naive, decode, prefill) on the GPU against the fp64 recurrence, plus timings */
/*
 * Needs a GPU: prints "skipped: no CUDA device" and returns 77 without one. Binaries are cached in
 * $KF_TEST_DB (default ./kda_gpu_cache.db). With KFORGE_TEST_PRECOMPILE=1 and no GPU, every valid
 * variant of the KDA families (K = V = 64 and 128) and every mutant binary is compiled for sm_90a
 * into that database first (then the test skips), so a GPU machine with the same NVRTC calls no
 * compiler.
 * Mutant mode (KF_KDA_MUTANT=m, run by tests/mutants/test_kda_mutants.c): plants mutant m (-1: none)
 * into the rendered prefill and decode sources (lines marked KF_MUTANT_*) and runs only the cases
 * of mutant_suite(); exit 0 all passed, 1 some failed, 4 not planted, 5 no mutant m.
 */
#include <setjmp.h>
#include "runtime/device.h"
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/db.h"
#include "gen/build.h"
#include "gen/template.h"
#include "runtime/cuda.h"
#include "runtime/kda_launch.h"
#include "runtime/module.h"
#include "tuner/check.h"
#include "tuner/ref_kda.h"
#include "tests/gpu/gpu_job.h"

#define TOL_O 1e-2
#define TOL_HT 5e-3

static const rt_cu *cu;
static int failures;      /* comparisons failed in the current test: every variant runs, the test fails at its end */
static gen_host *host;
static db_store *db;
static gen_target tg;
static rt_devinfo dinfo;
static int g_mutant = -1;      /* KF_KDA_MUTANT: the planted mutant, -1 none */
static int g_planted;          /* lines mutated so far */
static int g_precompile;       /* no GPU: variant_build compiles into the cache only */

/* ---- mutants: known slips planted into the rendered source, each must fail the suite ------- */

typedef struct kda_mutant {
    const char *name, *marker;
    const char *from[3], *to[3];   /* first pair that matches a marked line is applied */
} kda_mutant;

static const kda_mutant kda_mutants[] = {
    { "drop the state decay", "KF_MUTANT_NO_DECAY", { "*= dec[r]", "s0 * e;", "s0 * e[j];" }, { "*= 1.f", "s0;", "s0;" } },
    { "decay after the correction", "KF_MUTANT_DECAY_ORDER", { "DECAY_FIRST 1", NULL }, { "DECAY_FIRST 0", NULL } },
    { "beta twice", "KF_MUTANT_BETA_TWICE", { "? kf_to_float(v[", "beta * (vsm", "* bc);" },
      { "? beta[i] * kf_to_float(v[", "beta * beta * (vsm", "* bc * bc);" } },
    { "wrong chunk boundary", "KF_MUTANT_CHUNK_BOUNDARY", { "vb + ch + 1;", "vb + ch;" }, { "vb + ch + 2;", "vb + ch + 1;" } },
    { "state at the wrong segment boundary", "KF_MUTANT_SEG_BOUNDARY", { "sr = sg;", NULL }, { "sr = sg > 0 ? sg - 1 : 0;", NULL } },
    { "segment combine without the offset", "KF_MUTANT_SEG_FIXUP", { "a = cs[c * KF_PW_NT", "float a = seg[" },
      { "a = make_float4(0.f, 0.f, 0.f, 0.f); (void)cs[c * KF_PW_NT", "float a = 0.f * seg[" } },
    { "segment transition transposed (impl wgmma)", "KF_MUTANT_SEG_MT", { "KF_PF_K, kk, vv >> 3) + 2 * (vv & 7)", NULL },
      { "KF_PF_K, vv, kk >> 3) + 2 * (kk & 7)", NULL } },
    { "K/V index transposition (K-first initial state read as [V, K])", "KF_MUTANT_KV_SWAP",
      { ": (long long)kk * p.h0_sr + vv", NULL }, { ": (long long)vv * p.h0_sr + kk", NULL } },
    /* prep 1 (kda/prep_tc.cuh): T's off-diagonal blocks from L_ac instead of P_ac = D_a L_ac (chunk >= 32) */
    { "T's off-diagonal blocks without the diagonal inverse", "KF_MUTANT_TINV", { "(acc, P,", NULL }, { "(acc, Lb,", NULL } },
};
#define N_MUTANTS ((int)(sizeof kda_mutants / sizeof kda_mutants[0]))

/* Plants mutant m into j's source (prefill and decode only); returns the lines changed. */
static int mutate(gen_job *j, const char *family, int m)
{
    if (m < 0 || (strcmp(family, "kda_prefill") && strcmp(family, "kda_decode")))
        return 0;
    const kda_mutant *mu = &kda_mutants[m];
    /* nothing planted: the source stays, and the unmutated binary and key serve */
    return gpu_job_mutate(j, tg.arch, mu->marker, mu->from, mu->to, 3, 0);
}

#define CU(call) do { CUresult r_ = (call); if (r_) { char b_[128]; rt_cuda_errstr(r_, b_, sizeof b_); \
    fail_msg("%s: %s", #call, b_); } } while (0)

/* ---- variants ------------------------------------------------------------------------- */

typedef struct variant {
    gen_kvset vp;            /* fixed + params + family */
    rt_module m;
    char key[512];
} variant;

static void variant_build(variant *v, const char *family, const gen_kvset *shape, const gen_kvset *params)
{
    core_err err = CORE_ERR_INIT;
    gen_tmpl *t = gen_tmpl_load(host, family);
    if (!t)
        fail_msg("load %s: %s", family, gen_host_errmsg(host));
    gen_job j;
    memset(&j, 0, sizeof j);
    j.tmpl = t;
    if (gen_tmpl_fixed(t, shape, &j.fixed))
        fail_msg("fixed %s: %s", family, gen_host_errmsg(host));
    if (gen_tmpl_default(t, shape, &tg.dev, &j.params))   /* params given override the default's */
        fail_msg("default %s: %s", family, gen_host_errmsg(host));
    if (params)
        gen_kv_merge(&j.params, params);
    if (gen_build_prepare(&j, &tg))
        fail_msg("prepare %s: %s", family, gen_host_errmsg(host));
    g_planted += mutate(&j, family, g_mutant);
    if (gen_build_run(&j, 1, 4, db, &tg, NULL, NULL, err.msg, sizeof err.msg) != 0 || j.failed)
        fail_msg("compile %s: %s %s", j.variant_key, j.err, err.msg);
    if (g_precompile) {                       /* compiled into the cache; nothing to load */
        memset(v, 0, sizeof *v);
        snprintf(v->key, sizeof v->key, "%s", j.variant_key);
        gen_job_free(&j);
        return;
    }
    memset(v, 0, sizeof *v);
    if (gpu_job_load(&j, &v->m, &err))
        fail_msg("load %s: %s", j.variant_key, err.msg);
    snprintf(v->key, sizeof v->key, "%s", j.variant_key);
    gpu_job_vp(&j, family, &v->vp);
    gen_job_free(&j);
}

static void shape_of(gen_kvset *s, int n, int t, int h, int hv, int dk, int dv)
{
    gen_kv_clear(s);
    gen_kv_set_int(s, "n", n); gen_kv_set_int(s, "t", t); gen_kv_set_int(s, "h", h);
    gen_kv_set_int(s, "hv", hv); gen_kv_set_int(s, "dk", dk); gen_kv_set_int(s, "dv", dv);
}

typedef struct plist {
    int n;
    gen_kvset p[256];
} plist;

static int collect(const gen_kvset *params, int valid, const char *why, void *arg)
{
    plist *l = arg;
    if (valid && l->n < 256)
        l->p[l->n++] = *params;
    return 0;
}

static void all_variants(const char *family, const gen_kvset *shape, plist *l)
{
    gen_tmpl *t = gen_tmpl_load(host, family);
    gen_kvset fixed;
    assert_non_null(t);
    assert_int_equal(gen_tmpl_fixed(t, shape, &fixed), 0);
    l->n = 0;
    assert_int_equal(gen_tmpl_enumerate(t, &fixed, &tg.dev, collect, l), 0);
    assert_true(l->n > 0);
}

/* ---- device problems ------------------------------------------------------------------ */

typedef struct dprob {
    const ref_kda_host *hp;
    kf_kda_params p;         /* device pointers */
    CUdeviceptr q, k, v, g, beta, alog, dt, h0, ht, o, cu_, ws;
    size_t ws_bytes;
} dprob;

static CUdeviceptr up(const void *src, size_t bytes)
{
    CUdeviceptr d = 0;
    if (!src || !bytes)
        return 0;
    CU(cu->MemAlloc(&d, bytes + 16));
    CU(cu->MemcpyHtoD(d, src, bytes));
    return d;
}

static void dprob_make(dprob *d, const ref_kda_host *hp)
{
    memset(d, 0, sizeof *d);
    d->hp = hp;
    d->p = hp->p;
    d->q = up(hp->q, hp->nq * 2); d->k = up(hp->k, hp->nk * 2); d->v = up(hp->v, hp->nv * 2);
    d->g = up(hp->g, hp->ng * 4); d->beta = up(hp->beta, hp->nbeta * 4);
    d->alog = up(hp->a_log, hp->nalog * 4); d->dt = up(hp->dt_bias, hp->ndt * 4);
    d->h0 = up(hp->h0, hp->nh0 * 4); d->cu_ = up(hp->cu, hp->ncu_bytes);
    CU(cu->MemAlloc(&d->o, hp->no * 2 + 16));
    if (hp->nht)
        CU(cu->MemAlloc(&d->ht, hp->nht * 4 + 16));
    d->p.q = (void *)d->q; d->p.k = (void *)d->k; d->p.v = (void *)d->v;
    d->p.g = (float *)d->g; d->p.beta = (float *)d->beta;
    d->p.a_log = (float *)d->alog; d->p.dt_bias = (float *)d->dt;
    d->p.h0 = (float *)d->h0; d->p.ht = (float *)d->ht; d->p.o = (void *)d->o;
    d->p.cu_seqlens = (void *)d->cu_;
}

static void dprob_free(dprob *d)
{
    CUdeviceptr b[] = { d->q, d->k, d->v, d->g, d->beta, d->alog, d->dt, d->h0, d->ht, d->o, d->cu_, d->ws };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; ++i)
        if (b[i])
            cu->MemFree(b[i]);
    memset(d, 0, sizeof *d);
}

static void launch_only(const variant *v, dprob *d, int only);

/* Launches every kernel of v for d (no poison, no sync). */
static void launch(const variant *v, dprob *d) { launch_only(v, d, -1); }

/* Launches kernel `only` of v (every kernel when only < 0). */
static void launch_only(const variant *v, dprob *d, int only)
{
    core_err err = CORE_ERR_INIT;
    size_t ws = rt_kda_workspace_bytes(&v->vp, &d->p);
    if (ws > d->ws_bytes) {
        if (d->ws)
            cu->MemFree(d->ws);
        CU(cu->MemAlloc(&d->ws, ws));
        CU(cu->MemsetD8(d->ws, 0xFF, ws));   /* NaN: a slot read before it is written fails */
        d->ws_bytes = ws;
    }
    d->p.ws = ws ? (void *)d->ws : NULL;
    if (rt_kda_check(&v->vp, &d->p, &err))
        fail_msg("%s: refused: %s", v->key, err.msg);
    int nk = rt_kda_kernel_count(&v->vp);
    assert_int_equal(nk, v->m.n);
    for (int i = 0; i < nk; ++i) {
        unsigned grid[3];
        void *args[] = { &d->p };
        if (only >= 0 && i != only)
            continue;
        if (rt_kda_grid(&v->vp, &d->p, i, grid))
            fail_msg("%s: no grid for kernel %d", v->key, i);
        if (rt_module_launch(&v->m, i, grid, args, NULL, &err))
            fail_msg("%s: %s", v->key, err.msg);
    }
}

/* Outputs of one run, on the host: o as doubles [rows, hv, dv], ht dense K-first doubles (NaN = unwritten). */
typedef struct result {
    uint16_t *o;
    float *ht;             /* dense K-first [nseq, hv, dk, dv] */
} result;

static void run(const variant *v, dprob *d, result *r)
{
    const ref_kda_host *hp = d->hp;
    CU(cu->MemsetD8(d->o, 0xFF, hp->no * 2));
    if (d->ht)
        CU(cu->MemsetD32(d->ht, CHECK_POISON32, hp->nht));
    launch(v, d);
    CU(cu->CtxSynchronize());
    r->o = malloc(hp->no * 2 + 2);
    CU(cu->MemcpyDtoH(r->o, d->o, hp->no * 2));
    r->ht = NULL;
    if (d->ht) {
        const kf_kda_params *p = &hp->p;
        float *raw = malloc(hp->nht * 4 + 4);
        CU(cu->MemcpyDtoH(raw, d->ht, hp->nht * 4));
        size_t nd = (size_t)p->nseq * p->hv_heads * p->dk * p->dv;
        r->ht = malloc(nd * 4 + 4);
        for (int n = 0; n < p->nseq; ++n)
            for (int hv = 0; hv < p->hv_heads; ++hv)
                for (int a = 0; a < p->dk; ++a)
                    for (int c = 0; c < p->dv; ++c)
                        r->ht[(((size_t)n * p->hv_heads + hv) * p->dk + a) * p->dv + c] =
                            raw[n * p->ht_sn + hv * p->ht_sh + (p->ht_vfirst ? c * p->ht_sr + a : a * p->ht_sr + c)];
        free(raw);
    }
}

static void result_free(result *r) { free(r->o); free(r->ht); }

/* Reference outputs (fp64): from the CPU oracle, or from a verified GPU run. Heads [hv0, hv0+nhv) only. */
typedef struct refout {
    double *o, *ht;
    int hv0, nhv;
} refout;

static void ref_cpu(const ref_kda_host *hp, int hv0, int nhv, refout *r)
{
    const kf_kda_params *p = &hp->p;
    r->o = calloc(hp->no + 1, sizeof(double));
    r->ht = calloc((size_t)p->nseq * p->hv_heads * p->dk * p->dv + 1, sizeof(double));
    r->hv0 = nhv > 0 ? hv0 : 0;
    r->nhv = nhv > 0 ? nhv : p->hv_heads;
    ref_kda(p, r->hv0, r->nhv, r->o, r->ht);
}

static void ref_from(const ref_kda_host *hp, const result *g, refout *r)
{
    const kf_kda_params *p = &hp->p;
    size_t nht = (size_t)p->nseq * p->hv_heads * p->dk * p->dv;
    r->o = malloc(sizeof(double) * (hp->no + 1));
    r->ht = malloc(sizeof(double) * (nht + 1));
    for (size_t i = 0; i < hp->no; ++i)
        r->o[i] = check_bf16_to_f32(g->o[i]);
    for (size_t i = 0; i < nht && g->ht; ++i)
        r->ht[i] = g->ht[i];
    r->hv0 = 0;
    r->nhv = p->hv_heads;
}

static void refout_free(refout *r) { free(r->o); free(r->ht); }

/* Compares the heads of ref only; fails with the variant key and case name. */
static void compare(const char *what, const variant *v, const ref_kda_host *hp, const result *g, const refout *ref)
{
    const kf_kda_params *p = &hp->p;
    const long long rows = ref_kda_rows(p);
    const size_t w = (size_t)ref->nhv * p->dv, sw = (size_t)ref->nhv * p->dk * p->dv;
    uint16_t *ob = malloc(sizeof(uint16_t) * (rows * w + 1));
    double *orf = malloc(sizeof(double) * (rows * w + 1));
    for (long long r = 0; r < rows; ++r)
        for (size_t c = 0; c < w; ++c) {
            size_t src = ((size_t)r * p->hv_heads + ref->hv0) * p->dv + c;
            ob[r * w + c] = g->o[src];
            orf[r * w + c] = ref->o[src];
        }
    check_stats st;
    char line[256];
    check_compare(CHECK_BF16, ob, orf, rows * w, &st);
    check_format(line, sizeof line, &st, TOL_O);
    if (getenv("KF_TEST_VERBOSE"))
        printf("  %-34s %-64s o  %s\n", what, v->key, line);
    if (!check_pass(&st, TOL_O)) {
        printf("FAIL %s, %s: o %s\n", what, v->key, line);
        failures++;
    }
    free(ob);
    free(orf);
    if (g->ht) {
        float *hb = malloc(sizeof(float) * (p->nseq * sw + 1));
        double *hr = malloc(sizeof(double) * (p->nseq * sw + 1));
        for (int n = 0; n < p->nseq; ++n)
            for (size_t e = 0; e < sw; ++e) {
                size_t src = ((size_t)n * p->hv_heads + ref->hv0) * p->dk * p->dv + e;
                hb[n * sw + e] = g->ht[src];
                hr[n * sw + e] = ref->ht[src];
            }
        check_compare(CHECK_FP32, hb, hr, p->nseq * sw, &st);
        check_format(line, sizeof line, &st, TOL_HT);
        if (getenv("KF_TEST_VERBOSE"))
            printf("  %-34s %-64s ht %s\n", what, v->key, line);
        if (!check_pass(&st, TOL_HT)) {
            printf("FAIL %s, %s: final state %s\n", what, v->key, line);
            failures++;
        }
        free(hb);
        free(hr);
    }
}

static void check_variant(const char *what, const variant *v, dprob *d, const refout *ref)
{
    result r;
    run(v, d, &r);
    compare(what, v, d->hp, &r, ref);
    result_free(&r);
}

/* ---- cases ------------------------------------------------------------------------------ */

static ref_kda_case kcase(int nseq, const int *lens, int t, int h, int hv, int d)
{
    ref_kda_case c;
    memset(&c, 0, sizeof c);
    c.nseq = nseq; c.lens = lens; c.t = t; c.h = h; c.hv = hv; c.dk = d; c.dv = d;
    c.gate = 1; c.lower_bound = -5.0; c.l2norm = 1; c.beta_sigmoid = 1; c.h0 = 1; c.ht = 1;
    return c;
}

static const int L3[] = { 17, 0, 16 }, L1[] = { 1 }, L636465[] = { 63, 64, 65 }, L1024[] = { 1024, 0, 31 };
static const int LMIX[] = { 17, 0, 16, 63, 64, 65 };

/* Small cases every kernel must pass against the CPU oracle. */
static int small_cases(ref_kda_case *cs, int d)
{
    int n = 0;
    cs[n] = kcase(3, L3, 0, 2, 4, d); cs[n].pad_qk = 8; cs[n].ht = 2; n++;                      /* lb -5, HV = 2H */
    cs[n] = kcase(1, L1, 0, 2, 2, d); cs[n].gate = 0; cs[n].log_gate_max = 1e-3; cs[n].h0 = 2;   /* log gate ~0, V-first */
    cs[n].l2norm = 0; cs[n].beta_sigmoid = 0; n++;
    cs[n] = kcase(3, L636465, 0, 1, 2, d); cs[n].cu64 = 1; cs[n].pad_state = 4; n++;              /* int64, padded state rows */
    cs[n] = kcase(2, NULL, 40, 2, 2, d); cs[n].gate = 0; cs[n].log_gate_max = 1e-3; cs[n].h0 = 2; /* padded batch */
    cs[n].ht = 2; cs[n].pad_qk = 8; cs[n].pad_state = 8; n++;
    return n;
}

static const char *case_name(const ref_kda_case *c)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "%s%d seqs H%d HV%d d%d %s%s h0-%s ht-%s pad%d/%d",
             c->lens ? "packed " : "padded ", c->nseq, c->h, c->hv, c->dk,
             c->gate ? "lb-5" : "loggate", c->cu64 ? " cu64" : "",
             c->h0 == 2 ? "V" : c->h0 ? "K" : "0", c->ht == 2 ? "V" : c->ht ? "K" : "0", c->pad_qk, c->pad_state);
    return buf;
}

static int max_len(const ref_kda_case *c)
{
    int m = c->t;
    for (int i = 0; c->lens && i < c->nseq; ++i)
        m = c->lens[i] > m ? c->lens[i] : m;
    return m;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_kda_gpu__check_refuses_bad_arguments(void **state)
{
    (void)state;
    gen_kvset vp;
    gen_kv_clear(&vp);
    gen_kv_set_str(&vp, "family", "kda_prefill");
    gen_kv_set_int(&vp, "dk", 128); gen_kv_set_int(&vp, "dv", 128); gen_kv_set_int(&vp, "chunk", 64);
    gen_kv_set_int(&vp, "vs", 32); gen_kv_set_int(&vp, "fused", 1);
    ref_kda_host hp;
    ref_kda_case c = kcase(3, L3, 0, 2, 4, 128);
    assert_int_equal(ref_kda_host_make(&hp, &c, 1), 0);
    core_err err = CORE_ERR_INIT;
    kf_kda_params p = hp.p;
    assert_int_equal(rt_kda_check(&vp, &p, &err), 0);
    p.lower_bound = -6.0f;
    assert_int_equal(rt_kda_check(&vp, &p, &err), -1);
    assert_non_null(strstr(err.msg, "lower_bound"));
    p = hp.p;
    p.o_st = 7;
    assert_int_equal(rt_kda_check(&vp, &p, &err), -1);
    assert_non_null(strstr(err.msg, "o strides"));
    p = hp.p;
    p.hv_heads = 3;
    assert_int_equal(rt_kda_check(&vp, &p, &err), -1);
    assert_non_null(strstr(err.msg, "hv_heads"));
    ref_kda_host_free(&hp);
}

static void test_kda_gpu__naive_matches_oracle(void **state)
{
    (void)state;
    for (int d = 64; d <= 128; d += 64) {
        ref_kda_case cs[8];
        int nc = small_cases(cs, d);
        for (int i = 0; i < nc; ++i) {
            ref_kda_host hp;
            assert_int_equal(ref_kda_host_make(&hp, &cs[i], check_fresh_seed()), 0);
            gen_kvset sh;
            shape_of(&sh, cs[i].nseq, max_len(&cs[i]), cs[i].h, cs[i].hv, d, d);
            variant v;
            variant_build(&v, "kda_naive", &sh, NULL);
            dprob dp;
            dprob_make(&dp, &hp);
            refout ref;
            ref_cpu(&hp, 0, 0, &ref);
            check_variant(case_name(&cs[i]), &v, &dp, &ref);
            refout_free(&ref);
            dprob_free(&dp);
            rt_module_unload(&v.m);
            ref_kda_host_free(&hp);
        }
    }
}

/* impl wgmma variants are valid on sm_90a only: elsewhere a named one is skipped, with a line that says so. */
static int skip_off_sm90(const char *params, const char *what)
{
    if (!params || !strstr(params, "impl=wgmma") || !strcmp(tg.arch, "sm_90a"))
        return 0;
    printf("  %s: %s skipped (impl wgmma needs sm_90a, the device is %s)\n", what, params, tg.arch);
    return 1;
}

/* Every valid variant of family on every small case (and a multi-token decode case); all 0: the default and
 * every impl wgmma and impl recurrent variant (their own state passes at this head dim) only. */
static void every_variant(const char *family, int d, int all)
{
    ref_kda_case cs[8];
    int nc = small_cases(cs, d);
    cs[nc] = kcase(6, LMIX, 0, 2, 4, d); cs[nc].h0 = 2; cs[nc].ht = 1; nc++;
    if (!strcmp(family, "kda_prefill")) {      /* log gates down to -16: prep 1 takes its fp32 fallback */
        cs[nc] = kcase(3, L636465, 0, 1, 2, d); cs[nc].gate = 0; cs[nc].log_gate_max = 16; nc++;
    }
    gen_kvset sh;
    shape_of(&sh, 6, 64, 2, 4, d, d);
    plist *l = malloc(sizeof *l);
    all_variants(family, &sh, l);
    if (!all) {                                 /* the wgmma variants (kept in order), then the default */
        int m = 0;
        for (int j = 0; j < l->n; ++j) {
            const char *im = gen_kv_str(&l->p[j], "impl");
            if (im && (!strcmp(im, "wgmma") || !strcmp(im, "recurrent")))
                l->p[m++] = l->p[j];
        }
        gen_tmpl *t = gen_tmpl_load(host, family);
        assert_int_equal(gen_tmpl_default(t, &sh, &tg.dev, &l->p[m]), 0);
        l->n = m + 1;
    }
    printf("  %s d%d: %d variants x %d cases\n", family, d, l->n, nc);
    for (int i = 0; i < nc; ++i) {
        ref_kda_host hp;
        assert_int_equal(ref_kda_host_make(&hp, &cs[i], check_fresh_seed()), 0);
        dprob dp;
        dprob_make(&dp, &hp);
        refout ref;
        ref_cpu(&hp, 0, 0, &ref);
        for (int j = 0; j < l->n; ++j) {
            variant v;
            variant_build(&v, family, &sh, &l->p[j]);
            check_variant(case_name(&cs[i]), &v, &dp, &ref);
            rt_module_unload(&v.m);
        }
        refout_free(&ref);
        dprob_free(&dp);
        ref_kda_host_free(&hp);
    }
    free(l);
}

static void test_kda_gpu__decode_every_variant(void **state)
{
    (void)state;
    every_variant("kda_decode", 128, 1);
    every_variant("kda_decode", 64, 1);
    /* decode proper: 96 sequences of one token */
    int *ones = malloc(96 * sizeof(int));
    for (int i = 0; i < 96; ++i)
        ones[i] = 1;
    ref_kda_case c = kcase(96, ones, 0, 4, 8, 128);
    c.pad_state = 4;
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, &c, check_fresh_seed()), 0);
    gen_kvset sh;
    shape_of(&sh, 96, 1, 4, 8, 128, 128);
    plist *l = malloc(sizeof *l);
    all_variants("kda_decode", &sh, l);
    dprob dp;
    dprob_make(&dp, &hp);
    refout ref;
    ref_cpu(&hp, 0, 0, &ref);
    for (int j = 0; j < l->n; ++j) {
        variant v;
        variant_build(&v, "kda_decode", &sh, &l->p[j]);
        check_variant("decode 96 x 1 token", &v, &dp, &ref);
        rt_module_unload(&v.m);
    }
    refout_free(&ref);
    dprob_free(&dp);
    ref_kda_host_free(&hp);
    free(l);
    free(ones);
}

static void test_kda_gpu__prefill_every_variant(void **state)
{
    (void)state;
    every_variant("kda_prefill", 128, 1);
    every_variant("kda_prefill", 64, 0);
}

/* Longer sequences: default and a few variants against the oracle (subset of heads) or the naive kernel. */
static void long_case(const char *what, ref_kda_case *c, int cpu_heads)
{
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, c, check_fresh_seed()), 0);
    gen_kvset sh;
    shape_of(&sh, c->nseq, max_len(c), c->h, c->hv, c->dk, c->dv);
    dprob dp;
    dprob_make(&dp, &hp);
    /* naive on the GPU, verified on the first cpu_heads heads against the oracle */
    variant nv;
    variant_build(&nv, "kda_naive", &sh, NULL);
    printf("  %s: %s\n", what, nv.key);
    fflush(stdout);
    result nr;
    run(&nv, &dp, &nr);
    refout cref, nref;
    ref_cpu(&hp, 0, cpu_heads, &cref);
    compare(what, &nv, &hp, &nr, &cref);
    ref_from(&hp, &nr, &nref);
    result_free(&nr);
    rt_module_unload(&nv.m);
    /* the default prefill against the oracle heads and against naive on all heads */
    variant v;
    variant_build(&v, "kda_prefill", &sh, NULL);
    printf("  %s: %s (default)\n", what, v.key);
    fflush(stdout);                              /* the line names the variant of an illegal address */
    check_variant(what, &v, &dp, &cref);
    check_variant(what, &v, &dp, &nref);
    rt_module_unload(&v.m);
    /* every knob named: a knob left out keeps the default's value (seg 4 of the long calls, say) */
    static const char *alts[] = {
        "chunk=64,vs=32,w=4,tr=0,fused=0,mma=1,seg=1,prep=0,impl=mma", "chunk=32,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,prep=0,impl=mma",
        "chunk=16,vs=64,w=8,tr=1,fused=1,mma=1,seg=1,prep=0,impl=mma", "chunk=64,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,prep=0,impl=mma",
        "chunk=32,vs=16,w=4,tr=1,fused=0,mma=1,seg=4,prep=0,impl=mma", "chunk=64,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,prep=0,impl=mma",
        "chunk=16,vs=16,w=8,tr=1,fused=0,mma=1,seg=4,prep=0,impl=mma",
        "chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,prep=1,impl=mma", "chunk=32,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,prep=1,impl=mma",
        "chunk=64,vs=32,w=4,tr=0,fused=0,mma=1,seg=1,prep=1,impl=mma", "chunk=16,vs=64,w=8,tr=1,fused=1,mma=1,seg=1,prep=1,impl=mma",
        "chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,prep=0,impl=wgmma", "chunk=64,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,prep=0,impl=wgmma",
        "chunk=32,vs=128,w=8,tr=1,fused=0,mma=1,seg=4,prep=0,impl=wgmma", "chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=4,prep=0,impl=wgmma",
        "chunk=32,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,prep=1,impl=wgmma",
        /* the segment combine on wgmma (kda/prefill_sm90.cuh) at 2, 8 and 16 segments */
        "chunk=32,vs=64,w=8,tr=1,fused=0,mma=1,seg=8,prep=1,impl=wgmma", "chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=2,prep=1,impl=wgmma",
        "chunk=64,vs=64,w=8,tr=1,fused=0,mma=1,seg=16,prep=1,impl=wgmma"
    };
    for (size_t i = 0; i < sizeof alts / sizeof alts[0]; ++i) {
        gen_kvset pp;
        char err[128];
        if (skip_off_sm90(alts[i], what))
            continue;
        gen_kv_clear(&pp);
        assert_int_equal(gen_kv_parse(&pp, alts[i], err, sizeof err), 0);
        variant_build(&v, "kda_prefill", &sh, &pp);
        printf("  %s: %s\n", what, v.key);
        fflush(stdout);
        check_variant(what, &v, &dp, &nref);
        rt_module_unload(&v.m);
    }
    refout_free(&cref);
    refout_free(&nref);
    dprob_free(&dp);
    ref_kda_host_free(&hp);
}

static void test_kda_gpu__prefill_long_sequences(void **state)
{
    (void)state;
    ref_kda_case c = kcase(3, L1024, 0, 2, 4, 128);
    c.ht = 2; c.pad_qk = 8;
    long_case("[1024,0,31] lb -5", &c, 0);
    c = kcase(3, L1024, 0, 2, 2, 128);
    c.gate = 0; c.log_gate_max = 1e-3; c.h0 = 2; c.pad_state = 4;
    long_case("[1024,0,31] log gate ~0 V-first", &c, 0);
    int l8[8];
    for (int i = 0; i < 8; ++i)
        l8[i] = 2048;
    c = kcase(8, l8, 0, 2, 4, 128);
    long_case("8 x 2048 lb -5", &c, 1);
    c = kcase(1, NULL, 8192, 4, 4, 128);
    c.gate = 0; c.log_gate_max = 1e-3;
    long_case("1 x 8192 padded log gate ~0", &c, 1);
    /* one long sequence, HV = 4H (N HV < 32: the segment scan's case, among the alternatives); fp64 oracle on one head */
    static const int L16K[] = { 16384 + 31 };
    c = kcase(1, L16K, 0, 1, 4, 128);
    c.pad_qk = 8;
    long_case("[16415] H1 HV4 lb -5", &c, 1);
}

/* ---- timing ----------------------------------------------------------------------------- */

static double time_ms_only(const variant *v, dprob *d, int iters, int only);
static double time_ms(const variant *v, dprob *d, int iters) { return time_ms_only(v, d, iters, -1); }

/* Median of iters timed launches of kernel `only` of v (all kernels when only < 0). */
static double time_ms_only(const variant *v, dprob *d, int iters, int only)
{
    CUevent e0, e1;
    double t[64];
    CU(cu->EventCreate(&e0, 0));
    CU(cu->EventCreate(&e1, 0));
    launch_only(v, d, only);
    launch_only(v, d, only);
    CU(cu->CtxSynchronize());
    if (iters > 64)
        iters = 64;
    for (int i = 0; i < iters; ++i) {
        float ms;
        CU(cu->EventRecord(e0, NULL));
        launch_only(v, d, only);
        CU(cu->EventRecord(e1, NULL));
        CU(cu->EventSynchronize(e1));
        CU(cu->EventElapsedTime(&ms, e0, e1));
        t[i] = ms;
    }
    for (int i = 1; i < iters; ++i)      /* median */
        for (int j = i; j > 0 && t[j] < t[j - 1]; --j) {
            double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x;
        }
    cu->EventDestroy(e0);
    cu->EventDestroy(e1);
    return t[iters / 2];
}

static void time_prefill(const char *what, ref_kda_case *c, const char *const *alts, int nalts)
{
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, c, check_fresh_seed()), 0);
    gen_kvset sh;
    shape_of(&sh, c->nseq, max_len(c), c->h, c->hv, c->dk, c->dv);
    dprob dp;
    dprob_make(&dp, &hp);
    for (int i = -1; i < nalts; ++i) {
        variant v;
        gen_kvset pp;
        char err[128];
        gen_kv_clear(&pp);
        if (i >= 0 && skip_off_sm90(alts[i], what))
            continue;
        if (i >= 0)
            assert_int_equal(gen_kv_parse(&pp, alts[i], err, sizeof err), 0);
        variant_build(&v, "kda_prefill", &sh, i >= 0 ? &pp : NULL);
        double ms = time_ms(&v, &dp, 20);
        printf("  time %-28s %-66s %9.4f ms  ws %zu MB", what, v.key, ms, rt_kda_workspace_bytes(&v.vp, &dp.p) >> 20);
        for (int k = 0; k < v.m.n && v.m.n > 1; ++k)      /* where the time goes: each kernel alone */
            printf("  k%d %.4f", k, time_ms_only(&v, &dp, 10, k));
        printf("\n");
        rt_module_unload(&v.m);
    }
    dprob_free(&dp);
    ref_kda_host_free(&hp);
}

static void test_kda_gpu__prefill_timings(void **state)
{
    (void)state;
    printf("  device %s, %d SMs\n", dinfo.name, dinfo.sms);
    /* each alternative names impl and prep: the rest of its parameters come from the shape's default */
    static const char *alts[] = {
        "chunk=64,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=64,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=32,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=64,vs=32,w=4,tr=0,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=64,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=16,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=32,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=32,vs=16,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma,prep=0",
        "chunk=64,vs=16,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma,prep=0",
        "chunk=64,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma,prep=0",
        "chunk=16,vs=16,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma,prep=0",
        "chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,prep=1,impl=mma",
        "chunk=16,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,prep=1,impl=mma",
        "chunk=32,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,prep=1,impl=mma",
        "chunk=64,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,prep=1,impl=mma",
        /* impl wgmma (the state pass on sm_90a; unmeasured when written), alone and with prep 1 */
        "chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma,prep=0",
        "chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma,prep=0",
        "chunk=32,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma,prep=0",
        "chunk=64,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma,prep=0",
        "chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=4,impl=wgmma,prep=0",
        "chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=4,impl=wgmma,prep=0",
        "chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=4,prep=1,impl=wgmma"
    };
    ref_kda_case c = kcase(1, NULL, 8192, 16, 16, 128);
    time_prefill("T8192 H16 (target 0.25)", &c, alts, (int)(sizeof alts / sizeof alts[0]));
    static const char *alts64[] = {
        "chunk=64,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=64,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=32,vs=16,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=64,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma,prep=0",
        "chunk=32,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma,prep=0",
        "chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,prep=1,impl=mma",
        "chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma,prep=0",
        "chunk=64,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma,prep=0",
        "chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,prep=1,impl=wgmma"
    };
    c = kcase(1, NULL, 8192, 64, 64, 128);
    time_prefill("T8192 H64 (target 0.9)", &c, alts64, (int)(sizeof alts64 / sizeof alts64[0]));
    static const char *small[] = {
        "chunk=16,vs=32,w=4,tr=1,fused=1,mma=1,seg=1,impl=mma,prep=0",
        "chunk=16,vs=16,w=4,tr=1,fused=1,mma=1,seg=1,impl=mma,prep=0",
        "chunk=32,vs=32,w=4,tr=1,fused=1,mma=1,seg=1,impl=mma,prep=0",
        "chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma,prep=0",
        "chunk=16,vs=64,w=8,tr=1,fused=1,mma=1,seg=1,impl=mma,prep=0",
        "chunk=32,vs=64,w=8,tr=1,fused=1,mma=1,seg=1,impl=mma,prep=0",
        "chunk=16,vs=32,w=4,tr=1,fused=1,mma=1,seg=1,prep=1,impl=mma",
        "chunk=16,vs=32,w=8,tr=1,fused=0,mma=1,seg=1,prep=1,impl=mma"
    };
    c = kcase(3, L3, 0, 2, 2, 128);
    time_prefill("[17,0,16] H2 (target 0.015)", &c, small, (int)(sizeof small / sizeof small[0]));
}

static void test_kda_gpu__decode_timings(void **state)
{
    (void)state;
    ref_kda_case c;
    /* decode: N = 128, H = 32, one token, K-first state in and out */
    int *ones = malloc(128 * sizeof(int));
    for (int i = 0; i < 128; ++i)
        ones[i] = 1;
    c = kcase(128, ones, 0, 32, 32, 128);
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, &c, check_fresh_seed()), 0);
    gen_kvset sh;
    shape_of(&sh, 128, 1, 32, 32, 128, 128);
    plist *l = malloc(sizeof *l);
    all_variants("kda_decode", &sh, l);
    dprob dp;
    dprob_make(&dp, &hp);
    for (int j = 0; j < l->n; ++j) {
        variant v;
        variant_build(&v, "kda_decode", &sh, &l->p[j]);
        double ms = time_ms(&v, &dp, 30);
        double bytes = 2.0 * 128 * 32 * 128 * 128 * 4;
        printf("  time decode N128 H32 %-60s %8.4f ms  %.2f TB/s state\n", v.key, ms, bytes / (ms * 1e-3) / 1e12);
        rt_module_unload(&v.m);
    }
    dprob_free(&dp);
    ref_kda_host_free(&hp);
    free(l);
    free(ones);
}

/* ---- mutant suite and precompile ----------------------------------------------------------- */

/* The variants the mutant suite runs (shape of every_variant; each names its impl, or it inherits the default's:
 * on sm_90a that is wgmma since session 11, and a vs 32 variant on it is invalid): the default and both paths,
 * both state layouts, every chunk size, both preparations (prep 1 at chunk 32: T has an off-diagonal
 * block), the state pass impls (wgmma with and without segments; the token recurrence in batches); decode default
 * and sliced ones. */
static const char *const mut_prefill[] = {
    NULL, "chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma", "chunk=32,vs=16,w=4,tr=0,fused=0,mma=1,seg=1,impl=mma",
    "chunk=64,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,impl=mma", "chunk=16,vs=32,w=4,tr=0,fused=1,mma=1,seg=1,impl=mma",
    "chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma", "chunk=32,vs=32,w=4,tr=1,fused=0,mma=1,seg=1,prep=1,impl=mma",
    "chunk=16,vs=32,w=4,tr=1,fused=1,mma=1,seg=1,prep=1,impl=mma",
    "chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma", "chunk=32,vs=128,w=8,tr=1,fused=0,mma=1,seg=4,impl=wgmma",
    "chunk=16,vs=32,w=8,tr=1,fused=1,mma=1,seg=1,prep=0,impl=recurrent" };
static const char *const mut_decode[] = { NULL, "vsplit=2,w=4,ipc=1,ws=0", "vsplit=2,w=4,ipc=4,ws=0",
                                          "vsplit=2,w=8,ipc=4,ws=1", "vsplit=8,w=4,ipc=1,ws=1" };
#define N_MUT_PREFILL ((int)(sizeof mut_prefill / sizeof mut_prefill[0]))
#define N_MUT_DECODE ((int)(sizeof mut_decode / sizeof mut_decode[0]))

/* Builds mutant variant k; returns 0 when it is not valid on this device (skipped, said so). */
static int mut_variant(variant *v, int k, const gen_kvset *sh)
{
    const char *family = k < N_MUT_PREFILL ? "kda_prefill" : "kda_decode";
    const char *pp = k < N_MUT_PREFILL ? mut_prefill[k] : mut_decode[k - N_MUT_PREFILL];
    gen_kvset ps;
    char err[128];
    if (skip_off_sm90(pp, "mutant suite"))
        return 0;
    gen_kv_clear(&ps);
    if (pp && gen_kv_parse(&ps, pp, err, sizeof err))
        fail_msg("bad params '%s': %s", pp, err);
    variant_build(v, family, sh, pp ? &ps : NULL);
    return 1;
}

/* Small cases x the mutant variants against the oracle; returns the exit code of mutant mode. */
static int mutant_suite(void)
{
    ref_kda_case cs[8];
    int nc = small_cases(cs, 128);
    cs[nc] = kcase(6, LMIX, 0, 2, 4, 128); cs[nc].h0 = 2; cs[nc].ht = 1; nc++;
    gen_kvset sh;
    shape_of(&sh, 6, 64, 2, 4, 128, 128);
    const int nv = N_MUT_PREFILL + N_MUT_DECODE;
    variant *vs = calloc(nv, sizeof *vs);
    int *built = calloc(nv, sizeof *built);
    for (int k = 0; k < nv; ++k)
        built[k] = mut_variant(&vs[k], k, &sh);
    if (g_mutant >= 0)
        printf("    mutant '%s': %d lines planted\n", kda_mutants[g_mutant].name, g_planted);
    if (g_mutant >= 0 && !g_planted)
        return 4;
    failures = 0;
    for (int i = 0; i < nc; ++i) {
        ref_kda_host hp;
        if (ref_kda_host_make(&hp, &cs[i], check_fresh_seed()))
            return 3;
        dprob dp;
        dprob_make(&dp, &hp);
        refout ref;
        ref_cpu(&hp, 0, 0, &ref);
        for (int k = 0; k < nv; ++k)
            if (built[k])
                check_variant(case_name(&cs[i]), &vs[k], &dp, &ref);
        refout_free(&ref);
        dprob_free(&dp);
        ref_kda_host_free(&hp);
    }
    for (int k = 0; k < nv; ++k)
        if (built[k])
            rt_module_unload(&vs[k].m);
    free(vs);
    free(built);
    printf("    %d comparison(s) failed\n", failures);
    return failures ? 1 : 0;
}

typedef struct joblist {
    gen_job *j;
    int n, cap;
} joblist;

static void add_job(joblist *l, const char *family, const gen_kvset *shape, const gen_kvset *params, int m)
{
    gen_tmpl *t = gen_tmpl_load(host, family);
    if (!t)
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->j = realloc(l->j, sizeof *l->j * (size_t)l->cap);
    }
    gen_job *j = &l->j[l->n];
    memset(j, 0, sizeof *j);
    j->tmpl = t;
    if (gen_tmpl_fixed(t, shape, &j->fixed))
        return;
    if (gen_tmpl_default(t, shape, &tg.dev, &j->params))
        return;
    if (params)
        gen_kv_merge(&j->params, params);
    if (gen_build_prepare(j, &tg)) {
        gen_job_free(j);
        return;
    }
    if (m >= 0 && !mutate(j, family, m)) {    /* nothing planted: the unmutated binary serves */
        gen_job_free(j);
        return;
    }
    l->n++;
}

/* No GPU, KFORGE_TEST_PRECOMPILE=1: every binary the suite and the mutant runs load, into db. */
static int precompile(void)
{
    joblist l = { 0 };
    const char *fams[] = { "kda_prefill", "kda_decode", "kda_naive" };
    for (int f = 0; f < 3; ++f)
        for (int d = 64; d <= 128; d += 64) {
            gen_kvset sh;
            shape_of(&sh, 6, 64, 2, 4, d, d);
            gen_tmpl *t = gen_tmpl_load(host, fams[f]);
            gen_kvset fixed;
            plist *pl = malloc(sizeof *pl);
            pl->n = 0;
            if (t && !gen_tmpl_fixed(t, &sh, &fixed))
                gen_tmpl_enumerate(t, &fixed, &tg.dev, collect, pl);
            for (int i = 0; i < pl->n; ++i)
                add_job(&l, fams[f], &sh, &pl->p[i], -1);
            free(pl);
        }
    gen_kvset sh;
    shape_of(&sh, 6, 64, 2, 4, 128, 128);
    for (int m = 0; m < N_MUTANTS; ++m)
        for (int k = 0; k < N_MUT_PREFILL + N_MUT_DECODE; ++k) {
            const char *family = k < N_MUT_PREFILL ? "kda_prefill" : "kda_decode";
            const char *pp = k < N_MUT_PREFILL ? mut_prefill[k] : mut_decode[k - N_MUT_PREFILL];
            gen_kvset ps;
            char err[128];
            gen_kv_clear(&ps);
            if (pp && gen_kv_parse(&ps, pp, err, sizeof err))
                continue;
            add_job(&l, family, &sh, pp ? &ps : NULL, m);
        }
    char err[512];
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    int failed = gen_build_run(l.j, l.n, threads > 0 ? (int)threads : 2, db, &tg, NULL, NULL, err, sizeof err);
    int hits = 0;
    for (int i = 0; i < l.n; ++i) {
        if (l.j[i].failed)
            fprintf(stderr, "FAILED %s: %s\n", l.j[i].variant_key, l.j[i].err);
        hits += l.j[i].cache_hit;
        gen_job_free(&l.j[i]);
    }
    printf("precompiled %d binaries for %s (%d already cached, %d failed)\n", l.n, tg.arch, hits, failed);
    free(l.j);
    return failed ? 1 : 0;
}

static int reset_failures(void **state) { (void)state; failures = 0; return 0; }
static int check_failures(void **state)
{
    (void)state;
    if (failures) {
        printf("%d comparison(s) failed\n", failures);
        return -1;
    }
    return 0;
}

int main(void)
{
    core_err err = CORE_ERR_INIT;
    const char *mut = getenv("KF_KDA_MUTANT"), *pre = getenv("KFORGE_TEST_PRECOMPILE");
    if (mut && *mut) {
        g_mutant = atoi(mut);
        if (g_mutant >= N_MUTANTS)
            return 5;
    }
    cu = rt_cuda(&err);
    int ndev = 0;
    int have_gpu = cu && !cu->DeviceGetCount(&ndev) && ndev >= 1;
    g_precompile = !have_gpu && pre && *pre && strcmp(pre, "0");
    if (!have_gpu && !g_precompile) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    if (have_gpu && (rt_module_context(0, &err) || rt_device_info(0, &dinfo, &err))) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    const char *src = getenv("KFORGE_SOURCE_DIR");
    char tdir[1024];
    snprintf(tdir, sizeof tdir, "%s/templates", src ? src : ".");
    host = gen_host_new(src ? tdir : NULL);
    const char *dbp = getenv("KF_TEST_DB") ? getenv("KF_TEST_DB") : "kda_gpu_cache.db";
    if (db_open(&db, dbp, DB_CREATE) != DB_OK) {
        fprintf(stderr, "error: %s\n", db_errmsg(db));
        return 1;
    }
    if (g_precompile) {                       /* the H200's facts: gen_device_for_arch("sm_90a") */
        int rc = gen_target_init(&tg, "sm_90a", 0, NULL) ? 1 : precompile();
        db_close(db);
        gen_host_free(host);
        printf("skipped: no CUDA device (variants precompiled into %s)\n", dbp);
        return rc ? 1 : 77;
    }
    gen_device gd;
    rt_gen_device(&dinfo, &gd);
    if (gen_target_init(&tg, dinfo.arch, 0, &gd)) {
        fprintf(stderr, "error: no target for %s\n", dinfo.arch);
        return 1;
    }
    if (mut && *mut) {                        /* mutant mode: the mutant suite only */
        int rc = mutant_suite();
        db_close(db);
        gen_host_free(host);
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kda_gpu__check_refuses_bad_arguments),
        cmocka_unit_test_setup_teardown(test_kda_gpu__naive_matches_oracle, reset_failures, check_failures),
        cmocka_unit_test_setup_teardown(test_kda_gpu__decode_every_variant, reset_failures, check_failures),
        cmocka_unit_test(test_kda_gpu__decode_timings),
        cmocka_unit_test_setup_teardown(test_kda_gpu__prefill_every_variant, reset_failures, check_failures),
        cmocka_unit_test_setup_teardown(test_kda_gpu__prefill_long_sequences, reset_failures, check_failures),
        cmocka_unit_test(test_kda_gpu__prefill_timings),
    };
    const char *only = getenv("KF_TEST_FILTER");   /* e.g. "*long*" */
    if (only && *only)
        cmocka_set_test_filter(only);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    db_close(db);
    gen_host_free(host);
    return rc;
}
