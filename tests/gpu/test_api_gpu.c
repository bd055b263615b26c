/* tests/gpu/test_api_gpu.c: the public API on a GPU: plan/run against the fp64 reference, graphs, threads, paged K/V */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda.h"
#include "runtime/kforge.h"
#include "runtime/module.h"
#include "tuner/check.h"
#include "tuner/ref_attn.h"

static const rt_cu *cu;
static kf_ctx *ctx;

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_)                                                                                    \
            fail_msg("%s failed: %d", #x, r_);                                                     \
    } while (0)

typedef struct problem {
    int b, sq, skv, hq, hkv, d, causal;
    check_dtype dt;
    uint16_t *hq_, *hk, *hv;
    int *kv_len;
    CUdeviceptr q, k, v, o, lse, kvl;
    double *ref_o, *ref_lse;
} problem;

static void problem_ref(problem *p);

static void problem_init(problem *p, int b, int sq, int skv, int hq, int hkv, int d, int causal)
{
    memset(p, 0, sizeof *p);
    p->b = b, p->sq = sq, p->skv = skv, p->hq = hq, p->hkv = hkv, p->d = d, p->causal = causal;
    p->dt = CHECK_BF16;
    size_t nq = (size_t)b * sq * hq * d, nk = (size_t)b * skv * hkv * d;
    p->hq_ = malloc(nq * 2), p->hk = malloc(nk * 2), p->hv = malloc(nk * 2);
    p->kv_len = malloc(sizeof(int) * (size_t)b);
    uint64_t seed = check_fresh_seed();
    check_fill_uniform(p->dt, p->hq_, nq, seed);
    check_fill_uniform(p->dt, p->hk, nk, seed + 1);
    check_fill_uniform(p->dt, p->hv, nk, seed + 2);
    for (int i = 0; i < b; i++) {
        p->kv_len[i] = i == 0 ? skv : (int)((seed >> (i % 40)) % (uint64_t)(skv + 1));
        /* NaN past every sequence's length: a kernel that reads it fails */
        for (int j = p->kv_len[i]; j < skv; j++) {
            size_t off = ((size_t)i * skv + j) * hkv * d;
            check_fill_nan(p->dt, p->hk + off, (size_t)hkv * d);
            check_fill_nan(p->dt, p->hv + off, (size_t)hkv * d);
        }
    }
    CK(cu->MemAlloc(&p->q, nq * 2));
    CK(cu->MemAlloc(&p->k, nk * 2));
    CK(cu->MemAlloc(&p->v, nk * 2));
    CK(cu->MemAlloc(&p->o, nq * 2));
    CK(cu->MemAlloc(&p->lse, (size_t)b * hq * sq * 4));
    CK(cu->MemAlloc(&p->kvl, sizeof(int) * (size_t)b));
    CK(cu->MemcpyHtoD(p->q, p->hq_, nq * 2));
    CK(cu->MemcpyHtoD(p->k, p->hk, nk * 2));
    CK(cu->MemcpyHtoD(p->v, p->hv, nk * 2));
    CK(cu->MemcpyHtoD(p->kvl, p->kv_len, sizeof(int) * (size_t)b));
    p->ref_o = malloc(sizeof(double) * nq);
    p->ref_lse = malloc(sizeof(double) * (size_t)b * sq * hq);
    problem_ref(p);
}

/* The fp64 reference of the problem's host q, k, v into ref_o, ref_lse. */
static void problem_ref(problem *p)
{
    int b = p->b, sq = p->sq, skv = p->skv, hq = p->hq, hkv = p->hkv, d = p->d;
    ref_attn_desc r;
    memset(&r, 0, sizeof r);
    r.dtype = p->dt;
    r.q = p->hq_, r.k = p->hk, r.v = p->hv;
    r.kv_len = p->kv_len;
    r.q_sb = (long long)sq * hq * d, r.q_ss = (long long)hq * d, r.q_sh = d;
    r.k_sb = r.v_sb = (long long)skv * hkv * d, r.k_ss = r.v_ss = (long long)hkv * d, r.k_sh = r.v_sh = d;
    r.b = b, r.sq = sq, r.skv = skv, r.hq = hq, r.hkv = hkv, r.d = d, r.dv = d, r.causal = p->causal;
    r.scale = 1.0 / sqrt((double)d);
    ref_attn(&r, p->ref_o, p->ref_lse);
}

static void problem_free(problem *p)
{
    cu->MemFree(p->q), cu->MemFree(p->k), cu->MemFree(p->v), cu->MemFree(p->o), cu->MemFree(p->lse);
    cu->MemFree(p->kvl);
    free(p->hq_), free(p->hk), free(p->hv), free(p->kv_len), free(p->ref_o), free(p->ref_lse);
}

static kf_attn_tensors tensors_of(const problem *p)
{
    kf_attn_tensors t;
    memset(&t, 0, sizeof t);
    t.q = (void *)(uintptr_t)p->q, t.k = (void *)(uintptr_t)p->k, t.v = (void *)(uintptr_t)p->v;
    t.o = (void *)(uintptr_t)p->o;
    t.lse = (float *)(uintptr_t)p->lse;
    t.kv_len = (const int32_t *)(uintptr_t)p->kvl;
    t.batch = p->b, t.q_len = p->sq;
    return t;
}

/* Compares o (and lse, whose layout is [B, Hq, Sq]) with the reference; returns 1 when it passes. */
static int verify(const problem *p, char *why, size_t n)
{
    size_t nq = (size_t)p->b * p->sq * p->hq * p->d, nl = (size_t)p->b * p->hq * p->sq;
    uint16_t *o = malloc(nq * 2);
    float *lse = malloc(nl * 4);
    double *rl = malloc(nl * sizeof(double));
    cu->MemcpyDtoH(o, p->o, nq * 2);
    cu->MemcpyDtoH(lse, p->lse, nl * 4);
    for (int b = 0; b < p->b; b++)
        for (int i = 0; i < p->sq; i++)
            for (int h = 0; h < p->hq; h++)
                rl[((size_t)b * p->hq + h) * p->sq + i] = p->ref_lse[((size_t)b * p->sq + i) * p->hq + h];
    check_stats s;
    check_lse_stats ls;
    check_compare(p->dt, o, p->ref_o, nq, &s);
    check_compare_lse(lse, rl, nl, &ls);
    int ok = check_pass(&s, check_tol(p->dt)) && check_lse_pass(&ls, CHECK_LSE_TOL);
    char a[256], b2[256];
    check_format(a, sizeof a, &s, check_tol(p->dt));
    check_format_lse(b2, sizeof b2, &ls, CHECK_LSE_TOL);
    snprintf(why, n, "o: %s; lse: %s", a, b2);
    free(o), free(lse), free(rl);
    return ok;
}

static void poison(const problem *p)
{
    CK(cu->MemsetD8(p->o, 0xFF, (size_t)p->b * p->sq * p->hq * p->d * 2));
    CK(cu->MemsetD32(p->lse, 0x7FFFFFFF, (size_t)p->b * p->hq * p->sq));
    /* done before a run on a non-blocking stream starts: a plain memset of device memory may return before it ran */
    CK(cu->CtxSynchronize());
}

static kf_attn_desc desc_of(const problem *p)
{
    kf_attn_desc d = KF_ATTN_DESC_INIT;
    d.kind = p->sq <= 16 ? KF_ATTN_DECODE : KF_ATTN_PREFILL;
    d.dtype = KF_BF16;
    d.hq = p->hq, d.hkv = p->hkv, d.d = p->d, d.causal = p->causal;
    d.max_batch = p->b, d.max_q = p->sq, d.max_kv = p->skv;
    return d;
}

static void test_api_gpu__plan_and_run_match_the_reference(void **state)
{
    int shapes[][7] = {{3, 1, 777, 8, 2, 128, 0}, {2, 4, 1500, 8, 4, 128, 1}, {2, 80, 300, 8, 2, 64, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int *s = shapes[i];
        problem p;
        problem_init(&p, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
        kf_attn_desc d = desc_of(&p);
        kf_plan *plan;
        kf_status st = kf_attn_plan(ctx, &d, &plan);
        if (st)
            fail_msg("plan: %s: %s", kf_status_str(st), kf_errmsg(ctx));
        poison(&p);
        kf_attn_tensors t = tensors_of(&p);
        st = kf_attn_run(plan, &t, NULL);
        if (st)
            fail_msg("run: %s", kf_errmsg(ctx));
        CK(cu->CtxSynchronize());
        char why[600];
        int ok = verify(&p, why, sizeof why);
        print_message("%-55s %-8s %s %s\n", kf_plan_variant(plan), kf_plan_source(plan), ok ? "pass" : "FAIL", why);
        assert_true(ok);
        kf_plan_free(plan);
        problem_free(&p);
    }
}

static void test_api_gpu__graph_of_100_steps_replays(void **state)
{
    problem p;
    problem_init(&p, 4, 1, 2048, 32, 8, 128, 0);
    kf_attn_desc d = desc_of(&p);
    kf_plan *plan;
    assert_int_equal(kf_attn_plan(ctx, &d, &plan), KF_OK);
    CUstream s;
    CK(cu->StreamCreate(&s, 1 /* non-blocking */));
    kf_attn_tensors t = tensors_of(&p);
    poison(&p);
    CK(cu->StreamBeginCapture(s, 2 /* relaxed */));
    for (int i = 0; i < 100; i++)
        assert_int_equal(kf_attn_run(plan, &t, s), KF_OK);
    CUgraph g;
    CUgraphExec ge;
    CK(cu->StreamEndCapture(s, &g));
    CK(cu->GraphInstantiate(&ge, g, 0));
    CK(cu->GraphLaunch(ge, s));
    CK(cu->StreamSynchronize(s));
    char why[600];
    int ok = verify(&p, why, sizeof why);
    print_message("graph of 100 %s: %s %s\n", kf_plan_variant(plan), ok ? "pass" : "FAIL", why);
    assert_true(ok);
    cu->GraphExecDestroy(ge), cu->GraphDestroy(g), cu->StreamDestroy(s);
    kf_plan_free(plan);
    problem_free(&p);
}

/* Calls that read the previous call's output, back to back on one stream and as a captured graph: step s takes
 * step s - 1's o as its q (o and q are both [B, Sq, Hq, D]), every o poisoned first. On sm_90 the decode kernels
 * and the split-KV combine are launched with programmatic dependent launch: a step whose blocks read q before the
 * previous step's stores were visible (its griddepcontrol.wait missing or late) gives NaN or a wrong o. Each step
 * is checked against the fp64 reference of the q it was given (the previous step's o as the GPU wrote it). */
static void chain_case(int b, int skv, int hq, int hkv, int graph)
{
    enum { STEPS = 6 };
    problem p;
    problem_init(&p, b, 1, skv, hq, hkv, 128, 0);
    kf_attn_desc d = desc_of(&p);
    kf_plan *plan;
    kf_status st = kf_attn_plan(ctx, &d, &plan);
    if (st)
        fail_msg("plan: %s: %s", kf_status_str(st), kf_errmsg(ctx));
    size_t nq = (size_t)b * hq * 128, nl = (size_t)b * hq;
    CUdeviceptr o[STEPS], l[STEPS];
    for (int i = 0; i < STEPS; i++) {
        CK(cu->MemAlloc(&o[i], nq * 2));
        CK(cu->MemAlloc(&l[i], nl * 4));
        CK(cu->MemsetD8(o[i], 0xFF, nq * 2));
        CK(cu->MemsetD32(l[i], 0x7FFFFFFF, nl));
    }
    CK(cu->CtxSynchronize());
    CUstream s;
    CK(cu->StreamCreate(&s, 1 /* non-blocking */));
    if (graph)
        CK(cu->StreamBeginCapture(s, 2 /* relaxed */));
    for (int i = 0; i < STEPS; i++) {
        kf_attn_tensors t = tensors_of(&p);
        if (i > 0)
            t.q = (const void *)(uintptr_t)o[i - 1];
        t.o = (void *)(uintptr_t)o[i], t.lse = (float *)(uintptr_t)l[i];
        if (kf_attn_run(plan, &t, s) != KF_OK)
            fail_msg("run of step %d: %s", i, kf_errmsg(ctx));
    }
    CUgraph g = NULL;
    CUgraphExec ge = NULL;
    if (graph) {
        CK(cu->StreamEndCapture(s, &g));
        CK(cu->GraphInstantiate(&ge, g, 0));
        CK(cu->GraphLaunch(ge, s));
    }
    CK(cu->StreamSynchronize(s));
    int ok = 1;
    char why[600] = "";
    CUdeviceptr o0 = p.o, l0 = p.lse;
    for (int i = 0; i < STEPS && ok; i++) {
        if (i > 0) {   /* the q step i was given: step i - 1's o, as the GPU wrote it */
            CK(cu->MemcpyDtoH(p.hq_, o[i - 1], nq * 2));
            problem_ref(&p);
        }
        p.o = o[i], p.lse = l[i];
        ok = verify(&p, why, sizeof why);
        if (!ok)
            print_error("step %d of %d: %s\n", i, STEPS, why);
    }
    p.o = o0, p.lse = l0;
    print_message("chain of %d %s b%d skv%d %d/%d (%s): %s %s\n", STEPS, graph ? "graphed" : "streamed", b, skv, hq, hkv,
                  kf_plan_variant(plan), ok ? "pass" : "FAIL", why);
    assert_true(ok);
    if (graph)
        cu->GraphExecDestroy(ge), cu->GraphDestroy(g);
    cu->StreamDestroy(s);
    for (int i = 0; i < STEPS; i++)
        cu->MemFree(o[i]), cu->MemFree(l[i]);
    kf_plan_free(plan);
    problem_free(&p);
}

static void test_api_gpu__chained_calls_read_the_last_output(void **state)
{
    for (int graph = 0; graph < 2; graph++) {
        chain_case(1, 16384, 32, 8, graph);   /* splits and the combine: two launches a step */
        chain_case(4, 1500, 8, 2, graph);
        chain_case(16, 512, 16, 16, graph);
    }
}

/* Paged K/V (desc.page_size, tensors.block_table): the pools hold the same keys as the contiguous
 * cache in shuffled pages, NaN in every unused page and past every length; the run must match the
 * fp64 reference and equal the contiguous plan bit for bit (o and lse). */
static void paged_case(int b, int sq, int skv, int hq, int hkv, int causal, int ps)
{
    problem p;
    problem_init(&p, b, sq, skv, hq, hkv, 128, causal);
    kf_attn_desc dc = desc_of(&p), dp = dc;
    dp.page_size = ps;
    int maxp = (skv + ps - 1) / ps, npages = b * maxp + 3;   /* 3 unused pages */
    size_t row = (size_t)hkv * 128, page = (size_t)ps * row;
    uint16_t *pk = malloc((size_t)npages * page * 2), *pv = malloc((size_t)npages * page * 2);
    check_fill_nan(p.dt, pk, (size_t)npages * page);
    check_fill_nan(p.dt, pv, (size_t)npages * page);
    int *perm = malloc(sizeof(int) * (size_t)npages), *bt = malloc(sizeof(int) * (size_t)b * maxp);
    for (int i = 0; i < npages; i++)
        perm[i] = i;
    uint64_t seed = check_fresh_seed();
    check_rng rng;
    check_rng_seed(&rng, seed);
    for (int i = npages - 1; i > 0; i--) {                   /* Fisher-Yates */
        int j = (int)(check_rng_next(&rng) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int s = 0; s < b; s++)
        for (int pg = 0; pg < maxp; pg++) {
            int dst = perm[s * maxp + pg];
            bt[s * maxp + pg] = dst;
            for (int r = 0; r < ps && pg * ps + r < p.kv_len[s]; r++) {
                size_t src = ((size_t)s * skv + (size_t)pg * ps + r) * row;
                memcpy(pk + (size_t)dst * page + (size_t)r * row, p.hk + src, row * 2);
                memcpy(pv + (size_t)dst * page + (size_t)r * row, p.hv + src, row * 2);
            }
        }
    CUdeviceptr dk, dv, dbt, o2, l2;
    CK(cu->MemAlloc(&dk, (size_t)npages * page * 2));
    CK(cu->MemAlloc(&dv, (size_t)npages * page * 2));
    CK(cu->MemAlloc(&dbt, sizeof(int) * (size_t)b * maxp));
    CK(cu->MemcpyHtoD(dk, pk, (size_t)npages * page * 2));
    CK(cu->MemcpyHtoD(dv, pv, (size_t)npages * page * 2));
    CK(cu->MemcpyHtoD(dbt, bt, sizeof(int) * (size_t)b * maxp));
    size_t nq = (size_t)b * sq * hq * 128, nl = (size_t)b * hq * sq;
    CK(cu->MemAlloc(&o2, nq * 2));
    CK(cu->MemAlloc(&l2, nl * 4));
    kf_plan *pc, *pp;
    assert_int_equal(kf_attn_plan(ctx, &dc, &pc), KF_OK);
    kf_status st = kf_attn_plan(ctx, &dp, &pp);
    if (st)
        fail_msg("paged plan: %s: %s", kf_status_str(st), kf_errmsg(ctx));
    /* contiguous run into o2/l2, paged run into the problem's o/lse (checked against fp64) */
    kf_attn_tensors t = tensors_of(&p);
    t.o = (void *)(uintptr_t)o2, t.lse = (float *)(uintptr_t)l2;
    assert_int_equal(kf_attn_run(pc, &t, NULL), KF_OK);
    poison(&p);
    t = tensors_of(&p);
    t.k = (void *)(uintptr_t)dk, t.v = (void *)(uintptr_t)dv;
    t.block_table = (const int32_t *)(uintptr_t)dbt, t.bt_stride = maxp;
    if (kf_attn_run(pp, &t, NULL) != KF_OK)
        fail_msg("paged run: %s", kf_errmsg(ctx));
    CK(cu->CtxSynchronize());
    char why[600];
    int ok = verify(&p, why, sizeof why);
    uint16_t *a = malloc(nq * 2), *c = malloc(nq * 2);
    float *la = malloc(nl * 4), *lc = malloc(nl * 4);
    CK(cu->MemcpyDtoH(a, p.o, nq * 2));
    CK(cu->MemcpyDtoH(c, o2, nq * 2));
    CK(cu->MemcpyDtoH(la, p.lse, nl * 4));
    CK(cu->MemcpyDtoH(lc, l2, nl * 4));
    int same = !memcmp(a, c, nq * 2) && !memcmp(la, lc, nl * 4);
    print_message("paged b%d sq%d skv%d %d/%d causal%d page %d (%d pages shuffled, 3 unused) %s: %s, %s contiguous; %s\n",
                  b, sq, skv, hq, hkv, causal, ps, npages, kf_plan_variant(pp), ok ? "pass" : "FAIL",
                  same ? "bitwise equal to" : "DIFFERS from", why);
    assert_true(ok);
    assert_true(same);
    kf_plan_free(pc), kf_plan_free(pp);
    cu->MemFree(dk), cu->MemFree(dv), cu->MemFree(dbt), cu->MemFree(o2), cu->MemFree(l2);
    free(pk), free(pv), free(perm), free(bt), free(a), free(c), free(la), free(lc);
    problem_free(&p);
}

static void test_api_gpu__paged_decode(void **state)
{
    paged_case(3, 1, 777, 8, 2, 0, 16);
    paged_case(2, 4, 1500, 8, 4, 1, 64);
    paged_case(4, 2, 4097, 32, 8, 1, 128);
    paged_case(2, 1, 300, 16, 1, 0, 32);
}

typedef struct thread_arg {
    int id, ok;
    char why[600];
} thread_arg;

static void *worker(void *arg)
{
    thread_arg *a = arg;
    core_err err = CORE_ERR_INIT;
    rt_module_context(0, &err);
    problem p;
    problem_init(&p, 1 + a->id % 3, 1 + a->id % 2, 500 + 97 * a->id, 8, a->id % 2 ? 4 : 2, 128, a->id % 2);
    kf_attn_desc d = desc_of(&p);
    kf_plan *plan;
    a->ok = 0;
    if (kf_attn_plan(ctx, &d, &plan) == KF_OK) {
        CUstream s;
        cu->StreamCreate(&s, 1);
        poison(&p);
        kf_attn_tensors t = tensors_of(&p);
        if (kf_attn_run(plan, &t, s) == KF_OK && cu->StreamSynchronize(s) == 0)
            a->ok = verify(&p, a->why, sizeof a->why);
        cu->StreamDestroy(s);
        kf_plan_free(plan);
    } else {
        snprintf(a->why, sizeof a->why, "plan: %s", kf_errmsg(ctx));
    }
    problem_free(&p);
    return NULL;
}

static void test_api_gpu__eight_threads_plan_and_run(void **state)
{
    pthread_t th[8];
    thread_arg a[8];
    for (int i = 0; i < 8; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].id = i;
        pthread_create(&th[i], NULL, worker, &a[i]);
    }
    int good = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        good += a[i].ok;
        if (!a[i].ok)
            print_error("thread %d: %s\n", i, a[i].why);
    }
    print_message("8 threads: %d correct\n", good);
    assert_int_equal(good, 8);
}

int main(void)
{
    core_err err = CORE_ERR_INIT;
    cu = rt_cuda(&err);
    if (!cu) {
        printf("skipped: no CUDA device (%s)\n", err.msg);
        return 77;
    }
    kf_config cfg = KF_CONFIG_INIT;
    cfg.db_path = getenv("KFORGE_TEST_DB") ? getenv("KFORGE_TEST_DB") : "test_gpu.db";
    if (kf_open(&ctx, &cfg) != KF_OK) {
        printf("kf_open: %s\n", kf_errmsg(ctx));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_gpu__plan_and_run_match_the_reference),
        cmocka_unit_test(test_api_gpu__graph_of_100_steps_replays),
        cmocka_unit_test(test_api_gpu__chained_calls_read_the_last_output),
        cmocka_unit_test(test_api_gpu__eight_threads_plan_and_run),
        cmocka_unit_test(test_api_gpu__paged_decode),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kf_close(ctx);
    return rc;
}
