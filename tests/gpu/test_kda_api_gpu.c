/* tests/gpu/test_kda_api_gpu.c: KDA through the public API on a GPU: plan/run against the fp64 recurrence, graphs, NOT_TUNED */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda.h"
#include "runtime/kforge.h"
#include "tuner/check.h"
#include "tuner/ref_kda.h"

#define TOL_O 1e-2
#define TOL_HT 5e-3

static const rt_cu *cu;
static kf_ctx *ctx;

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_) {                                                                                  \
            char b_[128];                                                                          \
            rt_cuda_errstr(r_, b_, sizeof b_);                                                     \
            fail_msg("%s: %s", #x, b_);                                                            \
        }                                                                                          \
    } while (0)

static ref_kda_case kcase(int nseq, const int *lens, int t, int h, int hv, int d)
{
    ref_kda_case c;
    memset(&c, 0, sizeof c);
    c.nseq = nseq, c.lens = lens, c.t = t, c.h = h, c.hv = hv, c.dk = d, c.dv = d;
    c.gate = 1, c.lower_bound = -5.0, c.l2norm = 1, c.beta_sigmoid = 1, c.h0 = 1, c.ht = 1;
    return c;
}

/* ---- one problem on the device --------------------------------------------------------- */

typedef struct dprob {
    ref_kda_host hp;
    CUdeviceptr q, k, v, g, beta, alog, dt, h0, ht, o, cu_;
} dprob;

static CUdeviceptr up(const void *src, size_t bytes)
{
    CUdeviceptr d = 0;
    if (!src || !bytes)
        return 0;
    CK(cu->MemAlloc(&d, bytes + 16));
    CK(cu->MemcpyHtoD(d, src, bytes));
    return d;
}

static void dprob_make(dprob *d, const ref_kda_case *c)
{
    memset(d, 0, sizeof *d);
    assert_int_equal(ref_kda_host_make(&d->hp, c, check_fresh_seed()), 0);
    const ref_kda_host *hp = &d->hp;
    d->q = up(hp->q, hp->nq * 2), d->k = up(hp->k, hp->nk * 2), d->v = up(hp->v, hp->nv * 2);
    d->g = up(hp->g, hp->ng * 4), d->beta = up(hp->beta, hp->nbeta * 4);
    d->alog = up(hp->a_log, hp->nalog * 4), d->dt = up(hp->dt_bias, hp->ndt * 4);
    d->h0 = up(hp->h0, hp->nh0 * 4), d->cu_ = up(hp->cu, hp->ncu_bytes);
    CK(cu->MemAlloc(&d->o, hp->no * 2 + 16));
    if (hp->nht)
        CK(cu->MemAlloc(&d->ht, hp->nht * 4 + 16));
}

static void dprob_free(dprob *d)
{
    CUdeviceptr b[] = {d->q, d->k, d->v, d->g, d->beta, d->alog, d->dt, d->h0, d->ht, d->o, d->cu_};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; ++i)
        if (b[i])
            cu->MemFree(b[i]);
    ref_kda_host_free(&d->hp);
}

/* A sequence stride equal to the contiguous one is passed as 0 (the API resolves it per call). */
static void strides3(long long out[3], long long sb, long long st, long long sh, int t)
{
    out[0] = sb == st * t ? 0 : sb;
    out[1] = st, out[2] = sh;
}

static kf_kda_desc desc_of(const ref_kda_host *hp, kf_kda_mode mode)
{
    const kf_kda_params *p = &hp->p;
    kf_kda_desc d = KF_KDA_DESC_INIT;
    d.mode = mode;
    d.max_seqs = p->nseq, d.max_tokens = p->total;
    d.h = p->h_heads, d.hv = p->hv_heads, d.dk = p->dk, d.dv = p->dv;
    d.gate = p->gate ? KF_KDA_GATE_SIGMOID : KF_KDA_GATE_LOG;
    d.lower_bound = p->lower_bound;
    d.l2norm = p->l2norm, d.beta_sigmoid = p->beta_sigmoid;
    d.scale = p->scale;
    d.has_initial_state = p->h0 != NULL, d.wants_final_state = p->ht != NULL;
    /* one state layout for both: the cases here keep them alike */
    if (p->h0 && p->ht)
        assert_true(p->h0_vfirst == p->ht_vfirst && p->h0_sr == p->ht_sr && p->h0_sh == p->ht_sh && p->h0_sn == p->ht_sn);
    d.state_layout = (p->h0 ? p->h0_vfirst : p->ht_vfirst) ? KF_KDA_STATE_VK : KF_KDA_STATE_KV;
    d.state_strides[0] = p->h0 ? p->h0_sn : p->ht_sn;
    d.state_strides[1] = p->h0 ? p->h0_sh : p->ht_sh;
    d.state_strides[2] = p->h0 ? p->h0_sr : p->ht_sr;
    if (p->gate)
        assert_int_equal(p->dt_sh, p->dk);  /* the API takes dt_bias [HV, dk] contiguous */
    strides3(d.q_strides, p->q_sb, p->q_st, p->q_sh, p->t);
    strides3(d.k_strides, p->k_sb, p->k_st, p->k_sh, p->t);
    strides3(d.v_strides, p->v_sb, p->v_st, p->v_sh, p->t);
    strides3(d.o_strides, p->o_sb, p->o_st, p->o_sh, p->t);
    strides3(d.g_strides, p->g_sb, p->g_st, p->g_sh, p->t);
    strides3(d.beta_strides, p->b_sb, p->b_st, p->b_sh, p->t);
    return d;
}

static kf_kda_tensors tensors_of(const dprob *d)
{
    kf_kda_tensors t;
    memset(&t, 0, sizeof t);
    t.q = (void *)(uintptr_t)d->q, t.k = (void *)(uintptr_t)d->k, t.v = (void *)(uintptr_t)d->v;
    t.g = (float *)(uintptr_t)d->g, t.beta = (float *)(uintptr_t)d->beta;
    t.a_log = (float *)(uintptr_t)d->alog, t.dt_bias = (float *)(uintptr_t)d->dt;
    t.initial_state = (float *)(uintptr_t)d->h0, t.final_state = (float *)(uintptr_t)d->ht;
    t.o = (void *)(uintptr_t)d->o;
    if (d->hp.p.cu_seqlens) {
        if (d->hp.p.cu64)
            t.cu_seqlens64 = (const int64_t *)(uintptr_t)d->cu_;
        else
            t.cu_seqlens = (const int32_t *)(uintptr_t)d->cu_;
    }
    t.n = d->hp.p.nseq, t.total = d->hp.p.total;
    return t;
}

/* ---- comparisons ------------------------------------------------------------------------ */

/* o (bf16 [rows, hv, dv]) on the device against ref; returns 1 when it passes. */
static int check_o(const char *what, const ref_kda_host *hp, CUdeviceptr o, const double *ref)
{
    uint16_t *h = malloc(hp->no * 2 + 2);
    CK(cu->MemcpyDtoH(h, o, hp->no * 2));
    check_stats st;
    char line[256];
    check_compare(CHECK_BF16, h, ref, hp->no, &st);
    check_format(line, sizeof line, &st, TOL_O);
    int ok = check_pass(&st, TOL_O);
    print_message("  %-40s o  %s %s\n", what, ok ? "pass" : "FAIL", line);
    free(h);
    return ok;
}

/* A state on the device (layout of hp's ht, or of its h0 when final is 0) against ref (dense K-first). */
static int check_state(const char *what, const ref_kda_host *hp, CUdeviceptr s, const double *ref)
{
    const kf_kda_params *p = &hp->p;
    const int fin = p->ht != NULL;
    const long long sn = fin ? p->ht_sn : p->h0_sn, sh = fin ? p->ht_sh : p->h0_sh, sr = fin ? p->ht_sr : p->h0_sr;
    const int vf = fin ? p->ht_vfirst : p->h0_vfirst;
    size_t nraw = fin ? hp->nht : hp->nh0, nd = (size_t)p->nseq * p->hv_heads * p->dk * p->dv;
    float *raw = malloc(nraw * 4 + 4), *dense = malloc(nd * 4 + 4);
    CK(cu->MemcpyDtoH(raw, s, nraw * 4));
    for (int n = 0; n < p->nseq; ++n)
        for (int hv = 0; hv < p->hv_heads; ++hv)
            for (int a = 0; a < p->dk; ++a)
                for (int c = 0; c < p->dv; ++c)
                    dense[(((size_t)n * p->hv_heads + hv) * p->dk + a) * p->dv + c] =
                        raw[n * sn + hv * sh + (vf ? c * sr + a : a * sr + c)];
    check_stats st;
    char line[256];
    check_compare(CHECK_FP32, dense, ref, nd, &st);
    check_format(line, sizeof line, &st, TOL_HT);
    int ok = check_pass(&st, TOL_HT);
    print_message("  %-40s ht %s %s\n", what, ok ? "pass" : "FAIL", line);
    free(raw);
    free(dense);
    return ok;
}

/* Plans the case through the API, runs it on poisoned outputs, compares with the fp64 recurrence. */
static int plan_and_check(const char *what, const ref_kda_case *c, kf_kda_mode mode)
{
    dprob d;
    dprob_make(&d, c);
    kf_kda_desc desc = desc_of(&d.hp, mode);
    kf_plan *plan;
    kf_status st = kf_kda_plan(ctx, &desc, &plan);
    if (st)
        fail_msg("%s: plan: %s: %s", what, kf_status_str(st), kf_errmsg(ctx));
    print_message("%s: %s (%s, workspace %zu)\n", what, kf_plan_variant(plan), kf_plan_source(plan),
                  kf_plan_workspace(plan));
    CK(cu->MemsetD8(d.o, 0xFF, d.hp.no * 2));
    if (d.ht)
        CK(cu->MemsetD32(d.ht, CHECK_POISON32, d.hp.nht));
    kf_kda_tensors t = tensors_of(&d);
    st = kf_kda_run(plan, &t, NULL);
    if (st)
        fail_msg("%s: run: %s: %s", what, kf_status_str(st), kf_errmsg(ctx));
    CK(cu->CtxSynchronize());
    const kf_kda_params *p = &d.hp.p;
    double *ro = calloc(d.hp.no + 1, sizeof(double));
    double *rh = calloc((size_t)p->nseq * p->hv_heads * p->dk * p->dv + 1, sizeof(double));
    ref_kda(p, 0, 0, ro, rh);
    int ok = check_o(what, &d.hp, d.o, ro);
    if (d.ht)
        ok &= check_state(what, &d.hp, d.ht, rh);
    free(ro);
    free(rh);
    kf_plan_free(plan);
    dprob_free(&d);
    return ok;
}

/* ---- tests -------------------------------------------------------------------------------- */

static const int L3[] = {17, 0, 16}, L1024[] = {1024, 0, 31};

static void test_kda_api_gpu__plan_and_run_match_the_recurrence(void **state)
{
    (void)state;
    int ok = 1;
    ref_kda_case c = kcase(3, L3, 0, 2, 4, 128);
    c.pad_qk = 8;
    ok &= plan_and_check("[17,0,16] H2 HV4 lb -5 prefill", &c, KF_KDA_PREFILL);
    c.cu64 = 1;
    ok &= plan_and_check("[17,0,16] H2 HV4 lb -5 cu64 decode", &c, KF_KDA_DECODE);
    c = kcase(3, L3, 0, 2, 2, 64);
    c.gate = 0, c.log_gate_max = 1e-3, c.l2norm = 0, c.beta_sigmoid = 0, c.h0 = 2, c.ht = 2, c.pad_state = 4;
    ok &= plan_and_check("[17,0,16] H2 d64 log gate V-first", &c, KF_KDA_PREFILL);
    c = kcase(2, NULL, 40, 2, 4, 128);
    c.h0 = 0;
    ok &= plan_and_check("padded 2 x 40 H2 HV4 no h0", &c, KF_KDA_PREFILL);
    assert_true(ok);
}

static void test_kda_api_gpu__longer_sequences(void **state)
{
    (void)state;
    int ok = 1;
    ref_kda_case c = kcase(3, L1024, 0, 2, 4, 128);
    c.cu64 = 1, c.pad_qk = 8;
    ok &= plan_and_check("[1024,0,31] H2 HV4 lb -5 prefill", &c, KF_KDA_PREFILL);
    c = kcase(3, L1024, 0, 2, 4, 128);
    c.gate = 0, c.log_gate_max = 1e-3, c.h0 = 2, c.ht = 2, c.pad_state = 4;
    ok &= plan_and_check("[1024,0,31] H2 HV4 log gate V-first", &c, KF_KDA_PREFILL);
    assert_true(ok);
}

/* Decode steps of a CUDA graph: the state updated in place (initial_state == final_state). */
static void test_kda_api_gpu__graph_of_decode_steps(void **state)
{
    (void)state;
    enum { STEPS = 4, N = 64 };
    int ones[N];
    for (int i = 0; i < N; ++i)
        ones[i] = 1;
    ref_kda_case c = kcase(N, ones, 0, 4, 8, 128);
    dprob d[STEPS];
    for (int s = 0; s < STEPS; ++s)
        dprob_make(&d[s], &c);
    const kf_kda_params *p = &d[0].hp.p;
    const size_t ns = (size_t)N * p->hv_heads * p->dk * p->dv;
    assert_int_equal(d[0].hp.nh0, ns);  /* dense K-first: the reference's layout */
    /* reference: step s starts from step s-1's final state */
    double *ro[STEPS], *rh[STEPS];
    for (int s = 0; s < STEPS; ++s) {
        ro[s] = calloc(d[s].hp.no + 1, sizeof(double));
        rh[s] = calloc(ns + 1, sizeof(double));
        if (s > 0)
            for (size_t i = 0; i < ns; ++i)
                d[s].hp.h0[i] = (float)rh[s - 1][i];
        ref_kda(&d[s].hp.p, 0, 0, ro[s], rh[s]);
    }
    kf_kda_desc desc = desc_of(&d[0].hp, KF_KDA_DECODE);
    kf_plan *plan;
    if (kf_kda_plan(ctx, &desc, &plan))
        fail_msg("plan: %s", kf_errmsg(ctx));
    CUdeviceptr S = d[0].h0;  /* in place */
    kf_kda_tensors t[STEPS];
    for (int s = 0; s < STEPS; ++s) {
        t[s] = tensors_of(&d[s]);
        t[s].initial_state = (const float *)(uintptr_t)S;
        t[s].final_state = (float *)(uintptr_t)S;
    }
    CUstream stream;
    CK(cu->StreamCreate(&stream, 1 /* non-blocking */));
    CK(cu->StreamBeginCapture(stream, 2 /* relaxed */));
    for (int s = 0; s < STEPS; ++s)
        assert_int_equal(kf_kda_run(plan, &t[s], stream), KF_OK);
    CUgraph g;
    CUgraphExec ge;
    CK(cu->StreamEndCapture(stream, &g));
    CK(cu->GraphInstantiate(&ge, g, 0));
    int ok = 1;
    for (int replay = 0; replay < 2; ++replay) {  /* a replay from the same start gives the same steps */
        /* the start state and the poison on the graph's own stream: a plain cuMemsetD8 of device memory may still
         * run when the graph starts on a non-blocking stream (seen once on an H200: step 0 of a replay "unwritten") */
        CK(cu->MemcpyHtoD(S, d[0].hp.h0, ns * 4));
        for (int s = 0; s < STEPS; ++s)
            CK(cu->MemsetD8Async(d[s].o, 0xFF, d[s].hp.no * 2, stream));
        CK(cu->GraphLaunch(ge, stream));
        CK(cu->StreamSynchronize(stream));
        for (int s = 0; s < STEPS; ++s) {
            char what[64];
            snprintf(what, sizeof what, "graph replay %d, decode step %d", replay, s);
            ok &= check_o(what, &d[s].hp, d[s].o, ro[s]);
        }
        ok &= check_state("graph: state after the last step", &d[0].hp, S, rh[STEPS - 1]);
    }
    print_message("graph of %d decode steps with %s: %s\n", STEPS, kf_plan_variant(plan), ok ? "pass" : "FAIL");
    assert_true(ok);
    cu->GraphExecDestroy(ge), cu->GraphDestroy(g), cu->StreamDestroy(stream);
    kf_plan_free(plan);
    for (int s = 0; s < STEPS; ++s) {
        free(ro[s]), free(rh[s]);
        dprob_free(&d[s]);
    }
}

static void test_kda_api_gpu__run_checks_and_families(void **state)
{
    (void)state;
    ref_kda_case c = kcase(3, L3, 0, 2, 4, 128);
    dprob d;
    dprob_make(&d, &c);
    kf_kda_desc desc = desc_of(&d.hp, KF_KDA_PREFILL);
    kf_plan *plan;
    assert_int_equal(kf_kda_supported(ctx, &desc), KF_OK);
    assert_int_equal(kf_kda_plan(ctx, &desc, &plan), KF_OK);
    assert_non_null(strstr(kf_plan_variant(plan), "kda_prefill"));
    kf_kda_tensors t = tensors_of(&d);
    t.n = 4;
    assert_int_equal(kf_kda_run(plan, &t, NULL), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(ctx), "tensors.n = 4"));
    t = tensors_of(&d), t.a_log = NULL;
    assert_int_equal(kf_kda_run(plan, &t, NULL), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(ctx), "tensors.a_log is NULL"));
    t = tensors_of(&d), t.n = 0, t.total = 0;
    assert_int_equal(kf_kda_run(plan, &t, NULL), KF_OK);  /* nothing to launch */
    kf_attn_tensors at;
    memset(&at, 0, sizeof at);
    assert_int_equal(kf_attn_run(plan, &at, NULL), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(ctx), "kf_kda_run"));
    kf_plan_free(plan);
    /* an attention plan refuses kf_kda_run */
    kf_attn_desc ad = KF_ATTN_DESC_INIT;
    ad.hq = 8, ad.hkv = 2, ad.d = 128, ad.max_batch = 1, ad.max_q = 1, ad.max_kv = 256;
    assert_int_equal(kf_attn_plan(ctx, &ad, &plan), KF_OK);
    t = tensors_of(&d);
    assert_int_equal(kf_kda_run(plan, &t, NULL), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(ctx), "kf_attn_run"));
    kf_plan_free(plan);
    /* a bad description: the message names the field */
    desc.lower_bound = -7.0f;
    assert_int_equal(kf_kda_plan(ctx, &desc, &plan), KF_ERR_ARG);
    assert_null(plan);
    assert_non_null(strstr(kf_errmsg(ctx), "desc.lower_bound = -7"));
    dprob_free(&d);
}

/* A plan made before the context's module cache grows (16 modules, then a realloc) still runs:
 * plans hold a copy of their module, not a pointer into the cache. */
static void test_kda_api_gpu__plans_survive_module_cache_growth(void **state)
{
    (void)state;
    kf_config cfg = KF_CONFIG_INIT;
    cfg.db_path = getenv("KFORGE_TEST_DB") ? getenv("KFORGE_TEST_DB") : "test_kda_api.db";
    kf_ctx *c2;
    if (kf_open(&c2, &cfg) != KF_OK)
        fail_msg("kf_open: %s", kf_errmsg(c2));
    ref_kda_case c = kcase(3, L3, 0, 2, 4, 128);
    dprob d;
    dprob_make(&d, &c);
    kf_kda_desc desc = desc_of(&d.hp, KF_KDA_PREFILL);
    kf_plan *plan, *other[20];
    assert_int_equal(kf_kda_plan(c2, &desc, &plan), KF_OK);
    for (int i = 0; i < 20; ++i) {  /* 20 attention variants: head dim x group size x causal */
        kf_attn_desc ad = KF_ATTN_DESC_INIT;
        ad.d = i % 2 ? 128 : 64, ad.hq = 1 << (i / 2 % 5), ad.hkv = 1, ad.causal = i / 10;
        ad.max_batch = 1, ad.max_q = 1, ad.max_kv = 128;
        if (kf_attn_plan(c2, &ad, &other[i]))
            fail_msg("attention plan d %d g %d causal %d: %s", ad.d, ad.hq, ad.causal, kf_errmsg(c2));
    }
    CK(cu->MemsetD8(d.o, 0xFF, d.hp.no * 2));
    CK(cu->MemsetD32(d.ht, CHECK_POISON32, d.hp.nht));
    kf_kda_tensors t = tensors_of(&d);
    assert_int_equal(kf_kda_run(plan, &t, NULL), KF_OK);
    CK(cu->CtxSynchronize());
    const kf_kda_params *p = &d.hp.p;
    double *ro = calloc(d.hp.no + 1, sizeof(double));
    double *rh = calloc((size_t)p->nseq * p->hv_heads * p->dk * p->dv + 1, sizeof(double));
    ref_kda(p, 0, 0, ro, rh);
    int ok = check_o("after 20 more modules", &d.hp, d.o, ro) & check_state("after 20 more modules", &d.hp, d.ht, rh);
    free(ro), free(rh);
    for (int i = 0; i < 20; ++i)
        kf_plan_free(other[i]);
    kf_plan_free(plan);
    dprob_free(&d);
    kf_close(c2);
    assert_true(ok);
}

static void test_kda_api_gpu__not_tuned_without_jit_or_winner(void **state)
{
    (void)state;
    kf_config cfg = KF_CONFIG_INIT;
    cfg.jit = KF_JIT_FORBID;  /* and no database: no winner */
    kf_ctx *c2;
    if (kf_open(&c2, &cfg) != KF_OK)
        fail_msg("kf_open: %s", kf_errmsg(c2));
    kf_kda_desc d = KF_KDA_DESC_INIT;
    d.mode = KF_KDA_PREFILL, d.max_seqs = 3, d.max_tokens = 33, d.h = 2, d.hv = 4, d.dk = d.dv = 128;
    assert_int_equal(kf_kda_supported(c2, &d), KF_ERR_NOT_TUNED);
    kf_plan *p = (kf_plan *)1;
    assert_int_equal(kf_kda_plan(c2, &d, &p), KF_ERR_NOT_TUNED);
    assert_null(p);
    print_message("not tuned: %s\n", kf_errmsg(c2));
    assert_non_null(strstr(kf_errmsg(c2), "kda_prefill"));
    assert_non_null(strstr(kf_errmsg(c2), "n3"));
    assert_non_null(strstr(kf_errmsg(c2), "JIT is off"));
    d.mode = KF_KDA_DECODE;
    assert_int_equal(kf_kda_plan(c2, &d, &p), KF_ERR_NOT_TUNED);
    assert_non_null(strstr(kf_errmsg(c2), "kda_decode"));
    kf_close(c2);
}

int main(void)
{
    core_err err = CORE_ERR_INIT;
    cu = rt_cuda(&err);
    int ndev = 0;
    if (!cu || cu->DeviceGetCount(&ndev) || ndev < 1) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    kf_config cfg = KF_CONFIG_INIT;
    cfg.db_path = getenv("KFORGE_TEST_DB") ? getenv("KFORGE_TEST_DB") : "test_kda_api.db";
    if (kf_open(&ctx, &cfg) != KF_OK) {
        printf("kf_open: %s\n", kf_errmsg(ctx));
        kf_close(ctx);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kda_api_gpu__plan_and_run_match_the_recurrence),
        cmocka_unit_test(test_kda_api_gpu__longer_sequences),
        cmocka_unit_test(test_kda_api_gpu__graph_of_decode_steps),
        cmocka_unit_test(test_kda_api_gpu__run_checks_and_families),
        cmocka_unit_test(test_kda_api_gpu__plans_survive_module_cache_growth),
        cmocka_unit_test(test_kda_api_gpu__not_tuned_without_jit_or_winner),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kf_close(ctx);
    return rc;
}
