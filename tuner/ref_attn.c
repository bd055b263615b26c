/* tuner/ref_attn.c: plain CPU fp64 reference of GQA attention forward, split partials and their combine */
#include "tuner/ref_attn.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* One sequence of the batch, resolved from the description. */
typedef struct seq {
    int b;
    long long r0, n_q;   /* first query row (packed) and query rows */
    long long k0, n_kv;  /* first key (packed) and keys */
    long long row0;      /* output row of query 0 */
} seq;

static seq seq_of(const ref_attn_desc *a, int b)
{
    seq s = { .b = b };
    s.r0 = a->cu_seqlens_q ? a->cu_seqlens_q[b] : 0;
    s.n_q = a->cu_seqlens_q ? a->cu_seqlens_q[b + 1] - s.r0 : a->sq;
    s.k0 = a->cu_seqlens_k ? a->cu_seqlens_k[b] : 0;
    s.n_kv = a->cu_seqlens_k ? a->cu_seqlens_k[b + 1] - s.k0 : (a->kv_len ? a->kv_len[b] : a->skv);
    s.row0 = (a->cu_seqlens_q ? 0 : (long long)b * a->sq) + s.r0;
    assert(s.n_q >= 0 && s.n_kv >= 0);
    return s;
}

long long ref_attn_rows(const ref_attn_desc *a)
{
    return a->cu_seqlens_q ? a->cu_seqlens_q[a->b] : (long long)a->b * a->sq;
}

/* Element offset of q row i, head h. */
static long long q_off(const ref_attn_desc *a, const seq *s, long long i, int h)
{
    return (a->cu_seqlens_q ? 0 : s->b * a->q_sb) + (s->r0 + i) * a->q_ss + h * a->q_sh;
}

/* Element offset of key (or value) j, kv head kh, with that tensor's strides. */
static long long kv_off(const ref_attn_desc *a, const seq *s, long long j, int kh,
                        long long sb, long long ss, long long sh)
{
    if (a->block_table) {
        long long page = a->block_table[s->b * a->bt_sb + j / a->page_size];
        return page * sb + (j % a->page_size) * ss + kh * sh;
    }
    return (a->cu_seqlens_k ? 0 : s->b * sb) + (s->k0 + j) * ss + kh * sh;
}

static int kv_head(const ref_attn_desc *a, int h)
{
    return h / (a->hq / a->hkv);
}

double ref_e4m3(unsigned char b)
{
    int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7)
        return NAN;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return sign ? -v : v;
}

/* Element i of k (is_v 0) or v (1) of kv head kh: the dtype's value, or scale * e4m3 */
static double kv_load(const ref_attn_desc *a, int is_v, int kh, size_t i)
{
    const void *buf = is_v ? a->v : a->k;
    if (!a->kv_fp8)
        return check_load(a->dtype, buf, i);
    return (double)(is_v ? a->v_scale : a->k_scale)[kh] * ref_e4m3(((const unsigned char *)buf)[i]);
}

/* scale * q_i . k_j, capped: softcap * tanh(that / softcap) */
static double score(const ref_attn_desc *a, const seq *s, long long i, int h, long long j)
{
    long long qo = q_off(a, s, i, h);
    int kh = kv_head(a, h);
    long long ko = kv_off(a, s, j, kh, a->k_sb, a->k_ss, a->k_sh);
    double acc = 0.0;
    for (int c = 0; c < a->d; c++)
        acc += check_load(a->dtype, a->q, (size_t)(qo + c)) * kv_load(a, 0, kh, (size_t)(ko + c));
    acc *= a->scale;
    return a->softcap > 0 ? a->softcap * tanh(acc / a->softcap) : acc;
}

/* The first key query i may see in [lo, hi): the window's lower bound (pi - window_left), else lo. */
static long long visible_start(const ref_attn_desc *a, const seq *s, long long i, long long lo)
{
    if (!a->window)
        return lo;
    long long first = i + s->n_kv - s->n_q - a->window_left;
    return first > lo ? first : lo;
}

/* One past the last key query i may see in [lo, hi). */
static long long visible_end(const ref_attn_desc *a, const seq *s, long long i, long long hi)
{
    if (!a->causal)
        return hi;
    long long last = i + s->n_kv - s->n_q;   /* bottom-right aligned */
    return last + 1 < hi ? last + 1 : hi;
}

/*
 * Attention of query row i, head h over keys [lo, hi) (causal mask and window applied), with the sink
 * logit `sink` (-inf: none) as one more term of the denominator:
 * o[0..dv) = sum_j e^(s_j - m) v_j / (e^(sink - m) + sum_j e^(s_j - m)), m the max of the scores and the sink,
 * *lse = m + log(that denominator). Two passes: the max, then the sum and the weighted values.
 * No visible key: o = 0, lse = sink (-inf without one).
 */
static void attend(const ref_attn_desc *a, const seq *s, long long i, int h,
                   long long lo, long long hi, double sink, double *o, double *lse)
{
    long long end = visible_end(a, s, i, hi);
    lo = visible_start(a, s, i, lo);
    memset(o, 0, sizeof *o * (size_t)a->dv);
    if (end <= lo) {
        *lse = sink;
        return;
    }
    double m = sink;
    for (long long j = lo; j < end; j++)
        m = fmax(m, score(a, s, i, h, j));
    double l = exp(sink - m);   /* 0 without a sink */
    int kh = kv_head(a, h);
    for (long long j = lo; j < end; j++) {
        double p = exp(score(a, s, i, h, j) - m);
        long long vo = kv_off(a, s, j, kh, a->v_sb, a->v_ss, a->v_sh);
        l += p;
        for (int c = 0; c < a->dv; c++)
            o[c] += p * kv_load(a, 1, kh, (size_t)(vo + c));
    }
    for (int c = 0; c < a->dv; c++)
        o[c] /= l;
    *lse = m + log(l);
}

static void check_desc(const ref_attn_desc *a)
{
    assert(a->b >= 0 && a->hq > 0 && a->hkv > 0 && a->hq % a->hkv == 0);
    assert(a->d > 0 && a->dv > 0);
    assert(!a->block_table || a->page_size > 0);
    (void)a;
}

void ref_attn(const ref_attn_desc *a, double *o, double *lse)
{
    check_desc(a);
    for (int b = 0; b < a->b; b++) {
        seq s = seq_of(a, b);
        for (long long i = 0; i < s.n_q; i++) {
            for (int h = 0; h < a->hq; h++) {
                long long rid = (s.row0 + i) * a->hq + h;
                double l;
                attend(a, &s, i, h, 0, s.n_kv, a->sinks ? (double)a->sinks[h] : -INFINITY, o + rid * a->dv, &l);
                if (lse)
                    lse[rid] = l;
            }
        }
    }
}

void ref_split_range(long long n_kv, int bn, int splits, int s, long long *lo, long long *hi)
{
    assert(bn > 0 && splits > 0 && s >= 0 && s < splits && n_kv >= 0);
    long long blocks = (n_kv + bn - 1) / bn;
    long long per = (blocks + splits - 1) / splits * bn;
    long long a = s * per, e = (s + 1) * per;
    *lo = a < n_kv ? a : n_kv;
    *hi = e < n_kv ? e : n_kv;
}

void ref_attn_split(const ref_attn_desc *a, int bn, int splits, double *ws_o, double *ws_lse)
{
    check_desc(a);
    long long nrid = ref_attn_rows(a) * a->hq;
    for (int b = 0; b < a->b; b++) {
        seq s = seq_of(a, b);
        for (int sp = 0; sp < splits; sp++) {
            long long lo, hi;
            ref_split_range(s.n_kv, bn, splits, sp, &lo, &hi);
            for (long long i = 0; i < s.n_q; i++) {
                for (int h = 0; h < a->hq; h++) {
                    long long w = sp * nrid + (s.row0 + i) * a->hq + h;
                    attend(a, &s, i, h, lo, hi, -INFINITY, ws_o + w * a->dv, ws_lse + w);   /* no sink in a partial */
                }
            }
        }
    }
}

void ref_attn_combine(int splits, long long n, int dv, const double *ws_o, const double *ws_lse,
                      double *o, double *lse)
{
    assert(splits > 0 && n >= 0 && dv > 0);
    for (long long r = 0; r < n; r++) {
        double m = -INFINITY;
        for (int s = 0; s < splits; s++)
            m = fmax(m, ws_lse[s * n + r]);
        if (m == -INFINITY)
            m = 0.0;
        double sum = 0.0;
        for (int s = 0; s < splits; s++)
            sum += exp(ws_lse[s * n + r] - m);
        double L = m + log(sum);   /* log(0) = -inf: every split empty */
        double *orow = o + r * dv;
        memset(orow, 0, sizeof *orow * (size_t)dv);
        if (L != -INFINITY) {
            for (int s = 0; s < splits; s++) {
                if (ws_lse[s * n + r] == -INFINITY)
                    continue;   /* empty split: weight 0, its O_s is not read */
                double w = exp(ws_lse[s * n + r] - L);
                for (int c = 0; c < dv; c++)
                    orow[c] += w * ws_o[(s * n + r) * dv + c];
            }
        }
        if (lse)
            lse[r] = L;
    }
}

void ref_attn_combine_sinks(int splits, long long n, int dv, int hq, const float *sinks, const double *ws_o,
                            const double *ws_lse, double *o, double *lse)
{
    assert(splits > 0 && n >= 0 && dv > 0 && hq > 0 && sinks);
    for (long long r = 0; r < n; r++) {
        double sink = sinks[r % hq];
        double m = sink;
        for (int s = 0; s < splits; s++)
            m = fmax(m, ws_lse[s * n + r]);
        double sum = exp(sink - m);
        for (int s = 0; s < splits; s++)
            sum += exp(ws_lse[s * n + r] - m);
        double L = m + log(sum);
        double *orow = o + r * dv;
        memset(orow, 0, sizeof *orow * (size_t)dv);
        for (int s = 0; s < splits; s++) {
            if (ws_lse[s * n + r] == -INFINITY)
                continue;
            double w = exp(ws_lse[s * n + r] - L);
            for (int c = 0; c < dv; c++)
                orow[c] += w * ws_o[(s * n + r) * dv + c];
        }
        if (lse)
            lse[r] = L;
    }
}
