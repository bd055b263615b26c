/* tuner/attn_run.c: the GQA attention harness: case geometry and fill, the CPU reference schedule, checks and timing of one variant (the session is tuner/tune_ctx.c) */
#include "tuner/attn_run.h"
#include "tuner/tune_ctx_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/variant.h"
#include "common/attn_params.h"
#include "runtime/attn_launch.h"
#include "runtime/attn_tmap.h"
#include "runtime/family.h"
#include "runtime/cuda.h"
#include "runtime/module.h"
#include "runtime/nvml.h"
#include "tuner/par.h"
#include "tuner/ref_attn.h"
#include "tuner/tune_clock.h"
#include "tuner/tune_ilv.h"
#include "tuner/tune_phase.h"



void tune_attn_result_free(tune_attn_result *r)
{
    if (!r)
        return;
    free(r->o_out);
    free(r->lse_out);
    r->o_out = NULL;
    r->lse_out = NULL;
}















static int is_gqa_family(const char *f)
{
    const rt_family *fam = rt_family_find(f);
    return fam && (fam->id == RT_FAM_ATTN_DECODE || fam->id == RT_FAM_ATTN_PREFILL || fam->id == RT_FAM_ATTN_NAIVE);
}

void tune_attn_case_shape(const tune_attn_case *c, gen_kvset *shape)
{
    gen_kv_clear(shape);
    gen_kv_set_str(shape, "dtype", check_dtype_str(c->dtype));
    gen_kv_set_int(shape, "b", c->b);
    gen_kv_set_int(shape, "sq", c->sq);
    gen_kv_set_int(shape, "skv", c->skv);
    gen_kv_set_int(shape, "hq", c->hq);
    gen_kv_set_int(shape, "hkv", c->expand_kv ? c->hq : c->hkv);
    gen_kv_set_int(shape, "d", c->d);
    gen_kv_set_int(shape, "causal", c->causal);
    if (c->window)   /* the model features, only when on (issue 21) */
        gen_kv_set_int(shape, "window", c->window_left);
    if (c->softcap > 0)
        gen_kv_set_int(shape, "softcap", (long long)ceil(c->softcap));
    if (c->sinks)
        gen_kv_set_int(shape, "sinks", 1);
    if (c->kv_fp8)
        gen_kv_set_str(shape, "kv_dtype", "e4m3");
    if (c->page_size > 0)   /* paged K/V: the default's impl depends on it (attn_prefill.lua) */
        gen_kv_set_int(shape, "page_size", c->page_size);
}

double tune_attn_sink(int h) { return -2.0 + 1.5 * (h % 5); }

/* K: 0.5, 0.75, 1.0, 1.25 (times 1/amp: dequantised K ~ N(0, that^2)); V: 0.95, 1.15, 0.75 (1/amp) */
float tune_attn_kv_scale(int is_v, int kh)
{
    return is_v ? (float)((0.75 + 0.2 * ((kh + 1) % 3)) / TUNE_KV8_AMP_V)
                : (float)((0.5 + 0.25 * (kh % 4)) / TUNE_KV8_AMP_K);
}

unsigned char tune_e4m3_encode(double x)
{
    unsigned char s = signbit(x) ? 0x80 : 0;
    double a = fabs(x);
    if (!(a < 448.0))
        return s | 0x7e;                                  /* saturate (448 = 1.75 * 2^8) */
    if (a < 0.015625) {                                   /* subnormal: m/8 * 2^-6; m = 8 is the first normal */
        int m = (int)nearbyint(a * 512.0);
        return s | (unsigned char)m;
    }
    int e;
    double f = frexp(a, &e);                              /* a = f 2^e, f in [0.5, 1): exponent field e + 6 */
    int m = (int)nearbyint((2.0 * f - 1.0) * 8.0), E = e + 6;
    if (m == 8)
        m = 0, E++;
    if (E > 15 || (E == 15 && m == 7))
        return s | 0x7e;
    return s | (unsigned char)(E << 3 | m);
}

/* The sink logits of a case (hq of them), or NULL without sinks; malloc'd. */
static float *case_sinks(const tune_attn_case *c)
{
    if (!c->sinks)
        return NULL;
    float *s = malloc(sizeof *s * (size_t)c->hq);
    for (int h = 0; s && h < c->hq; h++)
        s[h] = (float)tune_attn_sink(h);
    return s;
}

int tune_attn_naive_job(gen_host *h, const tune_attn_case *c, const gen_target *tg, gen_job *j)
{
    memset(j, 0, sizeof *j);
    j->tmpl = gen_tmpl_load(h, rt_family_name(RT_FAM_ATTN_NAIVE));
    if (!j->tmpl)
        return -1;
    gen_kvset shape;
    tune_attn_case_shape(c, &shape);
    if (gen_variant_resolve(j->tmpl, &shape, &tg->dev, NULL, 0, &j->fixed, &j->params, NULL, 0))
        return -1;
    return gen_build_prepare(j, tg);
}

/* ---- geometry of a case --------------------------------------------------------- */

typedef struct view {
    long long sb, ss, sh;      /* element strides */
    size_t elems;              /* storage elements */
} view;

/* A q-like (rows per sequence S, or T packed rows) or kv-like tensor of H heads. */
static view make_view(int layout, int pad, int packed, int B, long long S, int H, int d)
{
    view v;
    long long inner = (long long)(pad > 1 ? pad : 1) * d;
    if (layout == TUNE_LAYOUT_BHSD) {
        v.ss = inner;
        v.sh = S * inner;
        v.sb = packed ? 0 : H * v.sh;
    } else {
        v.sh = inner;
        v.ss = H * inner;
        v.sb = packed ? 0 : S * v.ss;
    }
    v.elems = (size_t)(packed ? 1 : B) * (size_t)S * (size_t)H * (size_t)inner;
    return v;
}

typedef struct geom {
    int B, hq, hkv, G, d;       /* hkv: as run (hq when expand_kv) */
    int hkv_logical;
    int packed_q, packed_kv;
    long long rows;             /* total query rows (b*sq dense) */
    long long kv_rows;          /* packed kv rows, or capacity skv */
    int *n_q, *n_kv, *cu_q, *cu_k;
    view q, k, o;               /* v like k, o like q */
    int splits;
    double scale;
    int window, window_left;    /* model features of the case */
    double softcap;
    float *sinks;               /* [hq] host, or NULL */
    int kv_fp8;                 /* K/V e4m3 bytes, scales below */
    double q_amp;               /* tune_attn_case.q_amp (the gates' draws only) */
    size_t kv_esz;              /* bytes of a K/V element */
    float *k_scale, *v_scale;   /* [hkv] host (as run: an expanded head has its logical head's), or NULL */
    int page_size;              /* > 0: paged K/V, the k view a pool [n_pages, page_size, hkv, d] */
    int n_pages, bt_sb;         /* pool pages; block-table columns */
    int *bt;                    /* [B, bt_sb] host, or NULL */
} geom;

static void geom_free(geom *g)
{
    free(g->n_q);
    free(g->n_kv);
    free(g->cu_q);
    free(g->cu_k);
    free(g->sinks);
    free(g->k_scale);
    free(g->v_scale);
    free(g->bt);
}

/* The block table of a paged case: each sequence gets ceil(skv / page_size) pages of a shuffled pool (pages wholly
 * past its kv_len included, never written: NaN), then one spare column pointing at a page no sequence owns; two pool
 * pages belong to no one. The permutation depends on the seed and the geometry only (not on the heads), so an
 * expanded-K/V run pages exactly as its GQA twin. */
static int geom_pages(geom *g, int skv, uint64_t seed)
{
    int need = (skv + g->page_size - 1) / g->page_size;
    g->bt_sb = need + 1;
    g->n_pages = g->B * need + 2;
    int *perm = malloc(sizeof(int) * (size_t)g->n_pages);
    g->bt = malloc(sizeof(int) * (size_t)g->B * (size_t)g->bt_sb);
    if (!perm || !g->bt) {
        free(perm);
        return -1;
    }
    check_rng r;
    check_rng_seed(&r, seed ^ 0x70616765736b6676ull);
    for (int i = 0; i < g->n_pages; i++)
        perm[i] = i;
    for (int i = g->n_pages - 1; i > 0; i--) {           /* Fisher-Yates */
        int j = (int)(check_rng_uniform(&r) * 0.5 * (i + 1) + 0.5 * (i + 1));
        j = j < 0 ? 0 : j > i ? i : j;
        int t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int b = 0; b < g->B; b++) {
        for (int k = 0; k < need; k++)
            g->bt[b * g->bt_sb + k] = perm[b * need + k];
        g->bt[b * g->bt_sb + need] = perm[g->B * need + (b & 1)];
    }
    free(perm);
    return 0;
}

static int geom_init(geom *g, const tune_attn_case *c, const tune_compiled *v, uint64_t seed, core_err *e)
{
    memset(g, 0, sizeof *g);
    if (c->b < 1 || c->sq < 1 || c->skv < 0 || c->hq < 1 || c->hkv < 1 || c->hq % c->hkv || c->d < 8 ||
        c->d % 8) {
        core_err_set(e, KF_ERR_ARG, "bad case: b %d sq %d skv %d hq %d hkv %d d %d", c->b, c->sq, c->skv, c->hq,
                     c->hkv, c->d);
        return -1;
    }
    g->B = c->b;
    g->hq = c->hq;
    g->hkv_logical = c->hkv;
    g->hkv = c->expand_kv ? c->hq : c->hkv;
    g->G = g->hq / g->hkv;
    g->d = c->d;
    g->packed_q = c->q_lens != NULL;
    g->packed_kv = g->packed_q && c->packed_kv;
    g->n_q = calloc((size_t)c->b, sizeof(int));
    g->n_kv = calloc((size_t)c->b, sizeof(int));
    g->cu_q = calloc((size_t)c->b + 1, sizeof(int));
    g->cu_k = calloc((size_t)c->b + 1, sizeof(int));
    for (int b = 0; b < c->b; b++) {
        g->n_q[b] = c->q_lens ? c->q_lens[b] : c->sq;
        g->n_kv[b] = c->kv_len ? c->kv_len[b] : c->skv;
        if (g->n_q[b] < 0 || g->n_q[b] > c->sq || g->n_kv[b] < 0 || (!g->packed_kv && g->n_kv[b] > c->skv)) {
            core_err_set(e, KF_ERR_ARG, "bad case: sequence %d has %d rows (sq %d) and %d keys (skv %d)", b, g->n_q[b],
                         c->sq, g->n_kv[b], c->skv);
            return -1;
        }
        g->cu_q[b + 1] = g->cu_q[b] + g->n_q[b];
        g->cu_k[b + 1] = g->cu_k[b] + g->n_kv[b];
    }
    g->rows = g->packed_q ? g->cu_q[c->b] : (long long)c->b * c->sq;
    g->kv_rows = g->packed_kv ? g->cu_k[c->b] : c->skv;
    int pad = c->row_pad;
    g->q = make_view(c->layout, pad, g->packed_q, c->b, g->packed_q ? g->rows : c->sq, c->hq, c->d);
    g->o = g->q;
    g->page_size = c->page_size;
    if (c->page_size < 0 || (c->page_size > 0 && (g->packed_kv || c->skv < 1))) {
        core_err_set(e, KF_ERR_ARG, "bad case: page_size %d (pages hold a cache of skv %d rows; not with packed K/V)",
                     c->page_size, c->skv);
        return -1;
    }
    if (g->page_size) {                   /* the pool: [n_pages, page_size, hkv, d] (or its BHSD view) */
        if (geom_pages(g, c->skv, seed)) {
            core_err_set(e, KF_ERR_NOMEM, "out of host memory for the block table");
            return -1;
        }
        g->k = make_view(c->layout, pad, 0, g->n_pages, g->page_size, g->hkv, c->d);
    } else {
        g->k = make_view(c->layout, pad, g->packed_kv, c->b, g->kv_rows, g->hkv, c->d);
    }
    g->kv_fp8 = c->kv_fp8;
    g->q_amp = c->q_amp;
    g->kv_esz = c->kv_fp8 ? 1 : check_dtype_size(c->dtype);
    if (c->kv_fp8) {
        int rep = g->hkv / g->hkv_logical;
        g->k_scale = malloc(sizeof(float) * (size_t)g->hkv);
        g->v_scale = malloc(sizeof(float) * (size_t)g->hkv);
        if (!g->k_scale || !g->v_scale) {
            core_err_set(e, KF_ERR_NOMEM, "out of host memory for the scales");
            return -1;
        }
        for (int kh = 0; kh < g->hkv; kh++)
            g->k_scale[kh] = tune_attn_kv_scale(0, kh / rep), g->v_scale[kh] = tune_attn_kv_scale(1, kh / rep);
    }
    if (g->k.elems == 0)
        g->k.elems = 8;        /* every sequence empty: still a valid pointer */
    long long sp = v ? gen_kv_int(&v->vp, "sp", 1) : 1;
    g->splits = c->splits > 0 ? c->splits : (int)(sp > 0 ? sp : 1);
    if (v && v->family && !rt_family_is(&v->vp, RT_FAM_ATTN_DECODE))
        g->splits = 1;
    g->scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->d);
    g->window = c->window, g->window_left = c->window_left, g->softcap = c->softcap;
    g->sinks = case_sinks(c);
    return 0;
}

static long long q_off(const geom *g, int b, long long i, int h)
{
    if (g->packed_q)
        return ((long long)g->cu_q[b] + i) * g->q.ss + (long long)h * g->q.sh;
    return b * g->q.sb + i * g->q.ss + (long long)h * g->q.sh;
}

static long long k_off(const geom *g, int b, long long j, int kh)
{
    if (g->page_size)
        return (long long)g->bt[b * g->bt_sb + j / g->page_size] * g->k.sb + (j % g->page_size) * g->k.ss +
               (long long)kh * g->k.sh;
    if (g->packed_kv)
        return ((long long)g->cu_k[b] + j) * g->k.ss + (long long)kh * g->k.sh;
    return b * g->k.sb + j * g->k.ss + (long long)kh * g->k.sh;
}

/* Dense logical row of query i of sequence b (the reference's row). */
static long long q_row(const geom *g, int b, long long i)
{
    return g->packed_q ? g->cu_q[b] + i : (long long)b * (g->rows / g->B) + i;
}

/* ---- host inputs ------------------------------------------------------------------ */

static double rnd_val(check_rng *r, int normal) { return normal ? check_rng_normal(r) : check_rng_uniform(r); }

typedef struct fill_job {
    host_in *h;
    const geom *g;
    check_dtype dt;
    uint64_t seed;
    int v_normal;              /* v ~ N(0,1) (timing), else U[-1,1) (gates: half the draws) */
    /* timing: each row's values are a run of one of these tables (q, k, v; the dtype's bits, or e4m3 bytes for
     * FP8 K/V) from a hash of the row, instead of fresh draws: the same N(0,1) statistics and no zeros, at
     * about 1 ns a value instead of ~100 (the exhaustive sweep filled ~4e9 timing values) */
    const uint16_t *tab[3];
    const unsigned char *tab8[2];
} fill_job;

#define FILL_TAB (1 << 16)     /* values a table (a power of two) */

/* The first value of row's run in a table. */
static inline uint32_t tab_start(long long row) { return (uint32_t)((uint64_t)row * 0x9E3779B97F4A7C15ull >> 40); }

/* The timing tables of F (FILL_TAB values each) in t16 (3 tables) and t8 (2). */
static void fill_tables(fill_job *F, uint16_t *t16, unsigned char *t8)
{
    static const uint64_t salt[3] = {0x9e3779b97f4a7c15ull, 0x8cb92ba72f3d8dd7ull, 0xd1b54a32d192ed03ull};
    static const double nudge[3] = {0.25, -0.125, -0.125};
    for (int t = 0; t < 3; t++) {
        check_rng r;
        check_rng_seed(&r, F->seed ^ salt[t] ^ 0x7f4a7c159e3779b9ull);
        uint16_t *tb = t16 + (size_t)t * FILL_TAB;
        for (int i = 0; i < FILL_TAB; i++) {
            double x = check_rng_normal(&r);
            check_store(F->dt, tb, (size_t)i, x);
            if (check_load(F->dt, tb, (size_t)i) == 0.0)
                check_store(F->dt, tb, (size_t)i, nudge[t]);
            if (t && F->g->kv_fp8) {   /* e4m3 bytes of x * amp, never zero */
                unsigned char q8 = tune_e4m3_encode(x * (t == 2 ? TUNE_KV8_AMP_V : TUNE_KV8_AMP_K));
                t8[(size_t)(t - 1) * FILL_TAB + i] = (q8 & 0x7f) ? q8 : (unsigned char)(q8 | 0x01);
            }
        }
        F->tab[t] = tb;
    }
    F->tab8[0] = t8, F->tab8[1] = t8 + FILL_TAB;
}

/* NaN over every storage element (padding, tails and unused capacity stay NaN). */
static void fill_nan_part(void *arg, int part, int parts)
{
    fill_job *F = arg;
    void *buf[3] = {F->h->q, F->h->k, F->h->v};
    size_t n[3] = {F->g->q.elems, F->g->k.elems, F->g->k.elems};
    for (int t = 0; t < 3; t++) {
        long long lo, hi;
        par_range((long long)n[t], part, parts, &lo, &hi);
        if (t && F->g->kv_fp8)
            memset((char *)buf[t] + lo, 0x7f, (size_t)(hi - lo));   /* e4m3 NaN */
        else
            check_fill_nan(F->dt, (char *)buf[t] + (size_t)lo * F->h->esz, (size_t)(hi - lo));
    }
}

/* The logical values, rows [lo, hi) of each tensor in the order of one sequential pass
 * (q: (b, i, head); k then v: (b, j, kv head)), each part's generator skipped to its first
 * row: the values are those of the sequential pass, whatever the number of parts. */
static void fill_val_part(void *arg, int part, int parts)
{
    fill_job *F = arg;
    const geom *g = F->g;
    check_dtype dt = F->dt;
    check_rng r;
    long long lo, hi;
    /* q ~ N(0,1) (times q_amp where set): two draws a value */
    const double qa = g->q_amp > 0 ? g->q_amp : 1.0;
    par_range((long long)g->cu_q[g->B] * g->hq, part, parts, &lo, &hi);
    check_rng_seed(&r, F->seed ^ 0x9e3779b97f4a7c15ull);
    check_rng_skip(&r, (uint64_t)lo * (uint64_t)g->d * 2);
    int b = 0;
    for (long long row = lo; row < hi; row++) {
        long long t = row / g->hq;              /* dense query row over the batch */
        while (t >= g->cu_q[b + 1])
            b++;
        long long off = q_off(g, b, t - g->cu_q[b], (int)(row % g->hq));
        if (F->tab[0]) {                        /* timing: a run of the table */
            const uint32_t s0 = tab_start(row);
            for (int c = 0; c < g->d; c++)
                ((uint16_t *)F->h->q)[off + c] = F->tab[0][(s0 + (uint32_t)c) & (FILL_TAB - 1)];
            continue;
        }
        for (int c = 0; c < g->d; c++) {
            check_store(dt, F->h->q, (size_t)(off + c), rnd_val(&r, 1) * qa);
            if (check_load(dt, F->h->q, (size_t)(off + c)) == 0.0)
                check_store(dt, F->h->q, (size_t)(off + c), 0.25 * qa);
        }
    }
    /* k ~ N(0,1), v ~ N(0,1) or U[-1,1): generated for the logical kv heads, stored to every head that
     * maps to them */
    int rep = g->hkv / g->hkv_logical;          /* expand_kv: G copies */
    par_range((long long)g->cu_k[g->B] * g->hkv_logical, part, parts, &lo, &hi);
    for (int t = 0; t < 2; t++) {
        void *dst = t ? F->h->v : F->h->k;
        check_rng_seed(&r, F->seed ^ (t ? 0xd1b54a32d192ed03ull : 0x8cb92ba72f3d8dd7ull));
        int vn = t ? F->v_normal : 1;
        check_rng_skip(&r, (uint64_t)lo * (uint64_t)g->d * (vn ? 2 : 1));
        b = 0;
        for (long long row = lo; row < hi; row++) {
            long long key = row / g->hkv_logical;
            int kh = (int)(row % g->hkv_logical);
            while (key >= g->cu_k[b + 1])
                b++;
            long long j = key - g->cu_k[b];
            long long off0 = k_off(g, b, j, kh * rep);
            if (F->tab[0]) {                    /* timing: a run of the table */
                const uint32_t s0 = tab_start(row);
                for (int e = 0; e < rep; e++) {
                    long long off = off0 + (long long)e * g->k.sh;
                    for (int c = 0; c < g->d; c++) {
                        const uint32_t i = (s0 + (uint32_t)c) & (FILL_TAB - 1);
                        if (g->kv_fp8)
                            ((unsigned char *)dst)[off + c] = F->tab8[t][i];
                        else
                            ((uint16_t *)dst)[off + c] = F->tab[1 + t][i];
                    }
                }
                continue;
            }
            for (int c = 0; c < g->d; c++) {
                double x = rnd_val(&r, vn);
                if (g->kv_fp8) {          /* e4m3 bytes of x * amp, never zero */
                    unsigned char q8 = tune_e4m3_encode(x * (t ? TUNE_KV8_AMP_V : TUNE_KV8_AMP_K));
                    if (!(q8 & 0x7f))
                        q8 |= 0x01;
                    for (int e = 0; e < rep; e++)
                        ((unsigned char *)dst)[off0 + (long long)e * g->k.sh + c] = q8;
                    continue;
                }
                for (int e = 0; e < rep; e++) {
                    long long off = off0 + (long long)e * g->k.sh;
                    check_store(dt, dst, (size_t)(off + c), x);
                    if (check_load(dt, dst, (size_t)(off + c)) == 0.0)
                        check_store(dt, dst, (size_t)(off + c), -0.125);
                }
            }
        }
    }
}

/* Logical values from the seed in a fixed order, stored per layout. q ~ N(0,1), k ~ N(0,1),
 * v ~ N(0,1) when v_normal (timing: the statistics of activations, which set a tensor-core
 * kernel's power draw and so its clock under load), else U[-1,1) (gates, half the draws):
 * scores q.k*scale ~ N(0,1), so softmax is far from uniform. A value that
 * rounds to 0 is nudged: inputs are never zero. On every core (fills of the full timing
 * case reach 10^9 values): the values depend on the seed only, not on the thread count. */
static int host_in_fill(host_in *h, const geom *g, check_dtype dt, uint64_t seed, int v_normal)
{
    h->esz = check_dtype_size(dt);
    h->kv_esz = g->kv_esz;
    h->q = malloc(g->q.elems * h->esz);
    h->k = malloc(g->k.elems * h->kv_esz);
    h->v = malloc(g->k.elems * h->kv_esz);
    if (!h->q || !h->k || !h->v)
        return -1;
    fill_job F = {h, g, dt, seed, v_normal, {NULL, NULL, NULL}, {NULL, NULL}};
    double elems = (double)g->q.elems + 2.0 * (double)g->k.elems;
    par_run(fill_nan_part, &F, par_threads_for(elems * 1.5, (long long)elems));
    /* about 30 ns a normal value, 6 ns a uniform one (one core, -O2); timing: ~1 ns from the tables */
    double vals = (double)g->cu_q[g->B] * g->hq * g->d + (1.0 + v_normal) * (double)g->cu_k[g->B] * g->hkv_logical * g->d;
    uint16_t *t16 = NULL;
    unsigned char *t8 = NULL;
    if (v_normal && vals > 4.0 * FILL_TAB) {   /* timing inputs larger than the tables: runs of them */
        t16 = malloc(sizeof(uint16_t) * 3 * FILL_TAB);
        t8 = malloc(2 * FILL_TAB);
        if (t16 && t8)
            fill_tables(&F, t16, t8);
    }
    par_run(fill_val_part, &F, par_threads_for(vals * (F.tab[0] ? 2 : 20), (long long)(vals / g->d) + 1));
    free(t16);
    free(t8);
    return 0;
}

/* ---- the CPU reference, one work item per (sequence, query head) ------------------ */

typedef struct ref_job {
    const geom *g;
    const host_in *in;
    check_dtype dt;
    int causal;
    double *o, *lse;           /* dense [rows, hq, d], [rows, hq] */
    int next, total;
    pthread_mutex_t mu;
} ref_job;

/* Query head h of sequence b: every (row, head) is computed on its own by ref_attn, so the
 * result does not depend on how the heads are grouped into items. */
static void ref_item(ref_job *J, int item)
{
    const geom *g = J->g;
    int h = item % g->hq, b = item / g->hq, kh = h / g->G;
    int nq = g->n_q[b];
    if (nq == 0)
        return;
    ref_attn_desc a;
    memset(&a, 0, sizeof a);
    size_t es = J->in->esz, kes = J->in->kv_esz;
    a.dtype = J->dt;
    a.q = (const char *)J->in->q + (size_t)q_off(g, b, 0, h) * es;
    if (g->page_size) {                   /* through this sequence's row of the block table */
        a.k = (const char *)J->in->k + (size_t)kh * g->k.sh * kes;
        a.v = (const char *)J->in->v + (size_t)kh * g->k.sh * kes;
        a.block_table = g->bt + (size_t)b * g->bt_sb;
        a.bt_sb = g->bt_sb;
        a.page_size = g->page_size;
        a.k_sb = a.v_sb = g->k.sb;
    } else {
        a.k = (const char *)J->in->k + (size_t)k_off(g, b, 0, kh) * kes;
        a.v = (const char *)J->in->v + (size_t)k_off(g, b, 0, kh) * kes;
    }
    if (g->kv_fp8) {                      /* one kv head: its scales */
        a.kv_fp8 = 1;
        a.k_scale = g->k_scale + kh;
        a.v_scale = g->v_scale + kh;
    }
    a.q_ss = g->q.ss, a.q_sh = g->q.sh;
    a.k_ss = g->k.ss, a.k_sh = g->k.sh;
    a.v_ss = g->k.ss, a.v_sh = g->k.sh;
    a.b = 1;
    a.sq = nq;
    a.skv = g->n_kv[b];
    a.hq = 1;
    a.hkv = 1;
    a.d = a.dv = g->d;
    a.causal = J->causal;
    a.scale = g->scale;
    a.window = g->window, a.window_left = g->window_left, a.softcap = g->softcap;
    a.sinks = g->sinks ? g->sinks + h : NULL;   /* one head: a.hq = 1 */
    double *o = malloc(sizeof(double) * (size_t)nq * g->d);
    double *l = malloc(sizeof(double) * (size_t)nq);
    ref_attn(&a, o, l);
    for (int i = 0; i < nq; i++) {
        long long row = q_row(g, b, i);
        memcpy(J->o + ((size_t)row * g->hq + h) * g->d, o + (size_t)i * g->d, sizeof(double) * (size_t)g->d);
        J->lse[(size_t)row * g->hq + h] = l[i];
    }
    free(o);
    free(l);
}

static void ref_worker(void *arg, int part, int parts)
{
    ref_job *J = arg;
    (void)part, (void)parts;
    for (;;) {
        pthread_mutex_lock(&J->mu);
        int it = J->next < J->total ? J->next++ : -1;
        pthread_mutex_unlock(&J->mu);
        if (it < 0)
            return;
        ref_item(J, it);
    }
}

static void cpu_reference(const geom *g, const host_in *in, check_dtype dt, int causal, double *o, double *lse)
{
    ref_job J = {.g = g, .in = in, .dt = dt, .causal = causal, .o = o, .lse = lse};
    J.total = g->hq * g->B;
    pthread_mutex_init(&J.mu, NULL);
    double work = 0;               /* multiply-adds, about 3.5e8 a second on one core */
    for (int b = 0; b < g->B; b++)
        work += (double)g->n_q[b] * g->n_kv[b] * g->hq * g->d * 3.0 * (causal ? 0.5 : 1.0);
    par_run(ref_worker, &J, par_threads_for(work * 2.9, J.total));
    pthread_mutex_destroy(&J.mu);
}

double tune_attn_ref_work(const tune_attn_case *c)
{
    double w = 0;
    for (int b = 0; b < c->b; b++) {
        double nq = c->q_lens ? c->q_lens[b] : c->sq, nk = c->kv_len ? c->kv_len[b] : c->skv;
        w += nq * nk;
    }
    /* two score passes and one value pass */
    return w * c->hq * c->d * 3.0 * (c->causal ? 0.5 : 1.0);
}

int tune_attn_case_reference(const tune_attn_case *c, uint64_t seed, double **o, double **lse, long long *rows,
                             core_err *e)
{
    geom g;
    host_in in = {0};
    int rc = -1;
    *o = NULL, *lse = NULL, *rows = 0;
    if (geom_init(&g, c, NULL, seed, e))
        goto out;
    if (host_in_fill(&in, &g, c->dtype, seed, 0)) {
        core_err_set(e, KF_ERR_NOMEM, "out of host memory for the inputs");
        goto out;
    }
    *o = malloc(sizeof(double) * ((size_t)g.rows * g.hq * g.d + 1));
    *lse = malloc(sizeof(double) * ((size_t)g.rows * g.hq + 1));
    if (!*o || !*lse) {
        core_err_set(e, KF_ERR_NOMEM, "out of host memory for the reference");
        free(*o), free(*lse);
        *o = NULL, *lse = NULL;
        goto out;
    }
    cpu_reference(&g, &in, c->dtype, c->causal, *o, *lse);
    *rows = g.rows;
    rc = 0;
out:
    host_in_free(&in);
    geom_free(&g);
    return rc;
}

/* ---- device run ------------------------------------------------------------------ */

typedef struct dev_run {
    CUdeviceptr q, k, v, o, lse, cu_q, cu_k, kv_len, ws, o2, lse2, sinks, bt, k_scale, v_scale;
    size_t ws_bytes, lse_elems;
    long long kv_rows;         /* packed K/V: total key rows (impl wgmma_tma's maps need them); -1 otherwise */
    kf_attn_params p;
    rt_module mod, mod_naive;
} dev_run;

static void dev_free(tune_ctx *ctx, dev_run *d)
{
    CUdeviceptr *all[] = {&d->q, &d->k, &d->v, &d->o, &d->lse, &d->cu_q, &d->cu_k, &d->kv_len, &d->ws, &d->o2, &d->lse2,
                          &d->sinks, &d->bt, &d->k_scale, &d->v_scale};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i]) {
            ctx->cu->MemFree(*all[i]);
            *all[i] = 0;
        }
    rt_module_unload(&d->mod);
    rt_module_unload(&d->mod_naive);
}










static int upload(tune_ctx *ctx, CUdeviceptr *p, const void *src, size_t bytes)
{
    if (tune_ctx_alloc(ctx, p, bytes))
        return -1;
    if (bytes)
        CU_TRY(ctx->cu->MemcpyHtoD(*p, src, bytes), "cuMemcpyHtoD");
    return 0;
}

/* Allocates and uploads everything, fills the params (o/lse poisoned by dev_poison). */
/* Uploads the inputs of a case: q, k, v and the length arrays. */
static int dev_inputs(tune_ctx *ctx, const tune_attn_case *c, const geom *g, const host_in *in, dev_run *d)
{
    size_t es = in->esz, kes = in->kv_esz;
    if (upload(ctx, &d->q, in->q, g->q.elems * es) || upload(ctx, &d->k, in->k, g->k.elems * kes) ||
        upload(ctx, &d->v, in->v, g->k.elems * kes))
        return -1;
    if (g->packed_q && upload(ctx, &d->cu_q, g->cu_q, sizeof(int) * (size_t)(g->B + 1)))
        return -1;
    if (g->packed_kv && upload(ctx, &d->cu_k, g->cu_k, sizeof(int) * (size_t)(g->B + 1)))
        return -1;
    if (!g->packed_kv && c->kv_len && upload(ctx, &d->kv_len, g->n_kv, sizeof(int) * (size_t)g->B))
        return -1;
    return 0;
}

/* Allocates and uploads everything (inputs: in, or the device buffers of `have` when
 * not NULL), fills the params (o/lse poisoned by dev_poison). */
static int dev_setup(tune_ctx *ctx, const tune_compiled *v, const tune_attn_case *c, const geom *g,
                     const host_in *in, dev_run *d)
{
    size_t es = check_dtype_size(c->dtype);
    memset(d, 0, sizeof *d);
    if (in && dev_inputs(ctx, c, g, in, d))
        return -1;
    if (!in) {
        d->q = ctx->tc_in[0], d->k = ctx->tc_in[1], d->v = ctx->tc_in[2];
        d->cu_q = ctx->tc_in[3], d->cu_k = ctx->tc_in[4], d->kv_len = ctx->tc_in[5];
    }
    if (tune_ctx_alloc(ctx, &d->o, g->o.elems * es))
        return -1;
    d->lse_elems = (size_t)g->rows * g->hq;
    if (tune_ctx_alloc(ctx, &d->lse, d->lse_elems * 4))
        return -1;
    kf_attn_params *p = &d->p;
    memset(p, 0, sizeof *p);
    p->q = (const void *)(uintptr_t)d->q;
    p->k = (const void *)(uintptr_t)d->k;
    p->v = (const void *)(uintptr_t)d->v;
    p->o = (void *)(uintptr_t)d->o;
    p->lse = (float *)(uintptr_t)d->lse;
    p->cu_seqlens_q = (const int *)(uintptr_t)d->cu_q;
    p->cu_seqlens_k = (const int *)(uintptr_t)d->cu_k;
    p->kv_len = (const int *)(uintptr_t)d->kv_len;
    p->q_sb = g->q.sb, p->q_ss = g->q.ss, p->q_sh = g->q.sh;
    p->k_sb = g->k.sb, p->k_ss = g->k.ss, p->k_sh = g->k.sh;
    p->v_sb = g->k.sb, p->v_ss = g->k.ss, p->v_sh = g->k.sh;
    p->o_sb = g->o.sb, p->o_ss = g->o.ss, p->o_sh = g->o.sh;
    if (g->packed_q) {
        p->lse_sb = 0;
        p->lse_sh = g->rows;
    } else {
        p->lse_sb = (long long)g->hq * c->sq;
        p->lse_sh = c->sq;
    }
    d->kv_rows = g->packed_kv ? g->kv_rows : -1;
    p->b = g->B;
    p->sq = c->sq;
    p->skv = g->packed_kv ? 0 : c->skv;
    if (g->packed_kv)
        for (int b = 0; b < g->B; b++)
            if (g->n_kv[b] > p->skv)
                p->skv = g->n_kv[b];
    p->hq = g->hq;
    p->hkv = g->hkv;
    p->splits = g->splits;
    p->ws_rows = (int)g->rows;
    p->scale = (float)g->scale;
    p->scale_log2 = (float)(g->scale * 1.4426950408889634);
    p->window_left = g->window ? g->window_left : -1;   /* model features (issue 21) */
    p->softcap = (float)g->softcap;
    if (g->sinks) {
        if (upload(ctx, &d->sinks, g->sinks, sizeof(float) * (size_t)g->hq))
            return -1;
        p->sinks = (const float *)(uintptr_t)d->sinks;
    }
    if (g->kv_fp8) {                  /* per-head scales (strides of the e4m3 bytes are bytes: the element strides) */
        if (upload(ctx, &d->k_scale, g->k_scale, sizeof(float) * (size_t)g->hkv) ||
            upload(ctx, &d->v_scale, g->v_scale, sizeof(float) * (size_t)g->hkv))
            return -1;
        p->k_scale = (const float *)(uintptr_t)d->k_scale;
        p->v_scale = (const float *)(uintptr_t)d->v_scale;
    }
    if (g->page_size) {               /* the block table; k_sb / v_sb are the page strides */
        if (upload(ctx, &d->bt, g->bt, sizeof(int) * (size_t)g->B * (size_t)g->bt_sb))
            return -1;
        p->block_table = (const int *)(uintptr_t)d->bt;
        p->bt_sb = g->bt_sb;
        p->page_size = g->page_size;
    }
    rt_launch l = {0, 0, 0};
    if (v && rt_attn_launch(&v->vp, p, &l)) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "%s is not of an attention family", v->key ? v->key : v->family);
        return -1;
    }
    d->ws_bytes = l.ws_bytes;
    if (d->ws_bytes) {
        if (tune_ctx_alloc(ctx, &d->ws, d->ws_bytes))
            return -1;
        rt_attn_set_workspace(&v->vp, p, (void *)(uintptr_t)d->ws);
    }
    return 0;
}

static int dev_poison(tune_ctx *ctx, CUdeviceptr o, size_t o_bytes, CUdeviceptr lse, size_t lse_elems)
{
    CU_TRY(ctx->cu->MemsetD8(o, 0xFF, o_bytes), "cuMemsetD8 (poison o)");
    if (lse_elems)
        CU_TRY(ctx->cu->MemsetD32(lse, CHECK_POISON32, lse_elems), "cuMemsetD32 (poison lse)");
    return 0;
}

/* Launches every kernel of m for the params (async, on the default stream). */
static int dev_launch(tune_ctx *ctx, const tune_compiled *v, const rt_module *m, kf_attn_params *p,
                      long long kv_rows)
{
    kf_attn_tmaps tm;          /* attn_prefill impl=wgmma_tma: its second argument, encoded for these pointers */
    void *args[] = {p, &tm};
    rt_attn_geom geo = rt_attn_geom_of(&v->vp);
    geo.ctas = ctx->info.sms;   /* sched=persist: one CTA an SM, as a plan launches it */
    if (geo.tma && rt_attn_tmaps(&geo, p, kv_rows, &tm, &ctx->err))
        return -1;
    /* A binary lists every kernel it holds (gen_build_prepare merges kernels() over the runtime
     * params): the call launches what rt_attn_launch says (attn_decode's combine only when split). */
    rt_launch l;
    if (rt_attn_launch(&v->vp, p, &l) || l.n > m->n) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "%s: its binary has %d kernels", v->key ? v->key : v->family, m->n);
        return -1;
    }
    for (int i = 0; i < l.n; i++) {
        unsigned grid[3];
        if (rt_attn_grid_geom(&geo, p, i, grid)) {
            return tune_ctx_seterr(ctx, KF_ERR_ARG, "rt_attn_grid refused kernel %d of %s (b %d sq %d hq %d hkv %d"
                                   " splits %d)", i, v->key ? v->key : v->family, p->b, p->sq, p->hq, p->hkv,
                                   p->splits);
        }
        if (rt_module_launch(m, i, grid, args, ctx->stream, &ctx->err))
            return tune_ctx_seterr(ctx, ctx->err.st, "%.400s", ctx->err.msg);
    }
    return 0;
}

/* o storage (device) -> dense logical [rows, hq, d] (dtype) and the stray count. */
static void gather_o(const geom *g, check_dtype dt, void *store, void *dense, size_t *stray)
{
    size_t es = check_dtype_size(dt);
    for (int b = 0; b < g->B; b++)
        for (long long i = 0; i < g->n_q[b]; i++)
            for (int h = 0; h < g->hq; h++) {
                long long off = q_off(g, b, i, h);
                size_t row = (size_t)q_row(g, b, i);
                memcpy((char *)dense + (row * g->hq + h) * g->d * es, (char *)store + (size_t)off * es,
                       (size_t)g->d * es);
                memset((char *)store + (size_t)off * es, 0xFF, (size_t)g->d * es);   /* re-poison: strays remain */
            }
    size_t n = 0;
    for (size_t i = 0; i < g->o.elems; i++)
        n += !check_is_poison(dt, store, i);
    *stray = n;
}

static void gather_lse(const geom *g, int sq, const float *store, float *dense)
{
    for (int b = 0; b < g->B; b++)
        for (long long i = 0; i < g->n_q[b]; i++)
            for (int h = 0; h < g->hq; h++) {
                size_t row = (size_t)q_row(g, b, i);
                size_t src = g->packed_q ? (size_t)h * g->rows + row : ((size_t)b * g->hq + h) * sq + i;
                dense[row * g->hq + h] = store[src];
            }
}

typedef struct launch_arg {
    tune_ctx *ctx;
    const tune_compiled *v;
    const rt_module *m;
    kf_attn_params *p;
    long long kv_rows;
    int rotate;                /* set s > 0 reads q, k, v of ctx->tc_set[s] */
} launch_arg;

static int launch_cb(tune_ctx *ctx, void *arg, int set)
{
    launch_arg *a = arg;
    if (!a->rotate || set <= 0)
        return dev_launch(a->ctx, a->v, a->m, a->p, a->kv_rows);
    kf_attn_params p = *a->p;
    const CUdeviceptr *in = a->ctx->tc_set[set];
    p.q = (const void *)(uintptr_t)in[0];
    p.k = (const void *)(uintptr_t)in[1];
    p.v = (const void *)(uintptr_t)in[2];
    return dev_launch(a->ctx, a->v, a->m, &p, a->kv_rows);
}

/* Timing on the buffers of p (one set), or rotating over the cached timing inputs (rotate). */
static int timing_run(tune_ctx *ctx, const tune_compiled *v, const rt_module *m, kf_attn_params *p,
                      long long kv_rows, int rotate, int samples, tune_timing *t)
{
    launch_arg a = {ctx, v, m, p, kv_rows, rotate};
    return tune_ctx_time(ctx, launch_cb, &a, rotate ? ctx->tc_sets : 1, samples, t);
}


static int same_lens(const int *a, const int *b, int n)
{
    if (!a || !b)
        return a == b;
    return memcmp(a, b, sizeof(int) * (size_t)n) == 0;
}

int tune_attn_same_inputs(const tune_attn_case *t, const tune_attn_case *c)
{
    return t->dtype == c->dtype && t->b == c->b && t->sq == c->sq && t->skv == c->skv && t->hq == c->hq &&
           t->hkv == c->hkv && t->d == c->d && t->causal == c->causal && t->packed_kv == c->packed_kv &&
           t->layout == c->layout && t->row_pad == c->row_pad && t->expand_kv == c->expand_kv &&
           t->seed == c->seed && t->kv_fp8 == c->kv_fp8 && t->page_size == c->page_size &&
           same_lens(t->kv_len, c->kv_len, c->b) && same_lens(t->q_lens, c->q_lens, c->b);
}

static int *dup_lens(const int *v, int n);

int tune_attn_check(tune_ctx *ctx, const tune_compiled *v, const tune_attn_case *c,
                    const tune_compiled *naive, int samples, tune_attn_result *r, tune_timing *timing)
{
    memset(r, 0, sizeof *r);
    if (timing)
        memset(timing, 0, sizeof *timing);
    r->seed = c->seed ? c->seed : check_fresh_seed();
    r->tol = check_tol(c->dtype);
    snprintf(r->ref, sizeof r->ref, "%s", naive ? "gpu-naive" : "cpu-fp64");
    if (!ctx || ctx->broken)
        return tune_ctx_seterr(ctx, KF_ERR_CUDA, "the CUDA context is unusable after an earlier error");
    if (!is_gqa_family(v->family)) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "tune_attn_check: family '%s' is not a GQA attention family", v->family);
        return -1;
    }
    double t = tune_now();
    if (ctx->ph)
        ctx->ph->gates++;
    geom g;
    host_in in = {0};
    dev_run d;
    memset(&d, 0, sizeof d);
    int rc = -1;
    void *o_store = NULL, *o_dense = NULL, *o2_dense = NULL;
    float *lse_store = NULL, *lse_dense = NULL, *lse2_dense = NULL;
    double *ref_o = NULL, *ref_lse = NULL;
    const rt_module *pm = NULL, *pm_naive = NULL;
    /* a given seed without a timing: the inputs and the reference of the last such case are reused */
    int cacheable = c->seed != 0 && !timing;
    int hit = cacheable && ctx->gc_valid && tune_attn_same_inputs(&ctx->gc, c) && ctx->gc.scale == c->scale &&
              ctx->gc.window == c->window && ctx->gc.window_left == c->window_left && ctx->gc.softcap == c->softcap &&
              ctx->gc.sinks == c->sinks &&
              ctx->gc_naive == (naive ? naive->image : NULL);
    int in_owned = 1, ref_owned = 1;
    if (geom_init(&g, c, v, r->seed, &ctx->err))
        goto out;
    if (hit) {
        in = ctx->gc_in;
        in_owned = 0;
    } else if (host_in_fill(&in, &g, c->dtype, r->seed, 0)) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory for the inputs");
        goto out;
    }
    size_t es = in.esz;
    if (dev_setup(ctx, v, c, &g, &in, &d))
        goto out;
    tune_lap(PH(gate_fill), &t);
    if (!(pm = tune_ctx_module(ctx, v, 0, &d.mod)))
        goto out;
    if (d.ws && ctx->cu->MemsetD8(d.ws, 0xFF, d.ws_bytes)) {
        tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuMemsetD8 (poison workspace) failed");
        goto out;
    }
    if (dev_poison(ctx, d.o, g.o.elems * es, d.lse, d.lse_elems) ||
        dev_launch(ctx, v, pm, &d.p, d.kv_rows))
        goto out;
    CUresult cr = ctx->cu->CtxSynchronize();
    if (cr) {
        char what[600];
        snprintf(what, sizeof what, "%s: kernel failed", v->key ? v->key : v->family);
        cu_fail(ctx, cr, what);
        goto out;
    }
    r->ran = 1;
    o_store = malloc(g.o.elems * es);
    lse_store = malloc(d.lse_elems * 4 + 4);
    o_dense = malloc((size_t)g.rows * g.hq * g.d * es + 4);
    lse_dense = malloc((size_t)g.rows * g.hq * 4 + 4);
    if (hit) {
        ref_o = ctx->gc_ref_o, ref_lse = ctx->gc_ref_lse;
        ref_owned = 0;
    } else {
        ref_o = malloc(sizeof(double) * ((size_t)g.rows * g.hq * g.d + 1));
        ref_lse = malloc(sizeof(double) * ((size_t)g.rows * g.hq + 1));
    }
    if (!o_store || !lse_store || !o_dense || !lse_dense || !ref_o || !ref_lse) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory for the outputs");
        goto out;
    }
    if (ctx->cu->MemcpyDtoH(o_store, d.o, g.o.elems * es) || ctx->cu->MemcpyDtoH(lse_store, d.lse, d.lse_elems * 4)) {
        tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuMemcpyDtoH failed");
        goto out;
    }
    gather_o(&g, c->dtype, o_store, o_dense, &r->stray);
    gather_lse(&g, c->sq, lse_store, lse_dense);

    tune_lap(PH(gate_run), &t);
    /* timing on the same buffers, before the reference (which may run long on the CPU) */
    if (timing && timing_run(ctx, v, pm, &d.p, d.kv_rows, 0, samples, timing))
        goto out;
    tune_lap(PH(time_run), &t);

    if (hit) {
        /* the reference of this case, computed by an earlier gate */
    } else if (naive) {
        /* a reference to be reused is taken on the inputs as filled, whatever the variant did to them */
        if (cacheable && (ctx->cu->MemcpyHtoD(d.q, in.q, g.q.elems * es) ||
                          ctx->cu->MemcpyHtoD(d.k, in.k, g.k.elems * in.kv_esz) ||
                          ctx->cu->MemcpyHtoD(d.v, in.v, g.k.elems * in.kv_esz))) {
            tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuMemcpyHtoD (inputs again for the reference) failed");
            goto out;
        }
        if (!(pm_naive = tune_ctx_module(ctx, naive, 1, &d.mod_naive)) ||
            tune_ctx_alloc(ctx, &d.o2, g.o.elems * es) ||
            tune_ctx_alloc(ctx, &d.lse2, d.lse_elems * 4) ||
            dev_poison(ctx, d.o2, g.o.elems * es, d.lse2, d.lse_elems))
            goto out;
        kf_attn_params p2 = d.p;
        p2.o = (void *)(uintptr_t)d.o2;
        p2.lse = (float *)(uintptr_t)d.lse2;
        p2.splits = 1;
        p2.ws_o = p2.ws_lse = NULL;
        if (dev_launch(ctx, naive, pm_naive, &p2, -1))
            goto out;
        cr = ctx->cu->CtxSynchronize();
        if (cr) {
            cu_fail(ctx, cr, "attn_naive reference kernel failed");
            goto out;
        }
        o2_dense = malloc((size_t)g.rows * g.hq * g.d * es + 4);
        lse2_dense = malloc((size_t)g.rows * g.hq * 4 + 4);
        if (ctx->cu->MemcpyDtoH(o_store, d.o2, g.o.elems * es) || ctx->cu->MemcpyDtoH(lse_store, d.lse2, d.lse_elems * 4)) {
            tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuMemcpyDtoH failed");
            goto out;
        }
        size_t stray2;
        gather_o(&g, c->dtype, o_store, o2_dense, &stray2);
        gather_lse(&g, c->sq, lse_store, lse2_dense);
        size_t n = (size_t)g.rows * g.hq;
        for (size_t i = 0; i < n * g.d; i++)
            ref_o[i] = check_load(c->dtype, o2_dense, i);
        for (size_t i = 0; i < n; i++)
            ref_lse[i] = lse2_dense[i];
    } else {
        cpu_reference(&g, &in, c->dtype, c->causal, ref_o, ref_lse);
    }
    if (cacheable && !hit) {                          /* kept for the next gate of this case */
        tune_ctx_gate_cache_drop(ctx);
        ctx->gc = *c;
        ctx->gc_kv = dup_lens(c->kv_len, c->b);
        ctx->gc_q = dup_lens(c->q_lens, c->b);
        ctx->gc.kv_len = ctx->gc_kv;
        ctx->gc.q_lens = ctx->gc_q;
        if ((!c->kv_len || ctx->gc_kv) && (!c->q_lens || ctx->gc_q)) {
            ctx->gc_naive = naive ? naive->image : NULL;
            ctx->gc_in = in, in_owned = 0;
            ctx->gc_ref_o = ref_o, ctx->gc_ref_lse = ref_lse, ref_owned = 0;
            ctx->gc_valid = 1;
        }
    }
    tune_lap(PH(gate_ref), &t);

    size_t n = (size_t)g.rows * g.hq;
    check_compare(c->dtype, o_dense, ref_o, n * g.d, &r->o);
    check_compare_lse(lse_dense, ref_lse, n, &r->lse);
    int ok_o = check_pass(&r->o, r->tol), ok_l = check_lse_pass(&r->lse, CHECK_LSE_TOL);
    r->pass = ok_o && ok_l && r->stray == 0;
    char a[200], b[200];
    check_format(a, sizeof a, &r->o, r->tol);
    check_format_lse(b, sizeof b, &r->lse, CHECK_LSE_TOL);
    snprintf(r->msg, sizeof r->msg, "o %s; lse %s; stray %zu; ref %s; seed %llu", a, b, r->stray, r->ref,
             (unsigned long long)r->seed);
    if (c->keep_outputs) {
        r->o_out = o_dense;
        r->lse_out = lse_dense;
        r->rows = g.rows;
        o_dense = NULL;
        lse_dense = NULL;
    }
    rc = 0;
out:
    dev_free(ctx, &d);
    if (in_owned)
        host_in_free(&in);
    geom_free(&g);
    free(o_store);
    free(lse_store);
    free(o_dense);
    free(lse_dense);
    free(o2_dense);
    free(lse2_dense);
    if (ref_owned) {
        free(ref_o);
        free(ref_lse);
    }
    if (rc && timing)
        tune_timing_free(timing);
    tune_lap(PH(gate_run), &t);      /* compare, clean-up (or what ran before an error) */
    return rc;
}

/* ---- timing ------------------------------------------------------------------ */
















/* Whether the cached timing inputs are those of case c (seed resolved). */
static int time_cache_hit(const tune_ctx *ctx, const tune_attn_case *c)
{
    return ctx->tc_valid && tune_attn_same_inputs(&ctx->tc, c);
}

static int *dup_lens(const int *v, int n)
{
    if (!v)
        return NULL;
    int *d = malloc(sizeof(int) * (size_t)n);
    if (d)
        memcpy(d, v, sizeof(int) * (size_t)n);
    return d;
}

int tune_attn_time(tune_ctx *ctx, const tune_compiled *v, const tune_attn_case *c, int samples,
                   tune_timing *t)
{
    memset(t, 0, sizeof *t);
    if (!ctx || ctx->broken)
        return tune_ctx_seterr(ctx, KF_ERR_CUDA, "the CUDA context is unusable after an earlier error");
    double tm = tune_now();
    if (ctx->ph)
        ctx->ph->timings++;
    geom g;
    dev_run d;
    memset(&d, 0, sizeof d);
    int rc = -1;
    const rt_module *pm;
    tune_attn_case cc = *c;
    if (!cc.seed) {
        /* timing needs representative data, not fresh data: one seed per session, so the
         * inputs of a case are filled and uploaded once for all its variants */
        if (!ctx->time_seed)
            ctx->time_seed = check_fresh_seed();
        cc.seed = ctx->time_seed;
    }
    if (geom_init(&g, &cc, v, cc.seed, &ctx->err))
        goto out;
    if (!time_cache_hit(ctx, &cc)) {
        tune_ctx_time_cache_drop(ctx);
        host_in in = {0};
        dev_run up;
        memset(&up, 0, sizeof up);
        if (host_in_fill(&in, &g, cc.dtype, cc.seed, 1)) {
            tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory for the inputs");
            goto out;
        }
        int bad = dev_inputs(ctx, &cc, &g, &in, &up);
        host_in_free(&in);
        CUdeviceptr keep[6] = {up.q, up.k, up.v, up.cu_q, up.cu_k, up.kv_len};
        memcpy(ctx->tc_in, keep, sizeof keep);
        if (bad)
            goto out;
        ctx->tc = cc;
        ctx->tc_kv = dup_lens(cc.kv_len, cc.b);
        ctx->tc_q = dup_lens(cc.q_lens, cc.b);
        ctx->tc.kv_len = ctx->tc_kv;
        ctx->tc.q_lens = ctx->tc_q;
        ctx->tc_valid = 1;
        ctx->tc_sets = 1;
        size_t es = check_dtype_size(cc.dtype);
        ctx->tc_bytes[0] = g.q.elems * es, ctx->tc_bytes[1] = ctx->tc_bytes[2] = g.k.elems * g.kv_esz;
    }
    /* sustained: copies of q, k, v, so that the rotated sets exceed the L2 */
    int sets = tune_ctx_sets(ctx, (double)ctx->tc_bytes[0] + (double)ctx->tc_bytes[1] + (double)ctx->tc_bytes[2]);
    for (; ctx->tc_sets < sets; ctx->tc_sets++)
        for (int i = 0; i < 3; i++) {
            int r = tune_ctx_clone(ctx, &ctx->tc_set[ctx->tc_sets][i], ctx->tc_in[i], ctx->tc_bytes[i]);
            if (r) {
                cu_fail(ctx, (CUresult)r, "timing: copies of the inputs (cuMemAlloc/cuMemcpyDtoD)");
                ctx->tc_sets++;              /* freed by time_cache_drop */
                goto out;
            }
        }
    tune_lap(PH(time_fill), &tm);
    if (dev_setup(ctx, v, &cc, &g, NULL, &d) || !(pm = tune_ctx_module(ctx, v, 0, &d.mod)))
        goto out;
    tune_lap(PH(time_load), &tm);
    rc = timing_run(ctx, v, pm, &d.p, d.kv_rows, 1, samples, t);
    tune_lap(PH(time_run), &tm);
out:
    /* the inputs belong to the cache */
    d.q = d.k = d.v = d.cu_q = d.cu_k = d.kv_len = 0;
    dev_free(ctx, &d);
    geom_free(&g);
    tune_lap(PH(time_load), &tm);    /* buffers freed (or what ran before an error) */
    return rc;
}
