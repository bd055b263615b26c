/* tests/cpu/test_ref_parts.c: the split-score decode reference against explicitly concatenated GQA attention, paging and the joint layer scan */
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
#include "tuner/ref_parts.h"

/* ---- problems ------------------------------------------------------------ */

/* A split-score problem with contiguous parts: queries q_p [b, sq, hq, kdim_p], keys
 * k_p [b, skv, kheads_p, kdim_p], separate values v_v [b, skv, vheads_v, vdim_v]; a value with
 * valias >= 0 has no buffer. Keys and values past kv_len[b] hold NaN. */
typedef struct spec {
    int b, sq, skv, hq, causal;
    const int *kv_len;          /* [b] or NULL */
    int nk, kdim[REF_PARTS_MAX], kheads[REF_PARTS_MAX];
    int nv, valias[REF_PARTS_MAX], vdim[REF_PARTS_MAX], vheads[REF_PARTS_MAX];
    double scale;               /* 0: 1/sqrt(sum kdim) */
} spec;

typedef struct pprob {
    spec s;
    ref_parts_desc a;
    void *q[REF_PARTS_MAX], *k[REF_PARTS_MAX], *v[REF_PARTS_MAX];
} pprob;

#define MLA_SCALE (1.3 / sqrt(192.0))   /* 1/sqrt(qk_head_dim 192) with an mscale, as DeepSeek-V3 passes it */

static size_t esz(check_dtype t) { return check_dtype_size(t); }

static void *at(const void *buf, check_dtype t, long long elems)
{
    return (char *)buf + (size_t)elems * esz(t);
}

static int len_of(const spec *s, int b) { return s->kv_len ? s->kv_len[b] : s->skv; }

/* Rows j >= kv_len[b] of a [b, skv, heads, dim] tensor become NaN: a reader of the tail fails. */
static void nan_tails(check_dtype t, void *x, const spec *s, int heads, int dim)
{
    for (int b = 0; b < s->b; b++) {
        size_t row = (size_t)heads * dim, live = (size_t)len_of(s, b);
        check_fill_nan(t, at(x, t, (long long)(((size_t)b * s->skv + live) * row)), (s->skv - live) * row);
    }
}

static pprob pprob_make(check_dtype t, const spec *s, uint64_t seed)
{
    pprob p = { .s = *s };
    ref_parts_desc *a = &p.a;
    a->dtype = t;
    a->nk = s->nk; a->nv = s->nv;
    a->kv_len = s->kv_len;
    a->b = s->b; a->sq = s->sq; a->skv = s->skv; a->hq = s->hq; a->causal = s->causal;
    int dk = 0;
    for (int i = 0; i < s->nk; i++) {
        int d = s->kdim[i], hk = s->kheads[i];
        size_t nq = (size_t)s->b * s->sq * s->hq * d, nk = (size_t)s->b * s->skv * hk * d;
        p.q[i] = malloc(nq * esz(t) + 1);
        p.k[i] = malloc(nk * esz(t) + 1);
        check_fill_uniform(t, p.q[i], nq, seed + 10 * i);
        check_fill_normal(t, p.k[i], nk, seed + 10 * i + 1, 2.0);   /* wide scores: softmax far from uniform */
        nan_tails(t, p.k[i], s, hk, d);
        ref_kpart *kp = &a->kp[i];
        kp->dim = d; kp->heads = hk;
        kp->q = (ref_strided){ p.q[i], (long long)s->sq * s->hq * d, (long long)s->hq * d, d };
        kp->k = (ref_strided){ p.k[i], (long long)s->skv * hk * d, (long long)hk * d, d };
        dk += d;
    }
    for (int i = 0; i < s->nv; i++) {
        ref_vpart *vp = &a->vp[i];
        vp->alias = s->valias[i];
        vp->dim = s->vdim[i];
        if (vp->alias >= 0)
            continue;
        int d = s->vdim[i], hv = s->vheads[i];
        size_t nv = (size_t)s->b * s->skv * hv * d;
        p.v[i] = malloc(nv * esz(t) + 1);
        check_fill_uniform(t, p.v[i], nv, seed + 100 + 10 * i);
        nan_tails(t, p.v[i], s, hv, d);
        vp->heads = hv;
        vp->v = (ref_strided){ p.v[i], (long long)s->skv * hv * d, (long long)hv * d, d };
    }
    a->scale = s->scale > 0 ? s->scale : 1.0 / sqrt((double)dk);
    return p;
}

static void pprob_free(pprob *p)
{
    for (int i = 0; i < REF_PARTS_MAX; i++) {
        free(p->q[i]); free(p->k[i]); free(p->v[i]);
    }
}

/* ---- the oracle: explicitly concatenated attention through ref_attn ------- */

/* Source head of part p (hp heads) for head kh of an H-head concatenation. */
typedef int (*head_map)(int kh, int H, int hp);
static int map_native(int kh, int H, int hp) { return kh / (H / hp); }
static int map_buggy(int kh, int H, int hp) { (void)H; return (kh / hp) % hp; }

/* q [b, sq, hq, Dk], k [b, skv, H, Dk] = [k_0 | k_1 | ...], v [b, skv, H, Dv] = [v_0 | v_1 | ...]
 * with head kh of part p taken from map(kh, H, heads_p), an aliased value copied out of its
 * key part: a plain GQA problem (H heads) for ref_attn. */
typedef struct oracle {
    ref_attn_desc a;
    void *q, *k, *v;
} oracle;

static oracle oracle_make(const pprob *p, int H, head_map map)
{
    const spec *s = &p->s;
    check_dtype t = p->a.dtype;
    size_t es = esz(t);
    int dk = 0, dv = 0;
    for (int i = 0; i < s->nk; i++)
        dk += s->kdim[i];
    for (int i = 0; i < s->nv; i++)
        dv += s->vdim[i];
    oracle x = { 0 };
    x.q = malloc((size_t)s->b * s->sq * s->hq * dk * es + 1);
    x.k = malloc((size_t)s->b * s->skv * H * dk * es + 1);
    x.v = malloc((size_t)s->b * s->skv * H * dv * es + 1);
    for (size_t r = 0; r < (size_t)s->b * s->sq * s->hq; r++) {
        for (int i = 0, col = 0; i < s->nk; col += s->kdim[i], i++)
            memcpy(at(x.q, t, (long long)(r * dk + col)), at(p->q[i], t, (long long)(r * s->kdim[i])),
                   (size_t)s->kdim[i] * es);
    }
    for (size_t bj = 0; bj < (size_t)s->b * s->skv; bj++) {
        for (int kh = 0; kh < H; kh++) {
            size_t dst = bj * H + kh;
            for (int i = 0, col = 0; i < s->nk; col += s->kdim[i], i++) {
                size_t src = bj * s->kheads[i] + map(kh, H, s->kheads[i]);
                memcpy(at(x.k, t, (long long)(dst * dk + col)), at(p->k[i], t, (long long)(src * s->kdim[i])),
                       (size_t)s->kdim[i] * es);
            }
            for (int i = 0, col = 0; i < s->nv; col += s->vdim[i], i++) {
                int al = s->valias[i];
                const void *from = al >= 0 ? p->k[al] : p->v[i];
                int hp = al >= 0 ? s->kheads[al] : s->vheads[i], rowlen = al >= 0 ? s->kdim[al] : s->vdim[i];
                size_t src = bj * hp + map(kh, H, hp);
                memcpy(at(x.v, t, (long long)(dst * dv + col)), at(from, t, (long long)(src * rowlen)),
                       (size_t)s->vdim[i] * es);
            }
        }
    }
    ref_attn_desc *a = &x.a;
    a->dtype = t;
    a->q = x.q; a->k = x.k; a->v = x.v;
    a->kv_len = s->kv_len;
    a->b = s->b; a->sq = s->sq; a->skv = s->skv; a->hq = s->hq; a->hkv = H;
    a->d = dk; a->dv = dv; a->causal = s->causal; a->scale = p->a.scale;
    a->q_sh = dk; a->q_ss = (long long)s->hq * dk; a->q_sb = a->q_ss * s->sq;
    a->k_sh = dk; a->k_ss = (long long)H * dk;     a->k_sb = a->k_ss * s->skv;
    a->v_sh = dv; a->v_ss = (long long)H * dv;     a->v_sb = a->v_ss * s->skv;
    return x;
}

static void oracle_free(oracle *x) { free(x->q); free(x->k); free(x->v); }

/* ---- results ------------------------------------------------------------- */

typedef struct result {
    double *o, *lse;
    size_t n;      /* row ids */
    int dv;
} result;

static result result_alloc(size_t n, int dv)
{
    result r = { .n = n, .dv = dv };
    r.o = malloc(sizeof(double) * n * (size_t)dv + 1);
    r.lse = malloc(sizeof(double) * n + 1);
    for (size_t i = 0; i < n * (size_t)dv; i++)
        r.o[i] = NAN;   /* every element must be written */
    for (size_t i = 0; i < n; i++)
        r.lse[i] = NAN;
    return r;
}

static void assert_written(const result *r)
{
    for (size_t i = 0; i < r->n * (size_t)r->dv; i++)
        if (!isfinite(r->o[i]))
            fail_msg("o[%zu] = %g", i, r->o[i]);
    for (size_t i = 0; i < r->n; i++)
        if (isnan(r->lse[i]) || r->lse[i] == INFINITY)
            fail_msg("lse[%zu] = %g", i, r->lse[i]);
}

static result run_parts(const ref_parts_desc *a)
{
    result r = result_alloc((size_t)a->b * a->sq * a->hq, ref_parts_dv(a));
    ref_parts(a, r.o, r.lse);
    assert_written(&r);
    return r;
}

static result run_attn(const ref_attn_desc *a)
{
    result r = result_alloc((size_t)ref_attn_rows(a) * a->hq, a->dv);
    ref_attn(a, r.o, r.lse);
    assert_written(&r);
    return r;
}

/* Layer l of a joint-scan result, as its own result (a view: not freed). */
static result layer_of(const result *all, int l, size_t n)
{
    result r = { all->o + (size_t)l * n * all->dv, all->lse + (size_t)l * n, n, all->dv };
    return r;
}

static void result_free(result *r) { free(r->o); free(r->lse); }


static void assert_same(const result *x, const result *y, double tol)
{
    assert_int_equal(x->n, y->n);
    assert_int_equal(x->dv, y->dv);
    double eo = check_maxdiff(x->o, y->o, x->n * (size_t)x->dv), el = check_maxdiff(x->lse, y->lse, x->n);
    if (!(eo <= tol) || !(el <= tol))
        fail_msg("o differs by %g, lse by %g (tol %g)", eo, el, tol);
}

static double odiff(const result *x, const result *y)
{
    assert_int_equal(x->n * (size_t)x->dv, y->n * (size_t)y->dv);
    return check_maxdiff(x->o, y->o, x->n * (size_t)x->dv);
}

/* ---- (a) absorbed MLA equals one-head attention over [latent | rope] -------- */

static spec mla_spec(int b, int sq, int skv, int hq, const int *kv_len)
{
    spec s = { .b = b, .sq = sq, .skv = skv, .hq = hq, .causal = sq > 1, .kv_len = kv_len,
               .nk = 2, .kdim = { 512, 64 }, .kheads = { 1, 1 },
               .nv = 1, .valias = { 0 }, .vdim = { 512 }, .scale = MLA_SCALE };
    return s;
}

static void mla_case(int hq, int sq, int b, int skv, const int *kv_len, uint64_t seed)
{
    spec s = mla_spec(b, sq, skv, hq, kv_len);
    pprob p = pprob_make(CHECK_BF16, &s, seed);
    oracle x = oracle_make(&p, 1, map_native);   /* K [.., 1, 576], V = a copy of the latent */
    result r = run_parts(&p.a), e = run_attn(&x.a);
    assert_same(&r, &e, 1e-12);
    result_free(&r); result_free(&e); oracle_free(&x); pprob_free(&p);
}

static void test_ref_parts__mla_equals_concatenated_one_head(void **state)
{
    (void)state;
    static const int lens4[4] = { 1, 63, 64, 65 }, ragged[3] = { 64, 0, 65 };
    static const int hqs[2] = { 16, 128 };
    for (int k = 0; k < 2; k++) {
        for (int sq = 1; sq <= 2; sq++) {
            uint64_t seed = 1000 + 10 * k + sq;
            mla_case(hqs[k], sq, 4, 65, lens4, seed);
            mla_case(hqs[k], sq, 3, 65, ragged, seed + 100);
            mla_case(hqs[k], sq, 1, 64, NULL, seed + 200);
        }
    }
}

/* ---- (b) the value must alias the latent, not the rope ------------------- */

static void test_ref_parts__mla_one_cache_alias_and_offset_mutant(void **state)
{
    /* The real layout: one cache [b, skv, 1, 576] = [latent 512 | rope 64], one query
     * [b, sq, hq, 576]; the parts are pointers into them, the value aliases the latent. */
    (void)state;
    enum { B = 2, SQ = 2, SKV = 33, HQ = 16, D = 576 };
    check_dtype t = CHECK_BF16;
    static const int kv_len[B] = { 33, 20 };
    spec s = mla_spec(B, SQ, SKV, HQ, kv_len);
    pprob p = pprob_make(t, &s, 77);   /* only for the fields of the description */
    void *q = malloc((size_t)B * SQ * HQ * D * esz(t)), *kv = malloc((size_t)B * SKV * D * esz(t));
    check_fill_uniform(t, q, (size_t)B * SQ * HQ * D, 78);
    check_fill_normal(t, kv, (size_t)B * SKV * D, 79, 2.0);
    nan_tails(t, kv, &s, 1, D);
    ref_parts_desc a = p.a;
    a.kp[0].q = (ref_strided){ q, (long long)SQ * HQ * D, (long long)HQ * D, D };
    a.kp[1].q = (ref_strided){ at(q, t, 512), (long long)SQ * HQ * D, (long long)HQ * D, D };
    a.kp[0].k = (ref_strided){ kv, (long long)SKV * D, D, D };
    a.kp[1].k = (ref_strided){ at(kv, t, 512), (long long)SKV * D, D, D };
    /* ref_attn reads the value as the first dv = 512 columns of the same cache */
    ref_attn_desc r = { .dtype = t, .q = q, .k = kv, .v = kv, .kv_len = kv_len,
                        .q_sb = (long long)SQ * HQ * D, .q_ss = (long long)HQ * D, .q_sh = D,
                        .k_sb = (long long)SKV * D, .k_ss = D, .k_sh = D,
                        .v_sb = (long long)SKV * D, .v_ss = D, .v_sh = D,
                        .b = B, .sq = SQ, .skv = SKV, .hq = HQ, .hkv = 1, .d = D, .dv = 512,
                        .causal = 1, .scale = MLA_SCALE };
    result x = run_parts(&a), e = run_attn(&r);
    assert_same(&x, &e, 1e-12);
    /* the mutant: the value read 64 columns late, so it takes in the rope columns */
    ref_parts_desc m = a;
    m.vp[0] = (ref_vpart){ .alias = -1, .v = { at(kv, t, 64), (long long)SKV * D, D, D },
                           .dim = 512, .heads = 1 };
    result xm = run_parts(&m);
    assert_true(odiff(&xm, &e) > 1e-3);
    /* and the same value as a separate buffer at offset 0 is the alias */
    m.vp[0].v.p = kv;
    result xs = run_parts(&m);
    assert_same(&xs, &x, 0.0);
    result_free(&x); result_free(&e); result_free(&xm); result_free(&xs);
    free(q); free(kv); pprob_free(&p);
}

/* ---- (c) base + delta equals GQA on [base | delta] ------------------------ */

static spec bd_spec(int b, int sq, int skv, int hq, int hkv, const int *kv_len)
{
    spec s = { .b = b, .sq = sq, .skv = skv, .hq = hq, .causal = sq > 1, .kv_len = kv_len,
               .nk = 2, .kdim = { 128, 32 }, .kheads = { hkv, hkv },
               .nv = 2, .valias = { -1, -1 }, .vdim = { 128, 32 }, .vheads = { hkv, hkv } };
    return s;
}

static void base_delta_case(int hq, int hkv)
{
    static const int kv_len[3] = { 33, 0, 17 };
    for (int sq = 1; sq <= 2; sq++) {
        spec s = bd_spec(3, sq, 33, hq, hkv, kv_len);
        pprob p = pprob_make(CHECK_BF16, &s, 300 + 10 * hq + hkv + sq);
        oracle g = oracle_make(&p, hkv, map_native);   /* GQA, k and v of dim 160 */
        oracle mha = oracle_make(&p, hq, map_native);  /* expanded to hq heads */
        oracle bug = oracle_make(&p, hq, map_buggy);   /* expanded with (h / hkv) % hkv */
        result r = run_parts(&p.a), eg = run_attn(&g.a), em = run_attn(&mha.a), eb = run_attn(&bug.a);
        assert_same(&r, &eg, 1e-12);
        assert_same(&r, &em, 1e-12);
        assert_true(odiff(&r, &eb) > 1e-3);   /* the comparison sees the head-mapping slip */
        result_free(&r); result_free(&eg); result_free(&em); result_free(&eb);
        oracle_free(&g); oracle_free(&mha); oracle_free(&bug); pprob_free(&p);
    }
}

static void test_ref_parts__base_delta_8_4_equals_concatenated_gqa(void **state) { (void)state; base_delta_case(8, 4); }
static void test_ref_parts__base_delta_8_2_equals_concatenated_gqa(void **state) { (void)state; base_delta_case(8, 2); }

static void test_ref_parts__per_part_head_counts(void **state)
{
    /* parts with their own kv head counts (base 2 heads, delta 4, value parts 1 and 8) equal
     * MHA attention with each part expanded by its own h / (hq / heads_p) */
    (void)state;
    static const int kv_len[2] = { 21, 9 };
    spec s = { .b = 2, .sq = 2, .skv = 21, .hq = 8, .causal = 1, .kv_len = kv_len,
               .nk = 3, .kdim = { 48, 16, 8 }, .kheads = { 2, 4, 1 },
               .nv = 3, .valias = { -1, 1, -1 }, .vdim = { 24, 8, 16 }, .vheads = { 1, 0, 8 } };
    pprob p = pprob_make(CHECK_FP16, &s, 400);
    oracle x = oracle_make(&p, 8, map_native);
    result r = run_parts(&p.a), e = run_attn(&x.a);
    assert_same(&r, &e, 1e-12);
    assert_int_equal(ref_parts_dv(&p.a), 48);
    assert_int_equal(ref_parts_vcol(&p.a, 2), 32);
    result_free(&r); result_free(&e); oracle_free(&x); pprob_free(&p);
}

/* ---- (d) paged KV -------------------------------------------------------- */

/* A shuffled block table [b, pps + 1] over np >= b*pps pages: sequence b, logical page g ->
 * perm[b*pps + g]; the last column is padding (-1), never read. */
static int *shuffled_table(int b, int pps, int np, uint64_t seed)
{
    int *perm = malloc(sizeof(int) * (size_t)np), *bt = malloc(sizeof(int) * (size_t)b * (pps + 1));
    check_rng rng;
    check_rng_seed(&rng, seed);
    for (int i = 0; i < np; i++)
        perm[i] = i;
    for (int i = np - 1; i > 0; i--) {
        int j = (int)(check_rng_next(&rng) % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j]; perm[j] = x;
    }
    for (int s = 0; s < b; s++) {
        for (int g = 0; g < pps; g++)
            bt[s * (pps + 1) + g] = perm[s * pps + g];
        bt[s * (pps + 1) + pps] = -1;
    }
    free(perm);
    return bt;
}

/* Copy the live keys of a contiguous [b, skv, heads, dim] tensor into columns [col, col + dim)
 * of a page pool [np, ps, heads, rs]; the pool was NaN before, so unused pages and every row
 * past a sequence's length stay NaN. */
static void page_in(check_dtype t, void *pool, int ps, int rs, int col, const void *src, const spec *s,
                    int heads, int dim, const int *bt, int bt_sb)
{
    for (int b = 0; b < s->b; b++) {
        for (int j = 0; j < len_of(s, b); j++) {
            long long page = bt[b * bt_sb + j / ps];
            for (int kh = 0; kh < heads; kh++)
                memcpy(at(pool, t, ((page * ps + j % ps) * heads + kh) * rs + col),
                       at(src, t, (((long long)b * s->skv + j) * heads + kh) * dim), (size_t)dim * esz(t));
        }
    }
}

static void *nan_pool(check_dtype t, size_t n)
{
    void *x = malloc(n * esz(t));
    check_fill_nan(t, x, n);
    return x;
}

static void test_ref_parts__mla_paged_equals_contiguous(void **state)
{
    /* FlashMLA's layout: one paged cache [pages, ps, 1, 576], the rope 512 columns in */
    (void)state;
    enum { B = 4, SKV = 130, HQ = 16, D = 576 };
    static const int kv_len[B] = { 65, 130, 1, 0 }, pss[2] = { 16, 64 };
    check_dtype t = CHECK_BF16;
    for (int k = 0; k < 2; k++) {
        for (int sq = 1; sq <= 2; sq++) {
            int ps = pss[k], pps = (SKV + ps - 1) / ps, np = B * pps + 3;
            spec s = mla_spec(B, sq, SKV, HQ, kv_len);
            pprob p = pprob_make(t, &s, 500 + 10 * k + sq);
            int *bt = shuffled_table(B, pps, np, 510 + k);
            void *pool = nan_pool(t, (size_t)np * ps * D);
            page_in(t, pool, ps, D, 0, p.k[0], &s, 1, 512, bt, pps + 1);
            page_in(t, pool, ps, D, 512, p.k[1], &s, 1, 64, bt, pps + 1);
            ref_parts_desc a = p.a;
            a.block_table = bt; a.bt_sb = pps + 1; a.page_size = ps;
            a.kp[0].k = (ref_strided){ pool, (long long)ps * D, D, D };
            a.kp[1].k = (ref_strided){ at(pool, t, 512), (long long)ps * D, D, D };
            a.kp[0].paged = a.kp[1].paged = 1;
            result r = run_parts(&p.a), x = run_parts(&a);   /* run_parts: every o finite */
            assert_same(&x, &r, 0.0);   /* same arithmetic in the same order */
            result_free(&r); result_free(&x);
            free(pool); free(bt); pprob_free(&p);
        }
    }
}

static void test_ref_parts__base_delta_paged_equals_contiguous(void **state)
{
    /* base and delta keys and the base value paged through one table; the delta value is not */
    (void)state;
    enum { B = 3, SKV = 40, HQ = 8, HKV = 4, PS = 8, PPS = SKV / PS, NP = B * PPS + 2 };
    static const int kv_len[B] = { 40, 8, 0 };
    check_dtype t = CHECK_FP16;
    spec s = bd_spec(B, 2, SKV, HQ, HKV, kv_len);
    pprob p = pprob_make(t, &s, 600);
    int *bt = shuffled_table(B, PPS, NP, 601);
    void *kb = nan_pool(t, (size_t)NP * PS * HKV * 128), *kd = nan_pool(t, (size_t)NP * PS * HKV * 32);
    void *vb = nan_pool(t, (size_t)NP * PS * HKV * 128);
    page_in(t, kb, PS, 128, 0, p.k[0], &s, HKV, 128, bt, PPS + 1);
    page_in(t, kd, PS, 32, 0, p.k[1], &s, HKV, 32, bt, PPS + 1);
    page_in(t, vb, PS, 128, 0, p.v[0], &s, HKV, 128, bt, PPS + 1);
    ref_parts_desc a = p.a;
    a.block_table = bt; a.bt_sb = PPS + 1; a.page_size = PS;
    a.kp[0].k = (ref_strided){ kb, (long long)PS * HKV * 128, HKV * 128, 128 };
    a.kp[1].k = (ref_strided){ kd, (long long)PS * HKV * 32, HKV * 32, 32 };
    a.vp[0].v = (ref_strided){ vb, (long long)PS * HKV * 128, HKV * 128, 128 };
    a.kp[0].paged = a.kp[1].paged = a.vp[0].paged = 1;
    result r = run_parts(&p.a), x = run_parts(&a);
    assert_same(&x, &r, 0.0);
    result_free(&r); result_free(&x);
    free(kb); free(kd); free(vb); free(bt); pprob_free(&p);
}

/* ---- (e) joint layer-group scan ------------------------------------------ */

/* L layers of base 128 + delta 32 (GQA 8/4): problem l has its own queries, delta keys and
 * delta values and a copy of the one base cache; the group points at layer 0's base. */
typedef struct group {
    pprob p[REF_PARTS_MAX_LAYERS];
    ref_parts_layers_desc g;
    size_t n;   /* row ids per layer */
} group;

static group group_make(int L, int sq, const int *kv_len, uint64_t seed)
{
    group x = { 0 };
    spec s = bd_spec(3, sq, 40, 8, 4, kv_len);
    size_t nb = (size_t)s.b * s.skv * 4 * 128 * esz(CHECK_BF16);
    for (int l = 0; l < L; l++) {
        x.p[l] = pprob_make(CHECK_BF16, &s, seed + 1000 * l);
        if (l > 0) {
            memcpy(x.p[l].k[0], x.p[0].k[0], nb);   /* one shared base cache */
            memcpy(x.p[l].v[0], x.p[0].v[0], nb);
        }
    }
    ref_parts_layers_desc *g = &x.g;
    g->shared = x.p[0].a;
    g->shared.nk = g->shared.nv = 1;
    g->shared.kp[0].q = (ref_strided){ 0 };   /* not read: each layer has its own */
    g->layers = L;
    for (int l = 0; l < L; l++) {
        g->q_base[l] = x.p[l].a.kp[0].q;
        g->delta[l] = x.p[l].a.kp[1];
        g->delta_v[l] = x.p[l].a.vp[1];
    }
    x.n = (size_t)s.b * s.sq * s.hq;
    return x;
}

static void group_free(group *x)
{
    for (int l = 0; l < x->g.layers; l++)
        pprob_free(&x->p[l]);
}

static result run_layers(const group *x, ref_parts_mut mut)
{
    result r = result_alloc(x->n * (size_t)x->g.layers, ref_parts_layers_dv(&x->g));
    ref_parts_layers(&x->g, mut, r.o, r.lse);
    assert_written(&r);
    return r;
}

static void test_ref_parts__layers_equal_each_layer_alone(void **state)
{
    (void)state;
    static const int kv_len[3] = { 40, 0, 17 };
    for (int L = 1; L <= REF_PARTS_MAX_LAYERS; L++) {
        for (int sq = 1; sq <= 2; sq++) {
            group x = group_make(L, sq, kv_len, 700 + 10 * L + sq);
            assert_int_equal(ref_parts_layers_dv(&x.g), 160);
            result all = run_layers(&x, REF_PARTS_EXACT), mut = run_layers(&x, REF_PARTS_MUT_DELTA_AFTER_SOFTMAX);
            for (int l = 0; l < L; l++) {
                result one = run_parts(&x.p[l].a), lay = layer_of(&all, l, x.n), lm = layer_of(&mut, l, x.n);
                assert_same(&lay, &one, 1e-12);
                oracle c = oracle_make(&x.p[l], 4, map_native);   /* and the explicit concatenation */
                result e = run_attn(&c.a);
                assert_same(&lay, &e, 1e-12);
                assert_true(odiff(&lm, &one) > 1e-3);   /* delta after the softmax: caught */
                result_free(&one); result_free(&e); oracle_free(&c);
            }
            result_free(&all); result_free(&mut); group_free(&x);
        }
    }
}

static void test_ref_parts__layers_paged_base(void **state)
{
    /* the shared base through the block table gives the contiguous answer for every layer */
    (void)state;
    enum { PS = 8, PPS = 5, NP = 3 * PPS + 1 };
    static const int kv_len[3] = { 40, 23, 1 };
    check_dtype t = CHECK_BF16;
    group x = group_make(3, 2, kv_len, 800);
    result r = run_layers(&x, REF_PARTS_EXACT);
    int *bt = shuffled_table(3, PPS, NP, 801);
    void *kb = nan_pool(t, (size_t)NP * PS * 4 * 128), *vb = nan_pool(t, (size_t)NP * PS * 4 * 128);
    page_in(t, kb, PS, 128, 0, x.p[0].k[0], &x.p[0].s, 4, 128, bt, PPS + 1);
    page_in(t, vb, PS, 128, 0, x.p[0].v[0], &x.p[0].s, 4, 128, bt, PPS + 1);
    group y = x;
    ref_parts_desc *a = &y.g.shared;
    a->block_table = bt; a->bt_sb = PPS + 1; a->page_size = PS;
    a->kp[0].k = (ref_strided){ kb, (long long)PS * 4 * 128, 4 * 128, 128 };
    a->vp[0].v = (ref_strided){ vb, (long long)PS * 4 * 128, 4 * 128, 128 };
    a->kp[0].paged = a->vp[0].paged = 1;
    result p = run_layers(&y, REF_PARTS_EXACT);
    assert_same(&p, &r, 0.0);
    result_free(&r); result_free(&p);
    free(kb); free(vb); free(bt); group_free(&x);
}

/* ---- (e2) the FP8 latent cache: scale(token) * e4m3 -------------------------- */

/* One [B, SKV, 1, 576] e4m3 cache (0x7f, NaN, past each length) with per-token scales 2^-(4..9) (NaN past each
 * length), and the bf16 cache of its dequantised values (exact: an e4m3 value has 4 significant bits): the FP8
 * reference equals the bf16 one on the second, and the scale of the neighbouring token does not. */
static void test_ref_parts__mla_fp8_equals_bf16_of_dequantised(void **state)
{
    (void)state;
    enum { B = 3, SQ = 2, SKV = 70, HQ = 16, D = 576 };
    check_dtype t = CHECK_BF16;
    static const int kv_len[B] = { 70, 0, 65 };
    spec s = mla_spec(B, SQ, SKV, HQ, kv_len);
    pprob p = pprob_make(t, &s, 1801);   /* the fields of the description */
    size_t n = (size_t)B * SKV * D;
    unsigned char *k8 = malloc(n);
    float *sc = malloc(sizeof(float) * (B * SKV + 1));
    void *kv = malloc(n * esz(t)), *q = malloc((size_t)B * SQ * HQ * D * esz(t));
    check_fill_normal(t, q, (size_t)B * SQ * HQ * D, 1802, 1.0);
    check_rng r;
    check_rng_seed(&r, 1803);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < SKV; j++) {
            size_t row = (size_t)b * SKV + j;
            int live = j < kv_len[b];
            sc[row] = live ? (float)ldexp(1.0, -4 - (int)(check_rng_next(&r) % 6)) : NAN;
            for (int c = 0; c < D; c++) {
                unsigned char v = (unsigned char)(check_rng_next(&r) & 0xff);
                if ((v & 0x7f) == 0x7f)
                    v ^= 1;                           /* no NaN among the live bytes */
                if (c % 37 == 0)
                    v = (v & 0x80) | 0x7e;            /* +-448, e4m3's largest */
                k8[row * D + c] = live ? v : 0x7f;
                check_store(t, kv, row * D + c, live ? sc[row] * ref_e4m3(v) : NAN);
            }
        }
    sc[B * SKV] = 1.0f;
    ref_parts_desc a = p.a;
    a.kp[0].q = (ref_strided){ q, (long long)SQ * HQ * D, (long long)HQ * D, D };
    a.kp[1].q = (ref_strided){ at(q, t, 512), (long long)SQ * HQ * D, (long long)HQ * D, D };
    a.kp[0].k = (ref_strided){ kv, (long long)SKV * D, D, D };
    a.kp[1].k = (ref_strided){ at(kv, t, 512), (long long)SKV * D, D, D };
    ref_parts_desc f = a;
    f.kp[0].k.p = k8, f.kp[1].k.p = k8 + 512;
    f.kv_fp8 = 1;
    f.kv_scale = (ref_strided){ sc, SKV, 1, 1 };
    result x = run_parts(&f), e = run_parts(&a);
    assert_same(&x, &e, 1e-12);
    /* the mutant: token j's row with token j + 1's scale (the last live token of sequence 0 reads sequence 1's
     * first, NaN; sequence 2's the NaN past its length): caught */
    ref_parts_desc m = f;
    m.kv_scale.p = sc + 1;
    result xm = result_alloc(x.n, x.dv);
    ref_parts(&m, xm.o, xm.lse);
    assert_false(odiff(&xm, &e) <= 1e-3);
    result_free(&x); result_free(&e); result_free(&xm);
    free(k8); free(sc); free(kv); free(q); pprob_free(&p);
}

/* ---- (f) empty rows ------------------------------------------------------ */

static void assert_empty_rows(const result *r, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        assert_true(r->lse[i] == -INFINITY);
        for (int c = 0; c < r->dv; c++)
            assert_true(r->o[i * r->dv + c] == 0.0);
    }
}

static void test_ref_parts__empty_sequence_gives_zero_and_neg_inf(void **state)
{
    (void)state;
    static const int kv_len[3] = { 0, 1, 5 };
    spec s = mla_spec(3, 2, 5, 16, kv_len);   /* causal Sq 2 */
    pprob p = pprob_make(CHECK_BF16, &s, 900);
    result r = run_parts(&p.a);
    assert_empty_rows(&r, 0, 2 * 16);          /* sequence 0: no key */
    assert_empty_rows(&r, 2 * 16, 3 * 16);     /* sequence 1, row 0: sees keys j <= 0 + 1 - 2 */
    for (size_t i = 3 * 16; i < r.n; i++)
        assert_true(isfinite(r.lse[i]));
    result_free(&r); pprob_free(&p);

    static const int kv_group[3] = { 0, 7, 3 };
    group x = group_make(4, 1, kv_group, 901);
    result all = run_layers(&x, REF_PARTS_EXACT);
    for (int l = 0; l < 4; l++) {
        result lay = layer_of(&all, l, x.n);
        assert_empty_rows(&lay, 0, 8);
        for (size_t i = 8; i < x.n; i++)
            assert_true(isfinite(lay.lse[i]));
    }
    result_free(&all); group_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_parts__mla_equals_concatenated_one_head),
        cmocka_unit_test(test_ref_parts__mla_one_cache_alias_and_offset_mutant),
        cmocka_unit_test(test_ref_parts__base_delta_8_4_equals_concatenated_gqa),
        cmocka_unit_test(test_ref_parts__base_delta_8_2_equals_concatenated_gqa),
        cmocka_unit_test(test_ref_parts__per_part_head_counts),
        cmocka_unit_test(test_ref_parts__mla_paged_equals_contiguous),
        cmocka_unit_test(test_ref_parts__base_delta_paged_equals_contiguous),
        cmocka_unit_test(test_ref_parts__layers_equal_each_layer_alone),
        cmocka_unit_test(test_ref_parts__layers_paged_base),
        cmocka_unit_test(test_ref_parts__mla_fp8_equals_bf16_of_dequantised),
        cmocka_unit_test(test_ref_parts__empty_sequence_gives_zero_and_neg_inf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
