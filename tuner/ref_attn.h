/* tuner/ref_attn.h: plain CPU fp64 reference of GQA attention forward, split partials and their combine */
#ifndef KF_TUNER_REF_ATTN_H
#define KF_TUNER_REF_ATTN_H

#include "tuner/check.h"

/*
 * The problem, described exactly like kf_attn_params (templates/common/attn_params.h)
 * but with HOST pointers and the dims the kernels take as compile-time facts:
 *   - strides in elements; the last dimension of q, k, v is contiguous;
 *   - sequence b: query rows r0 = cu_seqlens_q ? cu_seqlens_q[b] : 0,
 *     n_q = cu_seqlens_q ? cu_seqlens_q[b+1] - r0 : sq; keys k0 = cu_seqlens_k ?
 *     cu_seqlens_k[b] : 0, n_kv = cu_seqlens_k ? cu_seqlens_k[b+1] - k0 : (kv_len ? kv_len[b] : skv);
 *   - q row i, head h: q + (cu_seqlens_q ? 0 : b*q_sb) + (r0+i)*q_ss + h*q_sh;
 *   - key j, kv head kh: k + (cu_seqlens_k ? 0 : b*k_sb) + (k0+j)*k_ss + kh*k_sh (v alike),
 *     paged (block_table != 0): page = block_table[b*bt_sb + j/page_size],
 *     k + page*k_sb + (j%page_size)*k_ss + kh*k_sh (v alike);
 *   - kv head of query head h: h / (hq / hkv);
 *   - causal: query i sees keys j <= i + n_kv - n_q (bottom-right aligned);
 *   - a row with no visible key: o = 0, lse = -inf; lse is a natural log.
 * Nothing past n_kv of a sequence is read (tails may hold NaN).
 */
typedef struct ref_attn_desc {
    check_dtype dtype;          /* of q, k and v */
    const void *q, *k, *v;      /* host buffers */
    const int *cu_seqlens_q;    /* [b+1] or NULL */
    const int *cu_seqlens_k;    /* [b+1] or NULL */
    const int *kv_len;          /* [b] or NULL */
    const int *block_table;     /* [b, bt_sb] or NULL */
    long long q_sb, q_ss, q_sh;
    long long k_sb, k_ss, k_sh;
    long long v_sb, v_ss, v_sh;
    long long bt_sb;
    int b, sq, skv, hq, hkv;
    int d, dv;                  /* head dims of q/k and of v/o */
    int page_size;              /* used when block_table != NULL */
    int causal;
    double scale;               /* softmax scale, usually 1/sqrt(d) */
    /* model features, appended (zero: off), as in common/attn_params.h:
     *   window: query i (key position pi = i + n_kv - n_q) sees keys pi - window_left .. pi (with causal);
     *   softcap > 0: score = softcap * tanh(scale q.k / softcap);
     *   sinks: sinks[h] joins the denominator of ref_attn (not of the split partials: ref_attn_combine_sinks
     *     adds it there); a row with no visible key: o = 0, lse = sinks[h];
     *   kv_fp8: k and v are e4m3 bytes (strides in bytes), key value = k_scale[kv head] * e4m3 (v alike). */
    int window;                 /* 1: sliding window of window_left */
    int window_left;
    double softcap;
    const float *sinks;         /* [hq] host, or NULL */
    int kv_fp8;
    const float *k_scale, *v_scale;   /* [hkv] host, with kv_fp8 */
} ref_attn_desc;

/* The value of an e4m3 byte (sign, 4 exponent bits of bias 7, 3 mantissa bits; 0x7f/0xff NaN). */
double ref_e4m3(unsigned char b);

/*
 * Output layout of the reference (dense, fp64):
 *   row index  row = (cu_seqlens_q ? 0 : b*sq) + r0 + i      (0 <= row < ref_attn_rows())
 *   o[(row*hq + h)*dv + c],  lse[row*hq + h]
 * i.e. the row id rid = row*hq + h of the split-KV workspace in attn_params.h.
 */
long long ref_attn_rows(const ref_attn_desc *a);   /* b*sq dense, cu_seqlens_q[b] packed */

/* The reference: fills o [rows, hq, dv] and lse [rows, hq]. lse may be NULL. */
void ref_attn(const ref_attn_desc *a, double *o, double *lse);

/*
 * The split-range rule, shared with every split-KV kernel: split s (0 <= s < splits)
 * of a sequence with n_kv keys, key block size bn, covers keys [lo, hi) with
 *   per = ceil(ceil(n_kv / bn) / splits) * bn,  lo = min(s*per, n_kv),  hi = min((s+1)*per, n_kv).
 * Splits are whole blocks; trailing splits may be empty (lo == hi) when there are
 * more splits than blocks, and then give O_s = 0, lse_s = -inf.
 */
void ref_split_range(long long n_kv, int bn, int splits, int s, long long *lo, long long *hi);

/*
 * Split partials of the reference, in the workspace layout of attn_params.h with
 * ws_rows = ref_attn_rows(a):
 *   ws_o[(s*ws_rows*hq + rid)*dv + c], ws_lse[s*ws_rows*hq + rid],
 * each normalised by its own sum, lse_s = m_s + log(l_s); causal masking applies
 * within the range; a range with no visible key gives O_s = 0, lse_s = -inf.
 */
void ref_attn_split(const ref_attn_desc *a, int bn, int splits, double *ws_o, double *ws_lse);

/*
 * Merge split partials (layout above, n = ws_rows*hq row ids) into o [n, dv] and
 * lse [n] (lse may be NULL): m = max lse_s (0 if all -inf), s = sum exp(lse_s - m),
 * LSE = m + log s, O = sum exp(lse_s - LSE) O_s; all -inf gives O = 0, LSE = -inf.
 */
void ref_attn_combine(int splits, long long n, int dv, const double *ws_o, const double *ws_lse,
                      double *o, double *lse);
/* The same with sink logits: row r (head r % hq) gets sinks[r % hq] as one more term of the denominator:
 * LSE = log(e^sink + sum_s e^lse_s), O = sum_s e^(lse_s - LSE) O_s; every split empty: O = 0, LSE = sink. */
void ref_attn_combine_sinks(int splits, long long n, int dv, int hq, const float *sinks, const double *ws_o,
                            const double *ws_lse, double *o, double *lse);

#endif
