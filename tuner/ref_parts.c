/* tuner/ref_parts.c: plain CPU fp64 reference of split-score decode (absorbed MLA, base + delta) and the joint layer-group scan */
#include "tuner/ref_parts.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "tuner/par.h"
#include "tuner/ref_attn.h"

static long long n_kv_of(const ref_parts_desc *a, int b)
{
    long long n = a->kv_len ? a->kv_len[b] : a->skv;
    assert(n >= 0);
    return n;
}

static int kv_head(const ref_parts_desc *a, int heads, int h)
{
    return h / (a->hq / heads);
}

/* Element offset of query row i, head h of sequence b. */
static long long q_off(const ref_strided *q, int b, long long i, int h)
{
    return b * q->sb + i * q->ss + h * q->sh;
}

/* Element offset of key (or value) j, kv head kh of sequence b in tensor t. */
static long long kv_off(const ref_parts_desc *a, const ref_strided *t, int paged, int b, long long j, int kh)
{
    if (paged) {
        long long page = a->block_table[b * a->bt_sb + j / a->page_size];
        return page * t->sb + (j % a->page_size) * t->ss + kh * t->sh;
    }
    return b * t->sb + j * t->ss + kh * t->sh;
}

/* Element o of a key part's cache t (16-bit, or an e4m3 byte; in_fp8 1 for the latter) */
static double cache_load(const ref_parts_desc *a, int in_fp8, const void *t, long long o)
{
    return in_fp8 ? ref_e4m3(((const unsigned char *)t)[o]) : check_load(a->dtype, t, (size_t)o);
}

/* The dequantisation factor of token j, kv head kh of a key part's cache: kv_scale(j, kh) (FP8), else 1. */
static double cache_scale(const ref_parts_desc *a, int in_fp8, int paged, int b, long long j, int kh)
{
    if (!in_fp8)
        return 1.0;
    return ((const float *)a->kv_scale.p)[kv_off(a, &a->kv_scale, paged, b, j, kh)];
}

/* q_p(i, h) . k_p(j, kv_p(h)) of key part kp (not scaled). */
static double part_dot(const ref_parts_desc *a, const ref_kpart *kp, int b, long long i, int h, long long j)
{
    long long qo = q_off(&kp->q, b, i, h);
    int kh = kv_head(a, kp->heads, h);
    long long ko = kv_off(a, &kp->k, kp->paged, b, j, kh);
    double sc = cache_scale(a, a->kv_fp8, kp->paged, b, j, kh), acc = 0.0;
    for (int c = 0; c < kp->dim; c++)
        acc += check_load(a->dtype, kp->q.p, (size_t)(qo + c)) * (sc * cache_load(a, a->kv_fp8, kp->k.p, ko + c));
    return acc;
}

/* o[0..dim) += w * value part vp of key j for query head h; an alias reads the rows of kps[alias]. */
static void add_value(const ref_parts_desc *a, const ref_kpart *kps, const ref_vpart *vp,
                      int b, long long j, int h, double w, double *o)
{
    const ref_strided *t = &vp->v;
    int heads = vp->heads, paged = vp->paged, in_fp8 = 0;
    if (vp->alias >= 0) {
        t = &kps[vp->alias].k;
        heads = kps[vp->alias].heads;
        paged = kps[vp->alias].paged;
        in_fp8 = a->kv_fp8;
    }
    int kh = kv_head(a, heads, h);
    long long vo = kv_off(a, t, paged, b, j, kh);
    double sc = cache_scale(a, in_fp8, paged, b, j, kh);
    for (int c = 0; c < vp->dim; c++)
        o[c] += w * (sc * cache_load(a, in_fp8, t->p, vo + c));
}

/* One past the last key query i sees among n_kv keys. */
static long long visible_end(const ref_parts_desc *a, long long i, long long n_kv)
{
    if (!a->causal)
        return n_kv;
    long long last = i + n_kv - a->sq;   /* bottom-right aligned */
    return last + 1 < n_kv ? last + 1 : n_kv;
}

static void check_desc(const ref_parts_desc *a)
{
    assert(a->b >= 0 && a->sq >= 0 && a->hq > 0);
    assert(!a->kv_fp8 || a->kv_scale.p);
    assert(a->nk >= 1 && a->nk <= REF_PARTS_MAX && a->nv >= 1 && a->nv <= REF_PARTS_MAX);
    for (int p = 0; p < a->nk; p++) {
        const ref_kpart *k = &a->kp[p];
        assert(k->dim > 0 && k->heads > 0 && a->hq % k->heads == 0 && k->k.p && k->q.p);
        assert(!k->paged || (a->block_table && a->page_size > 0));
        (void)k;
    }
    for (int v = 0; v < a->nv; v++) {
        const ref_vpart *x = &a->vp[v];
        assert(x->dim > 0 && x->alias < a->nk);
        assert(!a->kv_fp8 || x->alias >= 0);
        if (x->alias >= 0)
            assert(x->dim <= a->kp[x->alias].dim);
        else
            assert(x->v.p && x->heads > 0 && a->hq % x->heads == 0 && (!x->paged || (a->block_table && a->page_size > 0)));
        (void)x;
    }
}

int ref_parts_vcol(const ref_parts_desc *a, int v)
{
    assert(v >= 0 && v <= a->nv);
    int col = 0;
    for (int i = 0; i < v; i++)
        col += a->vp[i].dim;
    return col;
}

int ref_parts_dv(const ref_parts_desc *a)
{
    return ref_parts_vcol(a, a->nv);
}

/* scale * sum_p q_p . k_p */
static double score(const ref_parts_desc *a, int b, long long i, int h, long long j)
{
    double acc = 0.0;
    for (int p = 0; p < a->nk; p++)
        acc += part_dot(a, &a->kp[p], b, i, h, j);
    return acc * a->scale;
}

/* One output row: sequence b, query row i, head h (two passes: the max, then the sum and the weighted values). */
static void ref_row(const ref_parts_desc *a, int dv, int b, long long i, int h, double *o, double *lse)
{
    long long end = visible_end(a, i, n_kv_of(a, b));
    long long rid = ((long long)b * a->sq + i) * a->hq + h;
    double *orow = o + rid * dv;
    memset(orow, 0, sizeof *orow * (size_t)dv);
    if (end <= 0) {
        if (lse)
            lse[rid] = -INFINITY;
        return;
    }
    double m = -INFINITY;
    for (long long j = 0; j < end; j++)
        m = fmax(m, score(a, b, i, h, j));
    double l = 0.0;
    for (long long j = 0; j < end; j++) {
        double p = exp(score(a, b, i, h, j) - m);
        l += p;
        for (int v = 0; v < a->nv; v++)
            add_value(a, a->kp, &a->vp[v], b, j, h, p, orow + ref_parts_vcol(a, v));
    }
    for (int c = 0; c < dv; c++)
        orow[c] /= l;
    if (lse)
        lse[rid] = m + log(l);
}

typedef struct ref_job {
    const ref_parts_desc *a;
    int dv;
    double *o, *lse;
} ref_job;

/* Every parts-th row from row `part` (interleaved: the rows of a long sequence, which hold most of the work,
 * spread over every part): each row is computed on its own, so the split changes no bit. */
static void ref_part(void *arg, int part, int parts)
{
    const ref_job *J = arg;
    const ref_parts_desc *a = J->a;
    long long n = (long long)a->b * a->sq * a->hq;
    for (long long r = part; r < n; r += parts)
        ref_row(a, J->dv, (int)(r / ((long long)a->sq * a->hq)), r / a->hq % a->sq, (int)(r % a->hq), J->o, J->lse);
}

void ref_parts(const ref_parts_desc *a, double *o, double *lse)
{
    check_desc(a);
    ref_job J = {a, ref_parts_dv(a), o, lse};
    double work = 0;   /* about 3 ns per multiply-add, two score passes and one value pass */
    for (int b = 0; b < a->b; b++)
        work += (double)n_kv_of(a, b) * a->sq * a->hq;
    int dq = 0;
    for (int p = 0; p < a->nk; p++)
        dq += a->kp[p].dim;
    par_run(ref_part, &J, par_threads_for(work * (2.0 * dq + J.dv) * 3.0, (long long)a->b * a->sq * a->hq));
}

/* ---- joint layer-group scan ---------------------------------------------- */

/* Layer l as a split-score problem: key parts { base, delta_l }, value parts { base v, delta_v_l }. */
static ref_parts_desc layer_desc(const ref_parts_layers_desc *g, int l)
{
    ref_parts_desc d = g->shared;
    d.nk = 2;
    d.nv = 2;
    d.kp[0].q = g->q_base[l];
    d.kp[1] = g->delta[l];
    d.vp[1] = g->delta_v[l];
    check_desc(&d);
    return d;
}

int ref_parts_layers_dv(const ref_parts_layers_desc *g)
{
    assert(g->layers >= 1 && g->layers <= REF_PARTS_MAX_LAYERS);
    int dv = g->shared.vp[0].dim + g->delta_v[0].dim;
    for (int l = 1; l < g->layers; l++)
        assert(g->shared.vp[0].dim + g->delta_v[l].dim == dv);
    return dv;
}

void ref_parts_layers(const ref_parts_layers_desc *g, ref_parts_mut mut, double *o, double *lse)
{
    assert(g->shared.nk == 1 && g->shared.nv == 1 && !g->shared.kv_fp8);
    assert(mut == REF_PARTS_EXACT || mut == REF_PARTS_MUT_DELTA_AFTER_SOFTMAX);
    int L = g->layers, dv = ref_parts_layers_dv(g);
    ref_parts_desc d[REF_PARTS_MAX_LAYERS];
    for (int l = 0; l < L; l++)
        d[l] = layer_desc(g, l);
    const ref_parts_desc *a = &d[0];   /* the shared fields */
    long long n = (long long)a->b * a->sq * a->hq;
    int after = mut == REF_PARTS_MUT_DELTA_AFTER_SOFTMAX;
    for (int b = 0; b < a->b; b++) {
        long long n_kv = n_kv_of(a, b);
        for (long long i = 0; i < a->sq; i++) {
            long long end = visible_end(a, i, n_kv);
            for (int h = 0; h < a->hq; h++) {
                long long rid = ((long long)b * a->sq + i) * a->hq + h;
                double m[REF_PARTS_MAX_LAYERS], s[REF_PARTS_MAX_LAYERS] = { 0 };
                for (int l = 0; l < L; l++) {
                    m[l] = -INFINITY;
                    memset(o + (l * n + rid) * dv, 0, sizeof *o * (size_t)dv);
                }
                /* pass 1: per layer, the max of scale (q_base_l . k_base + q_delta_l . k_delta_l)
                 * (the mutant: of the base scores alone); one scan over the keys serves every layer */
                for (long long j = 0; j < end; j++) {
                    for (int l = 0; l < L; l++) {
                        double sb = part_dot(&d[l], &d[l].kp[0], b, i, h, j);
                        double sd = after ? 0.0 : part_dot(&d[l], &d[l].kp[1], b, i, h, j);
                        m[l] = fmax(m[l], (sb + sd) * a->scale);
                    }
                }
                /* pass 2: each layer's own softmax weights on the base and delta values */
                for (long long j = 0; j < end; j++) {
                    for (int l = 0; l < L; l++) {
                        double sb = part_dot(&d[l], &d[l].kp[0], b, i, h, j);
                        double sd = after ? 0.0 : part_dot(&d[l], &d[l].kp[1], b, i, h, j);
                        double p = exp((sb + sd) * a->scale - m[l]);
                        double *orow = o + (l * n + rid) * dv;
                        s[l] += p;
                        add_value(&d[l], d[l].kp, &d[l].vp[0], b, j, h, p, orow);
                        add_value(&d[l], d[l].kp, &d[l].vp[1], b, j, h, p, orow + d[l].vp[0].dim);
                    }
                }
                for (int l = 0; l < L; l++) {
                    double *orow = o + (l * n + rid) * dv;
                    if (end > 0)
                        for (int c = 0; c < dv; c++)
                            orow[c] /= s[l];
                    if (lse)
                        lse[l * n + rid] = end > 0 ? m[l] + log(s[l]) : -INFINITY;
                }
                /* the mutant: delta scores added to the base probabilities, after the softmax */
                for (long long j = 0; after && j < end; j++) {
                    for (int l = 0; l < L; l++) {
                        double w = part_dot(&d[l], &d[l].kp[1], b, i, h, j) * a->scale;
                        double *orow = o + (l * n + rid) * dv;
                        add_value(&d[l], d[l].kp, &d[l].vp[0], b, j, h, w, orow);
                        add_value(&d[l], d[l].kp, &d[l].vp[1], b, j, h, w, orow + d[l].vp[0].dim);
                    }
                }
            }
        }
    }
}
