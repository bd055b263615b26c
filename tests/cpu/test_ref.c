/* tests/cpu/test_ref.c: the fp64 attention reference against independent formulations, and the check_ helpers */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/check.h"
#include "tuner/ref_attn.h"

/* ---- problems ------------------------------------------------------------ */

/* A problem with contiguous q [b, sq, hq, d], k [b, skv, hkv, d], v [b, skv, hkv, dv]. */
typedef struct prob {
    ref_attn_desc a;
    void *q, *k, *v;
} prob;

typedef struct dims {
    int b, sq, skv, hq, hkv, d, dv, causal;
} dims;

static size_t esz(const prob *p) { return check_dtype_size(p->a.dtype); }

static prob prob_dense(check_dtype t, dims m, uint64_t seed)
{
    prob p = { 0 };
    ref_attn_desc *a = &p.a;
    a->dtype = t;
    a->b = m.b; a->sq = m.sq; a->skv = m.skv; a->hq = m.hq; a->hkv = m.hkv;
    a->d = m.d; a->dv = m.dv; a->causal = m.causal;
    a->scale = 1.0 / sqrt((double)m.d);
    a->q_sh = m.d;  a->q_ss = (long long)m.hq * m.d;   a->q_sb = a->q_ss * m.sq;
    a->k_sh = m.d;  a->k_ss = (long long)m.hkv * m.d;  a->k_sb = a->k_ss * m.skv;
    a->v_sh = m.dv; a->v_ss = (long long)m.hkv * m.dv; a->v_sb = a->v_ss * m.skv;
    size_t nq = (size_t)m.b * m.sq * m.hq * m.d, nk = (size_t)m.b * m.skv * m.hkv * m.d;
    size_t nv = (size_t)m.b * m.skv * m.hkv * m.dv, s = check_dtype_size(t);
    p.q = malloc(nq * s + 1); p.k = malloc(nk * s + 1); p.v = malloc(nv * s + 1);
    check_fill_uniform(t, p.q, nq, seed);
    check_fill_normal(t, p.k, nk, seed + 1, 2.0);   /* wide scores: softmax far from uniform */
    check_fill_uniform(t, p.v, nv, seed + 2);
    a->q = p.q; a->k = p.k; a->v = p.v;
    return p;
}

static void prob_free(prob *p)
{
    free(p->q); free(p->k); free(p->v);
}

typedef struct result {
    double *o, *lse;
    long long rows;
} result;

static result run_ref(const ref_attn_desc *a)
{
    result r;
    r.rows = ref_attn_rows(a);
    r.o = calloc((size_t)(r.rows * a->hq * a->dv) + 1, sizeof(double));
    r.lse = calloc((size_t)(r.rows * a->hq) + 1, sizeof(double));
    ref_attn(a, r.o, r.lse);
    return r;
}

static void out_free(result *r) { free(r->o); free(r->lse); }


static void assert_same(const result *x, const result *y, int hq, int dv, double tol)
{
    assert_int_equal(x->rows, y->rows);
    size_t n = (size_t)(x->rows * hq);
    double eo = check_maxdiff(x->o, y->o, n * dv), el = check_maxdiff(x->lse, y->lse, n);
    if (!(eo <= tol) || !(el <= tol))
        fail_msg("o differs by %g, lse by %g (tol %g)", eo, el, tol);
}

/* ---- (a) brute force: masked score matrix and log-sum-exp ----------------- */

/* Independent formulation on a contiguous problem (kv_len honoured): per (b, h),
 * S = scale Q K^T with -inf where masked, lse = logsumexp(S), O = exp(S - lse) V. */
static result brute(const prob *p)
{
    const ref_attn_desc *a = &p->a;
    int B = a->b, SQ = a->sq, SK = a->skv, HQ = a->hq, HK = a->hkv, D = a->d, DV = a->dv;
    result r = { .rows = (long long)B * SQ };
    r.o = calloc((size_t)B * SQ * HQ * DV, sizeof(double));
    r.lse = calloc((size_t)B * SQ * HQ, sizeof(double));
    double *S = malloc(sizeof(double) * (size_t)SQ * SK + 1);
    for (int b = 0; b < B; b++) {
        int nk = a->kv_len ? a->kv_len[b] : SK;
        for (int h = 0; h < HQ; h++) {
            int kh = h * HK / HQ;    /* = h / (HQ/HK) for integer groups */
            for (int i = 0; i < SQ; i++) {
                for (int j = 0; j < nk; j++) {
                    bool masked = a->causal && (SQ - 1 - i) > (nk - 1 - j);   /* last query sees last key */
                    double acc = 0.0;
                    for (int c = 0; c < D; c++)
                        acc += check_load(a->dtype, p->q, (((size_t)b * SQ + i) * HQ + h) * D + c)
                             * check_load(a->dtype, p->k, (((size_t)b * SK + j) * HK + kh) * D + c);
                    S[(size_t)i * SK + j] = masked ? -INFINITY : acc * a->scale;
                }
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j < nk; j++)
                    m = fmax(m, S[(size_t)i * SK + j]);
                for (int j = 0; j < nk && m > -INFINITY; j++)
                    sum += exp(S[(size_t)i * SK + j] - m);
                double lse = m > -INFINITY ? m + log(sum) : -INFINITY;
                size_t rid = ((size_t)b * SQ + i) * HQ + h;
                r.lse[rid] = lse;
                for (int j = 0; j < nk && lse > -INFINITY; j++) {
                    double pr = exp(S[(size_t)i * SK + j] - lse);
                    for (int c = 0; c < DV; c++)
                        r.o[rid * DV + c] += pr * check_load(a->dtype, p->v, (((size_t)b * SK + j) * HK + kh) * DV + c);
                }
            }
        }
    }
    free(S);
    return r;
}

static const dims cases[] = {
    { 2, 5, 9, 8, 4, 16, 16, 0 },
    { 2, 5, 9, 8, 2, 16, 8, 1 },    /* causal, sq < skv, dv != d */
    { 1, 7, 4, 6, 2, 8, 8, 1 },     /* causal, sq > skv: first rows see nothing */
    { 3, 1, 13, 4, 1, 32, 32, 1 },  /* decode */
    { 1, 6, 6, 2, 2, 8, 8, 1 },
};

static void test_ref__matches_brute_force(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int t = CHECK_BF16; t <= CHECK_FP32; t++) {
            prob p = prob_dense((check_dtype)t, cases[c], 100 + c);
            result r = run_ref(&p.a), x = brute(&p);
            assert_same(&r, &x, p.a.hq, p.a.dv, 1e-12);
            out_free(&r); out_free(&x); prob_free(&p);
        }
    }
}

static void test_ref__kv_len_matches_brute_force(void **state)
{
    (void)state;
    dims m = { 3, 4, 10, 8, 4, 8, 8, 1 };
    prob p = prob_dense(CHECK_BF16, m, 7);
    int kv_len[3] = { 10, 5, 4 };
    p.a.kv_len = kv_len;
    result r = run_ref(&p.a), x = brute(&p);
    assert_same(&r, &x, p.a.hq, p.a.dv, 1e-12);
    out_free(&r); out_free(&x); prob_free(&p);
}

static void test_ref__brute_force_sees_wrong_mask(void **state)
{
    /* the comparison can fail: the same problem without the causal mask differs */
    (void)state;
    prob p = prob_dense(CHECK_FP16, cases[1], 3);
    result r = run_ref(&p.a);
    p.a.causal = 0;
    result x = brute(&p);
    assert_true(check_maxdiff(r.o, x.o, (size_t)(r.rows * p.a.hq * p.a.dv)) > 1e-3);
    out_free(&r); out_free(&x); prob_free(&p);
}

/* ---- (b) split partials + combine ---------------------------------------- */

static result split_combine(const ref_attn_desc *a, int bn, int splits)
{
    result r;
    r.rows = ref_attn_rows(a);
    long long n = r.rows * a->hq;
    double *wo = malloc(sizeof(double) * (size_t)(splits * n * a->dv) + 1);
    double *wl = malloc(sizeof(double) * (size_t)(splits * n) + 1);
    r.o = malloc(sizeof(double) * (size_t)(n * a->dv) + 1);
    r.lse = malloc(sizeof(double) * (size_t)n + 1);
    ref_attn_split(a, bn, splits, wo, wl);
    ref_attn_combine(splits, n, a->dv, wo, wl, r.o, r.lse);
    free(wo); free(wl);
    return r;
}

static void test_ref__split_combine_equals_unsplit(void **state)
{
    (void)state;
    static const int splits[] = { 1, 2, 3, 4, 7, 16, 40 };   /* 40 > blocks of every case */
    static const int bns[] = { 1, 4, 16 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        prob p = prob_dense(CHECK_BF16, cases[c], 200 + c);
        int kv_len[3] = { p.a.skv, p.a.skv / 2, 0 };
        if (p.a.b == 3)
            p.a.kv_len = kv_len;   /* includes an empty sequence */
        result r = run_ref(&p.a);
        for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
            for (size_t k = 0; k < sizeof bns / sizeof bns[0]; k++) {
                result x = split_combine(&p.a, bns[k], splits[s]);
                assert_same(&r, &x, p.a.hq, p.a.dv, 1e-12);
                out_free(&x);
            }
        }
        out_free(&r); prob_free(&p);
    }
}

static void test_ref__split_range_rule(void **state)
{
    (void)state;
    long long lo, hi;
    ref_split_range(100, 16, 3, 0, &lo, &hi);   /* 7 blocks, per = 3 blocks = 48 */
    assert_int_equal(lo, 0);  assert_int_equal(hi, 48);
    ref_split_range(100, 16, 3, 2, &lo, &hi);
    assert_int_equal(lo, 96); assert_int_equal(hi, 100);
    ref_split_range(10, 16, 4, 1, &lo, &hi);    /* more splits than blocks: empty */
    assert_int_equal(lo, 10); assert_int_equal(hi, 10);
    ref_split_range(96, 16, 3, 1, &lo, &hi);    /* 6 blocks, per = 2 blocks */
    assert_int_equal(lo, 32); assert_int_equal(hi, 64);
    ref_split_range(64, 16, 8, 3, &lo, &hi);    /* 4 blocks, per = 1 block */
    assert_int_equal(lo, 48); assert_int_equal(hi, 64);
    ref_split_range(64, 16, 8, 4, &lo, &hi);
    assert_int_equal(lo, 64); assert_int_equal(hi, 64);
    ref_split_range(0, 16, 2, 0, &lo, &hi);
    assert_int_equal(lo, 0);  assert_int_equal(hi, 0);
    /* the ranges tile [0, n) in order, each a whole number of blocks but the last */
    for (int n = 0; n < 70; n++) {
        for (int sp = 1; sp < 9; sp++) {
            long long next = 0;
            for (int s = 0; s < sp; s++) {
                ref_split_range(n, 8, sp, s, &lo, &hi);
                assert_int_equal(lo, next);
                assert_true(hi >= lo);
                assert_true(lo % 8 == 0 || lo == n);
                next = hi;
            }
            assert_int_equal(next, n);
        }
    }
}

static void test_ref__combine_all_empty(void **state)
{
    (void)state;
    double wo[3 * 2] = { 5, 5, NAN, NAN, 7, 7 }, wl[3] = { -INFINITY, -INFINITY, -INFINITY };
    double o[2] = { 1, 1 }, lse = 0;
    ref_attn_combine(3, 1, 2, wo, wl, o, &lse);
    assert_true(o[0] == 0.0 && o[1] == 0.0);
    assert_true(lse == -INFINITY);
}

static void test_ref__combine_two_halves(void **state)
{
    /* two partials of weights e^1 and e^2: O = (e O_0 + e^2 O_1) / (e + e^2) */
    (void)state;
    double wo[2] = { 1.0, 3.0 }, wl[2] = { 1.0, 2.0 }, o, lse;
    ref_attn_combine(2, 1, 1, wo, wl, &o, &lse);
    double e1 = exp(1.0), e2 = exp(2.0);
    assert_true(fabs(lse - log(e1 + e2)) < 1e-15);
    assert_true(fabs(o - (e1 + 3 * e2) / (e1 + e2)) < 1e-15);
}

/* ---- (c) strided layouts ------------------------------------------------- */

/* Copy a contiguous [B, S, H, D] tensor into dst with strides (sb, ss, sh); the
 * rest of dst holds NaN, so reading a wrong element shows. */
static void *restride(check_dtype t, const void *src, int B, int S, int H, int D,
                      long long sb, long long ss, long long sh, size_t total)
{
    size_t es = check_dtype_size(t);
    char *dst = malloc(total * es);
    check_fill_nan(t, dst, total);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                memcpy(dst + (size_t)(b * sb + s * ss + h * sh) * es,
                       (const char *)src + ((((size_t)b * S + s) * H + h) * D) * es, (size_t)D * es);
    return dst;
}

static void test_ref__strided_equals_contiguous(void **state)
{
    (void)state;
    dims m = { 2, 5, 7, 8, 2, 16, 8, 1 };
    prob p = prob_dense(CHECK_FP16, m, 31);
    result r = run_ref(&p.a);
    ref_attn_desc a = p.a;
    /* q as [B, H, S, D+3], k as [S, B, H, D] with padded heads, v as [H, B, S, DV] plus a gap */
    int pd = m.d + 3;
    a.q_sh = (long long)m.sq * pd; a.q_ss = pd; a.q_sb = a.q_sh * m.hq + 5;
    size_t nq = (size_t)(a.q_sb * m.b);
    a.k_sh = m.d + 8; a.k_sb = a.k_sh * m.hkv; a.k_ss = a.k_sb * m.b;
    size_t nk = (size_t)(a.k_ss * m.skv);
    a.v_ss = m.dv; a.v_sb = (long long)m.skv * m.dv; a.v_sh = a.v_sb * m.b + 16;
    size_t nv = (size_t)(a.v_sh * m.hkv);
    void *q = restride(a.dtype, p.q, m.b, m.sq, m.hq, m.d, a.q_sb, a.q_ss, a.q_sh, nq);
    void *k = restride(a.dtype, p.k, m.b, m.skv, m.hkv, m.d, a.k_sb, a.k_ss, a.k_sh, nk);
    void *v = restride(a.dtype, p.v, m.b, m.skv, m.hkv, m.dv, a.v_sb, a.v_ss, a.v_sh, nv);
    a.q = q; a.k = k; a.v = v;
    result x = run_ref(&a);
    assert_same(&r, &x, m.hq, m.dv, 0.0);   /* same arithmetic in the same order */
    out_free(&r); out_free(&x); prob_free(&p);
    free(q); free(k); free(v);
}

/* ---- (d) packed sequences ------------------------------------------------ */

static void test_ref__packed_equals_dense_per_sequence(void **state)
{
    (void)state;
    enum { B = 4, HQ = 8, HKV = 2, D = 16 };
    static const int nq[B] = { 3, 1, 0, 6 }, nk[B] = { 5, 9, 4, 6 };
    int cq[B + 1] = { 0 }, ck[B + 1] = { 0 };
    for (int b = 0; b < B; b++) {
        cq[b + 1] = cq[b] + nq[b];
        ck[b + 1] = ck[b] + nk[b];
    }
    for (int causal = 0; causal < 2; causal++) {
        /* packed: one "batch" of total rows, b unused in the offsets */
        dims m = { 1, cq[B], ck[B], HQ, HKV, D, D, causal };
        prob p = prob_dense(CHECK_BF16, m, 40 + causal);
        ref_attn_desc a = p.a;
        a.b = B; a.sq = 6; a.skv = 9;   /* max rows; capacity (unused when packed) */
        a.q_sb = a.k_sb = a.v_sb = 1 << 20;   /* must not be used when packed */
        a.cu_seqlens_q = cq; a.cu_seqlens_k = ck;
        result r = run_ref(&a);
        assert_int_equal(r.rows, cq[B]);
        for (int b = 0; b < B; b++) {
            ref_attn_desc s = p.a;   /* one dense sequence over the slice */
            s.b = 1; s.sq = nq[b]; s.skv = nk[b];
            s.q = (const char *)p.q + (size_t)cq[b] * p.a.q_ss * esz(&p);
            s.k = (const char *)p.k + (size_t)ck[b] * p.a.k_ss * esz(&p);
            s.v = (const char *)p.v + (size_t)ck[b] * p.a.v_ss * esz(&p);
            result x = run_ref(&s);
            size_t n = (size_t)nq[b] * HQ;
            assert_true(check_maxdiff(x.o, r.o + (size_t)cq[b] * HQ * D, n * D) == 0.0);
            assert_true(check_maxdiff(x.lse, r.lse + (size_t)cq[b] * HQ, n) == 0.0);
            out_free(&x);
        }
        out_free(&r); prob_free(&p);
    }
}

/* ---- (e) paged KV -------------------------------------------------------- */

static void test_ref__paged_shuffled_equals_contiguous(void **state)
{
    (void)state;
    enum { B = 3, PS = 4, PPS = 4, NP = B * PPS + 2 };   /* pages per sequence, 2 spare pages */
    dims m = { B, 3, PS * PPS, 8, 4, 8, 8, 1 };
    int kv_len[B] = { 16, 7, 1 };
    prob p = prob_dense(CHECK_BF16, m, 50);
    p.a.kv_len = kv_len;
    result r = run_ref(&p.a);
    /* a shuffled permutation of NP pages; sequence b, logical page g -> perm[b*PPS + g] */
    int perm[NP], bt[B * (PPS + 1)];
    check_rng rng;
    check_rng_seed(&rng, 9);
    for (int i = 0; i < NP; i++)
        perm[i] = i;
    for (int i = NP - 1; i > 0; i--) {
        int j = (int)(check_rng_next(&rng) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j]; perm[j] = t;
    }
    size_t es = esz(&p), page_k = (size_t)PS * m.hkv * m.d, page_v = (size_t)PS * m.hkv * m.dv;
    char *kc = malloc(NP * page_k * es), *vc = malloc(NP * page_v * es);
    check_fill_nan(p.a.dtype, kc, NP * page_k);
    check_fill_nan(p.a.dtype, vc, NP * page_v);
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < PPS; g++) {
            int pg = perm[b * PPS + g];
            bt[b * (PPS + 1) + g] = pg;
            size_t tok = (size_t)b * m.skv + (size_t)g * PS;   /* first token of the page */
            size_t live = kv_len[b] > g * PS ? (size_t)(kv_len[b] - g * PS) : 0;
            live = live < PS ? live : PS;   /* tails past kv_len stay NaN */
            memcpy(kc + pg * page_k * es, (char *)p.k + tok * m.hkv * m.d * es, live * m.hkv * m.d * es);
            memcpy(vc + pg * page_v * es, (char *)p.v + tok * m.hkv * m.dv * es, live * m.hkv * m.dv * es);
        }
        bt[b * (PPS + 1) + PPS] = -1;   /* padding column, never read */
    }
    ref_attn_desc a = p.a;
    a.k = kc; a.v = vc;
    a.block_table = bt; a.bt_sb = PPS + 1; a.page_size = PS;
    a.k_ss = (long long)m.hkv * m.d;  a.k_sb = a.k_ss * PS;
    a.v_ss = (long long)m.hkv * m.dv; a.v_sb = a.v_ss * PS;
    result x = run_ref(&a);
    assert_same(&r, &x, m.hq, m.dv, 0.0);
    for (size_t i = 0; i < (size_t)(x.rows * m.hq * m.dv); i++)
        assert_true(isfinite(x.o[i]));   /* no NaN tail was read */
    out_free(&r); out_free(&x); prob_free(&p);
    free(kc); free(vc);
}

/* ---- (f) GQA head mapping ------------------------------------------------ */

/* K/V expanded to hq heads with kv head map(h): an MHA problem. */
static prob expand(const prob *p, int (*map)(int h, int hq, int hkv))
{
    dims m = { p->a.b, p->a.sq, p->a.skv, p->a.hq, p->a.hq, p->a.d, p->a.dv, p->a.causal };
    prob e = prob_dense(p->a.dtype, m, 0);
    size_t es = esz(p);
    memcpy(e.q, p->q, (size_t)m.b * m.sq * m.hq * m.d * es);
    for (int b = 0; b < m.b; b++) {
        for (int j = 0; j < m.skv; j++) {
            for (int h = 0; h < m.hq; h++) {
                size_t src = ((size_t)b * m.skv + j) * p->a.hkv + (size_t)map(h, p->a.hq, p->a.hkv);
                size_t dst = ((size_t)b * m.skv + j) * m.hq + h;
                memcpy((char *)e.k + dst * m.d * es, (char *)p->k + src * m.d * es, m.d * es);
                memcpy((char *)e.v + dst * m.dv * es, (char *)p->v + src * m.dv * es, m.dv * es);
            }
        }
    }
    return e;
}

static int map_native(int h, int hq, int hkv) { return h / (hq / hkv); }
static int map_buggy(int h, int hq, int hkv) { (void)hq; return (h / hkv) % hkv; }

static void gqa_case(int hq, int hkv, bool bug_visible)
{
    dims m = { 2, 4, 6, hq, hkv, 8, 8, 1 };
    prob p = prob_dense(CHECK_FP16, m, 60 + hq * 10 + hkv);
    prob good = expand(&p, map_native), bad = expand(&p, map_buggy);
    result r = run_ref(&p.a), xg = run_ref(&good.a), xb = run_ref(&bad.a);
    assert_same(&r, &xg, hq, m.dv, 0.0);
    size_t n = (size_t)(r.rows * hq * m.dv);
    if (bug_visible)
        assert_true(check_maxdiff(r.o, xb.o, n) > 1e-3);   /* the test would catch the slip */
    else
        assert_true(check_maxdiff(r.o, xb.o, n) == 0.0);   /* ratios where the slip hides */
    out_free(&r); out_free(&xg); out_free(&xb);
    prob_free(&p); prob_free(&good); prob_free(&bad);
}

static void test_ref__gqa_8_4_equals_expanded_mha(void **state) { (void)state; gqa_case(8, 4, true); }
static void test_ref__gqa_8_2_equals_expanded_mha(void **state) { (void)state; gqa_case(8, 2, true); }
static void test_ref__gqa_6_2_equals_expanded_mha(void **state) { (void)state; gqa_case(6, 2, true); }
static void test_ref__gqa_4_2_hides_buggy_mapping(void **state) { (void)state; gqa_case(4, 2, false); }

/* ---- (g) causal alignment ------------------------------------------------ */

static void test_ref__causal_is_bottom_right_aligned(void **state)
{
    (void)state;
    dims m = { 1, 3, 7, 2, 1, 8, 8, 1 };
    prob p = prob_dense(CHECK_BF16, m, 70);
    result r = run_ref(&p.a);
    for (int i = 0; i < m.sq; i++) {
        /* query i attends, without a mask, to exactly keys 0 .. i + skv - sq */
        ref_attn_desc s = p.a;
        s.causal = 0; s.sq = 1; s.skv = i + m.skv - m.sq + 1;
        s.q = (const char *)p.q + (size_t)i * p.a.q_ss * esz(&p);
        result x = run_ref(&s);
        assert_true(check_maxdiff(x.o, r.o + (size_t)i * m.hq * m.dv, (size_t)m.hq * m.dv) == 0.0);
        assert_true(check_maxdiff(x.lse, r.lse + (size_t)i * m.hq, m.hq) == 0.0);
        /* top-left alignment (keys 0 .. i) would give something else */
        s.skv = i + 1;
        result tl = run_ref(&s);
        assert_true(check_maxdiff(tl.o, r.o + (size_t)i * m.hq * m.dv, (size_t)m.hq * m.dv) > 1e-6);
        out_free(&x); out_free(&tl);
    }
    out_free(&r); prob_free(&p);
}

/* ---- (h) empty rows ------------------------------------------------------ */

static void test_ref__empty_sequence_gives_zero_and_neg_inf(void **state)
{
    (void)state;
    dims m = { 2, 3, 5, 4, 2, 8, 8, 0 };
    prob p = prob_dense(CHECK_BF16, m, 80);
    int kv_len[2] = { 0, 5 };
    p.a.kv_len = kv_len;
    result r = run_ref(&p.a);
    for (size_t i = 0; i < (size_t)m.sq * m.hq; i++) {
        assert_true(r.lse[i] == -INFINITY);
        for (int c = 0; c < m.dv; c++)
            assert_true(r.o[i * m.dv + c] == 0.0);
    }
    for (size_t i = (size_t)m.sq * m.hq; i < (size_t)2 * m.sq * m.hq; i++)
        assert_true(isfinite(r.lse[i]));
    result x = split_combine(&p.a, 2, 3);
    assert_same(&r, &x, m.hq, m.dv, 1e-12);
    out_free(&r); out_free(&x); prob_free(&p);
}

static void test_ref__causal_rows_before_first_key_are_empty(void **state)
{
    (void)state;
    dims m = { 1, 5, 2, 2, 1, 8, 8, 1 };   /* rows 0..2 see no key: i + 2 - 5 < 0 */
    prob p = prob_dense(CHECK_FP16, m, 81);
    result r = run_ref(&p.a);
    for (int i = 0; i < m.sq; i++)
        for (int h = 0; h < m.hq; h++)
            assert_true((r.lse[i * m.hq + h] == -INFINITY) == (i < 3));
    out_free(&r); prob_free(&p);
}

/* ---- check_ -------------------------------------------------------------- */

static void test_check__bf16_round_trip(void **state)
{
    (void)state;
    for (uint32_t u = 0; u < 0x10000u; u++) {
        float f = check_bf16_to_f32((uint16_t)u);
        if (isnan(f))
            assert_true(isnan(check_bf16_to_f32(check_f32_to_bf16(f))));
        else
            assert_int_equal(check_f32_to_bf16(f), u);
    }
}

static void test_check__fp16_round_trip(void **state)
{
    (void)state;
    for (uint32_t u = 0; u < 0x10000u; u++) {
        float f = check_fp16_to_f32((uint16_t)u);
        if (isnan(f))
            assert_true(isnan(check_fp16_to_f32(check_f32_to_fp16(f))));
        else
            assert_int_equal(check_f32_to_fp16(f), u);
    }
}

static void test_check__fp16_known_values(void **state)
{
    (void)state;
    assert_true(check_fp16_to_f32(0x3C00) == 1.0f);
    assert_true(check_fp16_to_f32(0xC000) == -2.0f);
    assert_true(check_fp16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(check_fp16_to_f32(0x7BFF) == 65504.0f);
    assert_true(check_fp16_to_f32(0xFC00) == -INFINITY);
    assert_true(check_bf16_to_f32(0x3F80) == 1.0f);
    assert_true(check_bf16_to_f32(0xFF80) == -INFINITY);
}

static void test_check__round_to_nearest_even(void **state)
{
    (void)state;
    /* bf16: 8 significant bits */
    assert_int_equal(check_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);           /* tie -> even (down) */
    assert_int_equal(check_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);       /* tie -> even (up) */
    assert_int_equal(check_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81); /* above tie -> up */
    assert_int_equal(check_f32_to_bf16(-(1.0f + 0x1p-8f)), 0xBF80);
    assert_int_equal(check_f32_to_bf16(0x1.FFp127f), 0x7F80);              /* overflow -> inf */
    /* fp16: 11 significant bits */
    assert_int_equal(check_f32_to_fp16(1.0f + 0x1p-11f), 0x3C00);
    assert_int_equal(check_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);
    assert_int_equal(check_f32_to_fp16(65519.0f), 0x7BFF);
    assert_int_equal(check_f32_to_fp16(65520.0f), 0x7C00);                 /* tie at max -> inf */
    assert_int_equal(check_f32_to_fp16(-1e10f), 0xFC00);
    assert_int_equal(check_f32_to_fp16(0x1p-25f), 0x0000);                 /* subnormal tie -> 0 */
    assert_int_equal(check_f32_to_fp16(3 * 0x1p-25f), 0x0002);            /* 1.5 units -> 2 */
    assert_int_equal(check_f32_to_fp16(0x1p-24f), 0x0001);
    assert_int_equal(check_f32_to_fp16(1023.5f * 0x1p-24f), 0x0400);      /* rounds up to the smallest normal */
    assert_int_equal(check_f32_to_fp16(-0x1p-26f), 0x8000);                /* -0 */
}

static void test_check__nan_is_preserved(void **state)
{
    (void)state;
    float qnan = NAN, snan;
    uint32_t sbits = 0x7F800001u;   /* signalling NaN whose payload is all in the low bits */
    memcpy(&snan, &sbits, sizeof snan);
    assert_true(isnan(check_bf16_to_f32(check_f32_to_bf16(qnan))));
    assert_true(isnan(check_bf16_to_f32(check_f32_to_bf16(snan))));
    assert_true(isnan(check_fp16_to_f32(check_f32_to_fp16(snan))));
    assert_true(isnan(check_fp16_to_f32(check_f32_to_fp16(-qnan))));
}

static void test_check__fills(void **state)
{
    (void)state;
    uint16_t a[256], b[256], c[256];
    check_fill_uniform(CHECK_BF16, a, 256, 5);
    check_fill_uniform(CHECK_BF16, b, 256, 5);
    check_fill_uniform(CHECK_BF16, c, 256, 6);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    int zeros = 0;
    for (int i = 0; i < 256; i++) {
        double x = check_load(CHECK_BF16, a, i);
        assert_true(x >= -1.0 && x <= 1.0);
        zeros += x == 0.0;
    }
    assert_true(zeros < 4);
    check_fill_nan(CHECK_FP16, a, 256);
    for (int i = 0; i < 256; i++) {
        assert_true(isnan(check_load(CHECK_FP16, a, i)));
        assert_false(check_is_poison(CHECK_FP16, a, i));
    }
    assert_true(check_fresh_seed() != check_fresh_seed());
}

static void test_check__exact_output_passes(void **state)
{
    (void)state;
    double ref[64];
    uint16_t out[64];
    check_fill_uniform(CHECK_BF16, out, 64, 11);
    for (int i = 0; i < 64; i++)
        ref[i] = check_load(CHECK_BF16, out, i);
    check_stats st;
    check_compare(CHECK_BF16, out, ref, 64, &st);
    assert_true(st.rel_err == 0.0 && st.max_abs == 0.0);
    assert_true(check_pass(&st, check_tol(CHECK_BF16)));
    ref[3] += 1.0;   /* one large error fails */
    check_compare(CHECK_BF16, out, ref, 64, &st);
    assert_false(check_pass(&st, check_tol(CHECK_BF16)));
    assert_true(fabs(st.max_abs - 1.0) < 1e-12);
}

static void test_check__nan_fails(void **state)
{
    (void)state;
    double ref[16];
    float out[16];
    for (int i = 0; i < 16; i++)
        out[i] = (float)(ref[i] = i + 1);
    check_stats st;
    out[7] = NAN;
    check_compare(CHECK_FP32, out, ref, 16, &st);
    assert_int_equal(st.nonfinite, 1);
    assert_int_equal(st.unwritten, 0);
    assert_false(check_pass(&st, 1e30));
    out[7] = INFINITY;
    check_compare(CHECK_FP32, out, ref, 16, &st);
    assert_false(check_pass(&st, 1e30));
}

static void test_check__unwritten_fails(void **state)
{
    (void)state;
    double ref[16] = { 0 };
    uint16_t out[16];
    check_poison(CHECK_FP16, out, 16);
    for (int i = 0; i < 16; i++)
        if (i != 9)
            out[i] = check_f32_to_fp16(0.0f);
    check_stats st;
    check_compare(CHECK_FP16, out, ref, 16, &st);
    assert_int_equal(st.unwritten, 1);
    assert_int_equal(st.nonfinite, 0);   /* poison is counted once, as unwritten */
    assert_true(st.rel_err == 0.0);      /* ref = 0, written part exact */
    assert_false(check_pass(&st, 1e30));
    char msg[200];
    check_format(msg, sizeof msg, &st, 1e-2);
    assert_non_null(strstr(msg, "unwritten 1"));
    assert_non_null(strstr(msg, "FAIL"));
}

static void test_check__zero_ref_norm(void **state)
{
    (void)state;
    double ref[4] = { 0 };
    float out[4] = { 0, 0, 3, 4 };
    check_stats st;
    check_compare(CHECK_FP32, out, ref, 4, &st);
    assert_true(st.ref_norm == 0.0);
    assert_true(fabs(st.rel_err - 5.0) < 1e-12);   /* falls back to ||out - ref|| */
    assert_false(check_pass(&st, 1e-2));
}

static void test_check__lse(void **state)
{
    (void)state;
    double ref[4] = { 1.0, -INFINITY, 2.0, 3.0 };
    float out[4] = { 1.0f, -INFINITY, 2.0f, 3.0f };
    check_lse_stats st;
    check_compare_lse(out, ref, 4, &st);
    assert_true(check_lse_pass(&st, CHECK_LSE_TOL));
    out[1] = -1e30f;   /* finite where the reference is -inf */
    check_compare_lse(out, ref, 4, &st);
    assert_int_equal(st.inf_mismatch, 1);
    assert_false(check_lse_pass(&st, 1e30));
    out[1] = -INFINITY; out[2] = -INFINITY;   /* -inf where the reference is finite */
    check_compare_lse(out, ref, 4, &st);
    assert_false(check_lse_pass(&st, 1e30));
    out[2] = NAN;
    check_compare_lse(out, ref, 4, &st);
    assert_int_equal(st.bad, 1);
    assert_false(check_lse_pass(&st, 1e30));
    check_poison(CHECK_FP32, out + 2, 1);
    check_compare_lse(out, ref, 4, &st);
    assert_int_equal(st.unwritten, 1);
    assert_false(check_lse_pass(&st, 1e30));
    out[2] = 2.01f;
    check_compare_lse(out, ref, 4, &st);
    assert_true(check_lse_pass(&st, 0.02));
    assert_false(check_lse_pass(&st, 0.005));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref__matches_brute_force),
        cmocka_unit_test(test_ref__kv_len_matches_brute_force),
        cmocka_unit_test(test_ref__brute_force_sees_wrong_mask),
        cmocka_unit_test(test_ref__split_combine_equals_unsplit),
        cmocka_unit_test(test_ref__split_range_rule),
        cmocka_unit_test(test_ref__combine_all_empty),
        cmocka_unit_test(test_ref__combine_two_halves),
        cmocka_unit_test(test_ref__strided_equals_contiguous),
        cmocka_unit_test(test_ref__packed_equals_dense_per_sequence),
        cmocka_unit_test(test_ref__paged_shuffled_equals_contiguous),
        cmocka_unit_test(test_ref__gqa_8_4_equals_expanded_mha),
        cmocka_unit_test(test_ref__gqa_8_2_equals_expanded_mha),
        cmocka_unit_test(test_ref__gqa_6_2_equals_expanded_mha),
        cmocka_unit_test(test_ref__gqa_4_2_hides_buggy_mapping),
        cmocka_unit_test(test_ref__causal_is_bottom_right_aligned),
        cmocka_unit_test(test_ref__empty_sequence_gives_zero_and_neg_inf),
        cmocka_unit_test(test_ref__causal_rows_before_first_key_are_empty),
        cmocka_unit_test(test_check__bf16_round_trip),
        cmocka_unit_test(test_check__fp16_round_trip),
        cmocka_unit_test(test_check__fp16_known_values),
        cmocka_unit_test(test_check__round_to_nearest_even),
        cmocka_unit_test(test_check__nan_is_preserved),
        cmocka_unit_test(test_check__fills),
        cmocka_unit_test(test_check__exact_output_passes),
        cmocka_unit_test(test_check__nan_fails),
        cmocka_unit_test(test_check__unwritten_fails),
        cmocka_unit_test(test_check__zero_ref_norm),
        cmocka_unit_test(test_check__lse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
