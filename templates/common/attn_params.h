/* common/attn_params.h: the argument block of every attention kernel; one definition for host C and CUDA */
#ifndef KF_ATTN_PARAMS_H
#define KF_ATTN_PARAMS_H

/*
 * Strides are in elements, not bytes; the last dimension of every tensor is
 * contiguous. Sequence b of the batch:
 *   query rows   r0 = cu_seqlens_q ? cu_seqlens_q[b] : 0,  n_q  = cu_seqlens_q ? cu_seqlens_q[b+1] - r0 : sq
 *   keys         k0 = cu_seqlens_k ? cu_seqlens_k[b] : 0,  n_kv = cu_seqlens_k ? cu_seqlens_k[b+1] - k0
 *                                                                 : (kv_len ? kv_len[b] : skv)
 *   q row i, head h:   q + (cu_seqlens_q ? 0 : b*q_sb) + (r0+i)*q_ss + h*q_sh      (o alike)
 *   key j, kv head kh: k + (cu_seqlens_k ? 0 : b*k_sb) + (k0+j)*k_ss + kh*k_sh     (v alike)
 *     paged (block_table != 0): page = block_table[b*bt_sb + j/page_size],
 *                               k + page*k_sb + (j%page_size)*k_ss + kh*k_sh       (v alike)
 *   lse row i, head h: lse + (cu_seqlens_q ? 0 : b*lse_sb) + h*lse_sh + (r0+i)     fp32, natural log
 * kv head of query head h: h / (hq / hkv).
 * Causal: query i sees keys j <= i + n_kv - n_q (bottom-right aligned).
 * A row with no visible key gives o = 0 and lse = -inf.
 * Model features (appended fields, read only by kernels rendered with the feature on; a kernel with none of
 * them is compiled without these fields, KF_ATTN_EXT undefined, and the host passes the longer block all the same):
 *   sliding window (KF_WIN): query i (key position pi = i + n_kv - n_q) sees keys pi - window_left .. pi;
 *   softcap (KF_CAP): score = softcap * tanh(scale q.k / softcap), before the max; lse of the capped scores;
 *   sinks (KF_SINK): sinks[h] joins the softmax denominator only: o = sum_j e^(s_j - m) v_j / (e^(sinks[h] - m)
 *     + sum_j e^(s_j - m)), lse = log(e^sinks[h] + sum_j e^s_j); a row with no visible key: o = 0, lse = sinks[h].
 *     Split partials carry no sink: the combine adds it once;
 *   FP8 K/V (KF_KV8): k and v are e4m3 bytes (strides in bytes), key value = k_scale[kv head] * e4m3 (v alike).
 * Split-KV partials: row id rid = ((cu_seqlens_q ? 0 : b*sq) + r0 + i) * hq + h,
 *   ws_o[(s*ws_rows*hq + rid)*dv + c], ws_lse[s*ws_rows*hq + rid], s < splits;
 *   each partial is normalised (O_s divided by its own sum) with lse_s = m_s + log(l_s).
 */
typedef struct kf_attn_params {
    const void *q;
    const void *k;
    const void *v;
    void *o;
    float *lse;                /* may be 0: the kernel then writes no lse */
    const int *cu_seqlens_q;   /* [b+1] or 0 */
    const int *cu_seqlens_k;   /* [b+1] or 0 */
    const int *kv_len;         /* [b] or 0 */
    const int *block_table;    /* [b, bt_sb] page indices or 0 */
    float *ws_o;               /* split partials, see above; 0 when splits == 1 */
    float *ws_lse;
    long long q_sb, q_ss, q_sh;
    long long k_sb, k_ss, k_sh;
    long long v_sb, v_ss, v_sh;
    long long o_sb, o_ss, o_sh;
    long long lse_sb, lse_sh;
    long long bt_sb;
    int b;                     /* batch (sequences) */
    int sq;                    /* query rows per sequence (max over the batch when packed) */
    int skv;                   /* keys per sequence when kv_len and cu_seqlens_k are 0; capacity otherwise */
    int hq, hkv;
    int page_size;
    int splits;                /* >= 1 */
    int ws_rows;               /* b*sq dense, total rows packed */
    float scale;               /* softmax scale */
    float scale_log2;          /* scale * log2(e) */
#if !defined(__CUDACC_RTC__) || defined(KF_ATTN_EXT)
    const float *sinks;        /* [hq] fp32 sink logits (KF_SINK), else 0 */
    const float *k_scale;      /* [hkv] fp32 dequantisation scales of fp8 K and V (KF_KV8), else 0 */
    const float *v_scale;
    float softcap;             /* > 0 with KF_CAP */
    int window_left;           /* >= 0 with KF_WIN */
#endif
} kf_attn_params;

/*
 * Tensor maps (attn_prefill impl=wgmma_tma, KF_ATTN_TMA): a second kernel argument, after the params, passed by
 * value (__grid_constant__ in the kernel: the copy engine reads the maps from parameter space). The host encodes
 * them per call from the params (runtime/attn_tmap.c): each a 4D map of 16-bit elements (head dim, rows, heads,
 * batch; packed: batch 1, rows the total), box 64 columns x (128 query rows | bn keys) x 1 x 1, 128-byte swizzle,
 * so one box is one 64-column panel of the layout the wgmma kernel reads (attn/fwd_sm90.cuh). Plain kernels
 * never see this type.
 */
#if !defined(__CUDACC_RTC__) || defined(KF_ATTN_TMA) || defined(KF_PARTS_TMA) || defined(KF_PARTS_MAPS)
#ifdef __cplusplus
#define KF_TMAP_ALIGN alignas(64)
#else
#define KF_TMAP_ALIGN _Alignas(64)
#endif
typedef struct kf_tmap {
    KF_TMAP_ALIGN unsigned long long bits[16];   /* CUtensorMap: 128 opaque bytes, 64-byte aligned */
} kf_tmap;
typedef struct kf_attn_tmaps {
    kf_tmap q, k, v;
} kf_attn_tmaps;
#endif

#endif
