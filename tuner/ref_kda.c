/* tuner/ref_kda.c: plain CPU fp64 references of Kimi Delta Attention (see ref_kda.h) */
#include "tuner/ref_kda.h"
#include "tuner/check.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static double bf16(const void *base, long long off)
{
    uint32_t u = (uint32_t)((const uint16_t *)base)[off] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void seq_range(const kf_kda_params *p, int n, long long *bos, long long *len)
{
    if (p->cu_seqlens) {
        long long a, b;
        if (p->cu64) {
            a = ((const int64_t *)p->cu_seqlens)[n];
            b = ((const int64_t *)p->cu_seqlens)[n + 1];
        } else {
            a = ((const int32_t *)p->cu_seqlens)[n];
            b = ((const int32_t *)p->cu_seqlens)[n + 1];
        }
        *bos = a;
        *len = b - a;
    } else {
        *bos = 0;
        *len = p->t;
    }
}

long long ref_kda_rows(const kf_kda_params *p)
{
    long long bos, len;
    if (!p->cu_seqlens)
        return (long long)p->nseq * p->t;
    seq_range(p, p->nseq - 1, &bos, &len);
    return p->nseq > 0 ? bos + len : 0;
}

static long long out_row(const kf_kda_params *p, int n, long long i)
{
    long long bos, len;
    seq_range(p, n, &bos, &len);
    return p->cu_seqlens ? bos + i : (long long)n * p->t + i;
}

void ref_kda_token(const kf_kda_params *p, int n, long long i, int hv,
                   double *q, double *k, double *v, double *g, double *beta)
{
    long long bos, len;
    const int dk = p->dk, dv = p->dv, h = hv / (p->hv_heads / p->h_heads);
    const int cu = p->cu_seqlens != 0;
    seq_range(p, n, &bos, &len);
    assert(i >= 0 && i < len);
    const long long t = bos + i;
    const long long qo = (cu ? 0 : n * p->q_sb) + t * p->q_st + h * p->q_sh;
    const long long ko = (cu ? 0 : n * p->k_sb) + t * p->k_st + h * p->k_sh;
    const long long vo = (cu ? 0 : n * p->v_sb) + t * p->v_st + hv * p->v_sh;
    const long long go = (cu ? 0 : n * p->g_sb) + t * p->g_st + hv * p->g_sh;
    const long long bo = (cu ? 0 : n * p->b_sb) + t * p->b_st + hv * p->b_sh;
    double sq = 0, sk = 0;
    for (int d = 0; d < dk; ++d) {
        q[d] = bf16(p->q, qo + d);
        k[d] = bf16(p->k, ko + d);
        sq += q[d] * q[d];
        sk += k[d] * k[d];
    }
    const double nq = p->l2norm ? 1.0 / sqrt(sq + 1e-6) : 1.0, nk = p->l2norm ? 1.0 / sqrt(sk + 1e-6) : 1.0;
    for (int d = 0; d < dk; ++d) {
        q[d] *= nq * (double)p->scale;
        k[d] *= nk;
        double x = p->g[go + d];
        if (p->gate == 1) {
            const double bias = p->dt_bias ? p->dt_bias[hv * p->dt_sh + d] : 0.0;
            x = (double)p->lower_bound * sigmoid(exp((double)p->a_log[hv]) * (x + bias));
        }
        g[d] = x;
    }
    for (int c = 0; c < dv; ++c)
        v[c] = bf16(p->v, vo + c);
    *beta = p->beta_sigmoid ? sigmoid(p->beta[bo]) : (double)p->beta[bo];
}

static void load_state(const kf_kda_params *p, int n, int hv, double *s)
{
    const int dk = p->dk, dv = p->dv;
    for (int a = 0; a < dk; ++a)
        for (int c = 0; c < dv; ++c) {
            double x = 0;
            if (p->h0) {
                const long long base = n * p->h0_sn + hv * p->h0_sh;
                x = p->h0[base + (p->h0_vfirst ? c * p->h0_sr + a : a * p->h0_sr + c)];
            }
            s[a * dv + c] = x;
        }
}

static void heads(const kf_kda_params *p, int *hv0, int *nhv)
{
    if (*nhv <= 0) {
        *hv0 = 0;
        *nhv = p->hv_heads;
    }
}

void ref_kda(const kf_kda_params *p, int hv0, int nhv, double *o, double *ht)
{
    const int dk = p->dk, dv = p->dv;
    double *s = malloc(sizeof(double) * dk * dv);
    double *q = malloc(sizeof(double) * dk * 3), *k = q + dk, *g = k + dk;
    double *v = malloc(sizeof(double) * dv * 2), *u = v + dv;
    heads(p, &hv0, &nhv);
    for (int n = 0; n < p->nseq; ++n)
        for (int hv = hv0; hv < hv0 + nhv; ++hv) {
            long long bos, len;
            seq_range(p, n, &bos, &len);
            load_state(p, n, hv, s);
            for (long long i = 0; i < len; ++i) {
                double beta;
                ref_kda_token(p, n, i, hv, q, k, v, g, &beta);
                for (int a = 0; a < dk; ++a) {
                    const double e = exp(g[a]);
                    for (int c = 0; c < dv; ++c)
                        s[a * dv + c] *= e;
                }
                for (int c = 0; c < dv; ++c) {
                    double acc = 0;
                    for (int a = 0; a < dk; ++a)
                        acc += s[a * dv + c] * k[a];
                    u[c] = beta * (v[c] - acc);
                }
                for (int a = 0; a < dk; ++a)
                    for (int c = 0; c < dv; ++c)
                        s[a * dv + c] += k[a] * u[c];
                double *orow = o + (out_row(p, n, i) * p->hv_heads + hv) * dv;
                for (int c = 0; c < dv; ++c) {
                    double acc = 0;
                    for (int a = 0; a < dk; ++a)
                        acc += s[a * dv + c] * q[a];
                    orow[c] = acc;
                }
            }
            if (ht)
                memcpy(ht + ((long long)n * p->hv_heads + hv) * dk * dv, s, sizeof(double) * dk * dv);
        }
    free(s);
    free(q);
    free(v);
}

/* One chunk of cc tokens from token i0 applied to a state X [dk, w] whose values are
 * val(j, col): the token values v_j for the first dv columns after `vcol0`, zero elsewhere
 * (the A part of a segment map). o (may be NULL) gets O rows [cc, dv] (row stride ostride). */
typedef struct chunk_in {
    int cc, dk;
    double *q, *k, *g, *beta, *vv;  /* [cc, dk] x3, [cc], [cc, dv] */
} chunk_in;

static void chunk_apply(const kf_kda_params *p, const chunk_in *in, ref_kda_mut mut, double *x, int w,
                        int vcol0, double *o, long long ostride)
{
    const int cc = in->cc, dk = p->dk, dv = p->dv;
    double *G = malloc(sizeof(double) * cc * dk);
    double *L = calloc((size_t)cc * cc, sizeof(double)), *A = calloc((size_t)cc * cc, sizeof(double));
    double *T = calloc((size_t)cc * cc, sizeof(double));
    double *W = malloc(sizeof(double) * cc * dk), *U = calloc((size_t)cc * w, sizeof(double));
    double *VP = malloc(sizeof(double) * cc * w);
    for (int d = 0; d < dk; ++d) {
        double acc = 0;
        for (int i = 0; i < cc; ++i) {
            acc += in->g[i * dk + d];
            G[i * dk + d] = acc;
        }
    }
    for (int i = 0; i < cc; ++i)
        for (int j = 0; j <= i; ++j) {
            double l = 0, a = 0;
            for (int d = 0; d < dk; ++d) {
                const double e = exp(G[i * dk + d] - G[j * dk + d]);   /* argument <= 0 */
                l += in->k[i * dk + d] * in->k[j * dk + d] * e;
                a += in->q[i * dk + d] * in->k[j * dk + d] * e;
            }
            if (j < i)
                L[i * cc + j] = in->beta[i] * l;
            A[i * cc + j] = (mut == REF_KDA_MUT_NO_DIAG && i == j) ? 0.0 : a;
        }
    /* T = (I + L)^-1 diag(beta): row i = beta_i e_i - sum_{j<i} L[i,j] T[j,:] */
    for (int i = 0; i < cc; ++i) {
        for (int c = 0; c < cc; ++c) {
            double acc = (c == i) ? in->beta[i] : 0.0;
            for (int j = c; j < i; ++j)
                acc -= L[i * cc + j] * T[j * cc + c];
            T[i * cc + c] = acc;
        }
    }
    for (int i = 0; i < cc; ++i) {
        for (int d = 0; d < dk; ++d) {
            double acc = 0;
            for (int j = 0; j <= i; ++j)
                acc += T[i * cc + j] * in->k[j * dk + d] * exp(G[j * dk + d]);
            W[i * dk + d] = acc;
        }
        for (int c = 0; c < dv; ++c) {
            double acc = 0;
            for (int j = 0; j <= i; ++j)
                acc += T[i * cc + j] * in->vv[j * dv + c];
            U[i * w + vcol0 + c] = acc;
        }
    }
    /* V' = U - W S */
    for (int i = 0; i < cc; ++i)
        for (int c = 0; c < w; ++c) {
            double acc = U[i * w + c];
            if (mut != REF_KDA_MUT_NO_INTER)
                for (int d = 0; d < dk; ++d)
                    acc -= W[i * dk + d] * x[d * w + c];
            VP[i * w + c] = acc;
        }
    /* O = (Q . exp G) S + A V' (value columns only) */
    if (o)
        for (int i = 0; i < cc; ++i)
            for (int c = 0; c < dv; ++c) {
                double acc = 0;
                for (int d = 0; d < dk; ++d)
                    acc += in->q[i * dk + d] * exp(G[i * dk + d]) * x[d * w + vcol0 + c];
                for (int j = 0; j <= i; ++j)
                    acc += A[i * cc + j] * VP[j * w + vcol0 + c];
                o[i * ostride + c] = acc;
            }
    /* S <- diag(exp G_last) S + (K . exp(G_last - G))^T V' */
    const double *Gl = G + (cc - 1) * dk;
    for (int d = 0; d < dk; ++d) {
        const double dec = (mut == REF_KDA_MUT_NO_DECAY) ? 1.0 : exp(Gl[d]);
        for (int c = 0; c < w; ++c) {
            double acc = dec * x[d * w + c];
            for (int j = 0; j < cc; ++j)
                acc += in->k[j * dk + d] * exp(Gl[d] - G[j * dk + d]) * VP[j * w + c];
            x[d * w + c] = acc;
        }
    }
    free(G); free(L); free(A); free(T); free(W); free(U); free(VP);
}

static void chunk_load(const kf_kda_params *p, int n, int hv, long long i0, int cc, chunk_in *in)
{
    const int dk = p->dk, dv = p->dv;
    in->cc = cc;
    in->dk = dk;
    for (int i = 0; i < cc; ++i)
        ref_kda_token(p, n, i0 + i, hv, in->q + i * dk, in->k + i * dk, in->vv + i * dv, in->g + i * dk,
                      in->beta + i);
}

static chunk_in chunk_alloc(const kf_kda_params *p, int c)
{
    chunk_in in;
    in.q = malloc(sizeof(double) * c * p->dk * 3);
    in.k = in.q + c * p->dk;
    in.g = in.k + c * p->dk;
    in.beta = malloc(sizeof(double) * c);
    in.vv = malloc(sizeof(double) * c * p->dv);
    return in;
}

static void chunk_free(chunk_in *in)
{
    free(in->q);
    free(in->beta);
    free(in->vv);
}

int ref_kda_chunked(const kf_kda_params *p, int c, ref_kda_mut mut, int hv0, int nhv, double *o, double *ht)
{
    const int dk = p->dk, dv = p->dv;
    if (c < 1)
        return -1;
    heads(p, &hv0, &nhv);
    double *s = malloc(sizeof(double) * dk * dv);
    chunk_in in = chunk_alloc(p, c);
    for (int n = 0; n < p->nseq; ++n)
        for (int hv = hv0; hv < hv0 + nhv; ++hv) {
            long long bos, len;
            seq_range(p, n, &bos, &len);
            load_state(p, n, hv, s);
            for (long long i0 = 0; i0 < len; i0 += c) {
                const int cc = (int)(len - i0 < c ? len - i0 : c);
                chunk_load(p, n, hv, i0, cc, &in);
                double *orow = o + (out_row(p, n, i0) * p->hv_heads + hv) * dv;
                chunk_apply(p, &in, mut, s, dv, 0, orow, (long long)p->hv_heads * dv);
            }
            if (ht)
                memcpy(ht + ((long long)n * p->hv_heads + hv) * dk * dv, s, sizeof(double) * dk * dv);
        }
    chunk_free(&in);
    free(s);
    return 0;
}

int ref_kda_segment(const kf_kda_params *p, int c, int n, int hv, long long i0, long long i1,
                    double *a, double *b)
{
    const int dk = p->dk, dv = p->dv, w = dk + dv;
    if (c < 1 || i1 < i0)
        return -1;
    double *x = calloc((size_t)dk * w, sizeof(double));   /* [A | B], A = I, B = 0 */
    for (int d = 0; d < dk; ++d)
        x[d * w + d] = 1.0;
    chunk_in in = chunk_alloc(p, c);
    for (long long s0 = i0; s0 < i1; s0 += c) {
        const int cc = (int)(i1 - s0 < c ? i1 - s0 : c);
        chunk_load(p, n, hv, s0, cc, &in);
        chunk_apply(p, &in, REF_KDA_EXACT, x, w, dk, NULL, 0);
    }
    for (int d = 0; d < dk; ++d) {
        memcpy(a + d * dk, x + d * w, sizeof(double) * dk);
        memcpy(b + d * dv, x + d * w + dk, sizeof(double) * dv);
    }
    chunk_free(&in);
    free(x);
    return 0;
}

/* ---- random problems ---------------------------------------------------- */

/* Fills the rest of buf (total bytes) by repeating its first `have` bytes (doubling copies). */
static void repeat_head(void *buf, size_t have, size_t total)
{
    char *b = buf;
    while (have > 0 && have < total) {
        size_t k = have < total - have ? have : total - have;
        memcpy(b + have, b, k);
        have += k;
    }
}

/* Elements to draw of an array of n with per_row elements a token row (all of them unless c->fill_rows). */
static size_t drawn(const ref_kda_case *c, size_t n, size_t per_row)
{
    size_t m = c->fill_rows > 0 ? (size_t)c->fill_rows * per_row : n;
    return m < n ? m : n;
}

static void fill_bf16_normal(void *buf, size_t n, check_rng *r, double sigma)
{
    for (size_t i = 0; i < n; ++i)
        ((uint16_t *)buf)[i] = check_f32_to_bf16((float)(sigma * check_rng_normal(r)));
}

int ref_kda_host_make(ref_kda_host *hp, const ref_kda_case *c, unsigned long long seed)
{
    memset(hp, 0, sizeof *hp);
    if (c->nseq < 1 || c->h < 1 || c->hv < 1 || c->hv % c->h || c->dk < 1 || c->dv < 1 || (!c->lens && c->t < 0))
        return -1;
    kf_kda_params *p = &hp->p;
    check_rng r;
    check_rng_seed(&r, seed);
    long long total = 0;
    if (c->lens)
        for (int n = 0; n < c->nseq; ++n)
            total += c->lens[n];
    else
        total = (long long)c->nseq * c->t;
    const long long rows = total;
    const int qrow = c->dk + c->pad_qk;
    p->nseq = c->nseq;
    p->t = c->lens ? 0 : c->t;
    p->total = (int)total;
    p->h_heads = c->h;
    p->hv_heads = c->hv;
    p->dk = c->dk;
    p->dv = c->dv;
    p->cu64 = c->cu64;
    p->gate = c->gate;
    p->l2norm = c->l2norm;
    p->beta_sigmoid = c->beta_sigmoid;
    p->scale = (float)(1.0 / sqrt((double)c->dk));
    p->lower_bound = (float)c->lower_bound;
    p->q_sh = p->k_sh = qrow;
    p->q_st = p->k_st = (long long)c->h * qrow;
    p->v_sh = p->o_sh = c->dv;
    p->v_st = p->o_st = (long long)c->hv * c->dv;
    p->g_sh = c->dk;
    p->g_st = (long long)c->hv * c->dk;
    p->b_sh = 1;
    p->b_st = c->hv;
    if (!c->lens) {
        p->q_sb = p->k_sb = p->q_st * c->t;
        p->v_sb = p->o_sb = p->v_st * c->t;
        p->g_sb = p->g_st * c->t;
        p->b_sb = p->b_st * c->t;
    }
    hp->nq = hp->nk = (size_t)rows * c->h * qrow;
    hp->nv = hp->no = (size_t)rows * c->hv * c->dv;
    hp->ng = (size_t)rows * c->hv * c->dk;
    hp->nbeta = (size_t)rows * c->hv;
    hp->q = malloc(hp->nq * 2 + 16);
    hp->k = malloc(hp->nk * 2 + 16);
    hp->v = malloc(hp->nv * 2 + 16);
    hp->o = malloc(hp->no * 2 + 16);
    hp->g = malloc(hp->ng * 4 + 16);
    hp->beta = malloc(hp->nbeta * 4 + 16);
    if (!hp->q || !hp->k || !hp->v || !hp->o || !hp->g || !hp->beta)
        return ref_kda_host_free(hp), -1;
    const size_t dq = drawn(c, hp->nq, (size_t)c->h * qrow), dv = drawn(c, hp->nv, (size_t)c->hv * c->dv);
    const size_t dg = drawn(c, hp->ng, (size_t)c->hv * c->dk), db = drawn(c, hp->nbeta, (size_t)c->hv);
    fill_bf16_normal(hp->q, dq, &r, 1.0);
    fill_bf16_normal(hp->k, dq, &r, c->l2norm ? 1.0 : 1.0 / sqrt((double)c->dk));
    for (size_t i = 0; i < dv; ++i)
        ((uint16_t *)hp->v)[i] = check_f32_to_bf16((float)check_rng_uniform(&r));
    repeat_head(hp->q, dq * 2, hp->nq * 2);
    repeat_head(hp->k, dq * 2, hp->nk * 2);
    repeat_head(hp->v, dv * 2, hp->nv * 2);
    if (c->pad_qk)
        for (size_t i = 0; i < hp->nq; ++i)
            if ((long long)(i % qrow) >= c->dk) {
                ((uint16_t *)hp->q)[i] = 0x7FC0;
                ((uint16_t *)hp->k)[i] = 0x7FC0;
            }
    check_poison(CHECK_BF16, hp->o, hp->no);
    for (size_t i = 0; i < dg; ++i)
        hp->g[i] = c->gate == 1 ? (float)check_rng_normal(&r)
                                : (float)(-c->log_gate_max * 0.5 * (check_rng_uniform(&r) + 1.0));
    for (size_t i = 0; i < db; ++i)
        hp->beta[i] = c->beta_sigmoid ? (float)check_rng_normal(&r) : (float)(0.5 * (check_rng_uniform(&r) + 1.0));
    repeat_head(hp->g, dg * 4, hp->ng * 4);
    repeat_head(hp->beta, db * 4, hp->nbeta * 4);
    if (c->gate == 1) {
        hp->nalog = c->hv;
        hp->ndt = (size_t)c->hv * c->dk;
        hp->a_log = malloc(hp->nalog * 4);
        hp->dt_bias = malloc(hp->ndt * 4);
        if (!hp->a_log || !hp->dt_bias)
            return ref_kda_host_free(hp), -1;
        for (size_t i = 0; i < hp->nalog; ++i)
            hp->a_log[i] = (float)check_rng_uniform(&r);
        for (size_t i = 0; i < hp->ndt; ++i)
            hp->dt_bias[i] = (float)(1.5 + 2.5 * check_rng_uniform(&r));
        p->dt_sh = c->dk;
    }
    if (c->lens) {
        hp->ncu_bytes = (size_t)(c->nseq + 1) * (c->cu64 ? 8 : 4);
        hp->cu = malloc(hp->ncu_bytes);
        if (!hp->cu)
            return ref_kda_host_free(hp), -1;
        long long acc = 0;
        for (int n = 0; n <= c->nseq; ++n) {
            if (c->cu64)
                ((int64_t *)hp->cu)[n] = acc;
            else
                ((int32_t *)hp->cu)[n] = (int32_t)acc;
            if (n < c->nseq)
                acc += c->lens[n];
        }
    }
    const int srows = c->h0 == 2 ? c->dv : c->dk, scols = c->h0 == 2 ? c->dk : c->dv;
    if (c->h0) {
        const long long sr = scols + c->pad_state;
        hp->nh0 = (size_t)c->nseq * c->hv * srows * sr;
        hp->h0 = malloc(hp->nh0 * 4 + 16);
        if (!hp->h0)
            return ref_kda_host_free(hp), -1;
        for (size_t i = 0; i < hp->nh0; ++i) {
            hp->h0[i] = (float)check_rng_uniform(&r);
            if ((long long)(i % sr) >= scols)
                memcpy(&hp->h0[i], &(uint32_t){ 0x7FC00000u }, 4);
        }
        p->h0_sr = sr;
        p->h0_sh = srows * sr;
        p->h0_sn = p->h0_sh * c->hv;
        p->h0_vfirst = c->h0 == 2;
    }
    if (c->ht) {
        const int rrows = c->ht == 2 ? c->dv : c->dk, rcols = c->ht == 2 ? c->dk : c->dv;
        const long long sr = rcols + c->pad_state;
        hp->nht = (size_t)c->nseq * c->hv * rrows * sr;
        hp->ht = malloc(hp->nht * 4 + 16);
        if (!hp->ht)
            return ref_kda_host_free(hp), -1;
        check_poison(CHECK_FP32, hp->ht, hp->nht);
        p->ht_sr = sr;
        p->ht_sh = rrows * sr;
        p->ht_sn = p->ht_sh * c->hv;
        p->ht_vfirst = c->ht == 2;
    }
    p->q = hp->q; p->k = hp->k; p->v = hp->v; p->o = hp->o; p->g = hp->g; p->beta = hp->beta;
    p->a_log = hp->a_log; p->dt_bias = hp->dt_bias; p->h0 = hp->h0; p->ht = hp->ht; p->cu_seqlens = hp->cu;
    return 0;
}

void ref_kda_host_free(ref_kda_host *hp)
{
    free(hp->q); free(hp->k); free(hp->v); free(hp->o); free(hp->g); free(hp->beta);
    free(hp->a_log); free(hp->dt_bias); free(hp->h0); free(hp->ht); free(hp->cu);
    memset(hp, 0, sizeof *hp);
}
