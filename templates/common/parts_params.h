/* common/parts_params.h: the argument block of the split-score decode kernel (attn_parts_decode); one definition for host C and CUDA */
#ifndef KF_PARTS_PARAMS_H
#define KF_PARTS_PARAMS_H

#define KF_PARTS_MAXC 12      /* caches (tensors loaded into the key tile) */
#define KF_PARTS_MAXL 4       /* layers of a joint group scan */
#define KF_PARTS_MAXK 4       /* key parts of one layer */

/*
 * Strides are in elements, the last dimension of every tensor contiguous, rows 16-byte aligned.
 *
 * Key parts 0..nk-1 (dims compile-time), value parts either "alias" (the value is the first dv
 * columns of key part 0's rows, read once from the key tile: absorbed MLA) or "separate" (one own
 * value cache per key part, same dim). With L layers (joint group scan), key part 0 and its value
 * cache are shared by the L layers (the base); every other part has one cache per layer (the deltas).
 * Layer l: score = scale * sum_p q[l][p] . k_p(l), o_l = softmax(score) [v_0 | v_1(l) | ...].
 *
 * c[]: the caches in tile order:
 *   key part 0; key part 1 of layers 0..L-1; key part 2 of layers 0..L-1; ...;
 *   then (separate values only) value part 0; value part 1 of layers 0..L-1; ...
 * Cache entry c, key j of sequence b, kv head kh (kh = h / (hq / hkv), every part has hkv heads):
 *   contiguous (page size 0): c.p + b*c.sb + j*c.ss + kh*c.sh
 *   paged: page = block_table[b*bt_sb + j/page_size], c.p + page*c.sb + (j%page_size)*c.ss + kh*c.sh
 * q[l][p]: query row i, head h of layer l, key part p: q.p + b*q.sb + i*q.ss + h*q.sh
 * o[l]: like q ([b, sq, hq, dv]); lse[l] + b*lse_sb + h*lse_sh + i (fp32, natural log; may be 0).
 * n_kv = kv_len ? kv_len[b] : skv; causal: row i sees keys j <= i + n_kv - sq.
 * Split partials (splits > 1), layer l: rid = (b*sq + i)*hq + h,
 *   ws_o[l][(s*ws_rows*hq + rid)*dv + c], ws_lse[l][s*ws_rows*hq + rid] (as attn_params.h).
 * FP8 latent cache (variants with KF_KV8: one layer, value aliased): every c[] holds e4m3 bytes, its strides in
 * bytes; cs: the fp32 scale of each token (strides in elements, addressed as a cache: key j of sequence b, kv head
 * kh at cs.p + b*cs.sb + j*cs.ss + kh*cs.sh, paged: the page's index for b); the key (and value) of token j is
 * cs(j) * e4m3, every column of the row. Other variants: cs is 0 and unread.
 */
typedef struct kf_parts_tensor {
    const void *p;
    long long sb, ss, sh;
} kf_parts_tensor;

typedef struct kf_parts_params {
    kf_parts_tensor c[KF_PARTS_MAXC];
    kf_parts_tensor q[KF_PARTS_MAXL][KF_PARTS_MAXK];
    kf_parts_tensor o[KF_PARTS_MAXL];
    float *lse[KF_PARTS_MAXL];
    float *ws_o[KF_PARTS_MAXL];
    float *ws_lse[KF_PARTS_MAXL];
    long long lse_sb, lse_sh;
    const int *kv_len;         /* [b] or 0 */
    const int *block_table;    /* [b, bt_sb] page indices; required when the variant is paged */
    long long bt_sb;
    int b, sq, skv, hq, hkv;
    int splits;                /* >= 1 */
    int ws_rows;               /* b * sq */
    float scale;               /* softmax scale (given by the caller) */
    float scale_log2;          /* scale * log2(e) */
    kf_parts_tensor cs;        /* FP8 latent cache: the per-token fp32 scales (above); else 0 */
} kf_parts_params;

/*
 * Tensor maps (attn_parts_decode impl=wgmma_tma, KF_PARTS_TMA): the kernel's second argument, passed by value
 * (__grid_constant__). One map a key cache c[i] (i < the key parts; one layer, value aliased), encoded per call by
 * runtime/parts_tmap.c: 16-bit elements (part dim, rows, kv heads, batch; paged: rows in a page and any int32 page
 * index), box 64 columns x 64 keys x 1 x 1, 128-byte swizzle: one box is one 64-column panel of a 64-key block as
 * parts/decode_sm90_ks.cuh lays it out.
 */
/*
 * impl=wg8 (the FP8 latent cache, KF_PARTS_MAPS) takes the same argument: c[0] maps the whole e4m3 row (every key
 * part, when they are one tensor: each part's columns right after the last's, the same strides), bytes (row width,
 * rows, kv heads, batch; paged as above), box 128 columns x 64 keys, and kv8 is 1; kv8 0: no map, every block by
 * cp.async (parts/decode_wg8.cuh).
 */
#if defined(KF_ATTN_PARAMS_H) && (!defined(__CUDACC__) || defined(KF_PARTS_TMA) || defined(KF_PARTS_MAPS))
typedef struct kf_parts_tmaps {   /* kf_tmap: attn_params.h first */
    kf_tmap c[KF_PARTS_MAXK];
    int kv8;
} kf_parts_tmaps;
#endif

#endif
