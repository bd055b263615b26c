/* tuner/ref_parts.h: plain CPU fp64 reference of split-score decode (absorbed MLA, base + delta) and the joint layer-group scan */
#ifndef KF_TUNER_REF_PARTS_H
#define KF_TUNER_REF_PARTS_H

#include "tuner/check.h"

#define REF_PARTS_MAX 4          /* key parts, and value parts, of one problem */
#define REF_PARTS_MAX_LAYERS 4   /* layers of one joint group scan */

/*
 * Split-score attention (design.md, "Split-score and latent attention"):
 *   score(i, h, j) = scale * sum_p q_p(i, h) . k_p(j, kv_p(h))      over the key parts p
 *   o(i, h) = softmax_j(score) [v_0 | v_1 | ...](j)                 value parts concatenated
 * Every part has its own buffer, strides, dim and kv head count; kv_p(h) = h / (hq / heads_p)
 * (absorbed MLA: one latent head, heads = 1; base + delta: GQA heads). All buffers are HOST
 * memory of one dtype (bf16/fp16 as uint16, or fp32). Strides are in elements, the last
 * dimension of every tensor contiguous. Sequence b has n_kv = kv_len ? kv_len[b] : skv keys
 * and sq query rows:
 *   - query part p, row i, head h:  q.p + b*q.sb + i*q.ss + h*q.sh   (dim_p columns);
 *   - key j, kv head kh of a part:  p + b*sb + j*ss + kh*sh,
 *     paged (paged != 0): page = block_table[b*bt_sb + j/page_size], p + page*sb + (j%page_size)*ss + kh*sh
 *     (the block table is shared by every paged part; sb is then the page stride);
 *   - a value part either aliases key part `alias`: its dim columns are the FIRST dim columns
 *     of that part's rows, read through the key part's pointer, strides, heads and paging (one
 *     cache, read once: MLA's value is the latent of the key row); or (alias < 0) has its own
 *     buffer v, heads and paging flag;
 *   - causal: query i sees keys j <= i + n_kv - sq (bottom-right aligned; decode with Sq > 1);
 *   - a row with no visible key gives o = 0, lse = -inf; lse is a natural log.
 * Nothing past n_kv of a sequence is read, nor any page past its last key (tails may hold NaN).
 * FP8 latent cache (kv_fp8): every key part's cache holds e4m3 bytes (strides in bytes) and the key of token j,
 * kv head kh is kv_scale(j, kh) * e4m3 (tuner/ref_attn.h's ref_e4m3), every column; an aliased value reads the
 * same dequantised values. kv_scale is fp32 [b (page), token, head] in elements, addressed as the caches (through
 * the block table when kp[0] is paged). Queries stay in dtype. Value parts with their own buffer are 16-bit.
 */
typedef struct ref_strided {
    const void *p;              /* host buffer */
    long long sb, ss, sh;       /* batch (or page), sequence, head strides in elements */
} ref_strided;

typedef struct ref_kpart {
    ref_strided k;              /* the cache of the part */
    ref_strided q;              /* its queries [b, sq, hq, dim] */
    int dim;                    /* columns of the part (and of its queries) */
    int heads;                  /* kv heads: 1 for an MLA latent, hkv for a GQA part */
    int paged;                  /* k is addressed through the block table */
} ref_kpart;

typedef struct ref_vpart {
    int alias;                  /* >= 0: key part whose first dim columns are the value; -1: v below */
    ref_strided v;              /* own buffer (alias < 0) */
    int dim;                    /* columns of the part in o */
    int heads, paged;           /* of v (alias < 0); an alias takes those of its key part */
} ref_vpart;

typedef struct ref_parts_desc {
    check_dtype dtype;          /* of every query, key and value buffer */
    int nk, nv;                 /* key parts, value parts: 1..REF_PARTS_MAX each */
    ref_kpart kp[REF_PARTS_MAX];
    ref_vpart vp[REF_PARTS_MAX];
    const int *kv_len;          /* [b] or NULL: skv keys each */
    const int *block_table;     /* [b, bt_sb] page indices, or NULL when no part is paged */
    long long bt_sb;
    int page_size;              /* used by paged parts */
    int b, sq, skv, hq;
    int causal;
    double scale;               /* softmax scale, given by the caller (MLA: 1/sqrt(192) times its mscale) */
    int kv_fp8;                 /* 1: the key parts' caches are e4m3 with per-token scales kv_scale (above) */
    ref_strided kv_scale;       /* fp32 host, with kv_fp8 */
} ref_parts_desc;

/* Columns of o: the sum of the value parts' dims; column offset of value part v: the sum before it. */
int ref_parts_dv(const ref_parts_desc *a);
int ref_parts_vcol(const ref_parts_desc *a, int v);

/*
 * The reference: fills o [b, sq, hq, ref_parts_dv(a)] and lse [b, sq, hq] (lse may be NULL);
 * row id rid = (b*sq + i)*hq + h as in ref_attn: o[rid*dv + c], lse[rid].
 */
void ref_parts(const ref_parts_desc *a, double *o, double *lse);

/*
 * Joint layer-group scan (the audit's "A"): L layers whose attention shares one base cache.
 * Layer l is the split-score problem with
 *   key parts   { base, delta_l }       base = shared.kp[0] with its queries from q_base[l],
 *   value parts { shared.vp[0], delta_v[l] }   (alias 0 = the base key part, 1 = delta_l),
 * and every other field from shared (nk = nv = 1 there; shared.kp[0].q is not read).
 * Each layer's scores are base + delta_l, added BEFORE that layer's own softmax; the L outputs
 * are separate. One pass over the keys serves all layers (the base row is the same for all).
 */
typedef struct ref_parts_layers_desc {
    ref_parts_desc shared;      /* base key part, base value part, lengths, paging, hq, scale */
    int layers;                 /* 1..REF_PARTS_MAX_LAYERS */
    ref_strided q_base[REF_PARTS_MAX_LAYERS];   /* layer l's queries of the base part */
    ref_kpart delta[REF_PARTS_MAX_LAYERS];      /* layer l's delta key part (cache and queries) */
    ref_vpart delta_v[REF_PARTS_MAX_LAYERS];    /* layer l's delta value part */
} ref_parts_layers_desc;

/* Deliberate slips for tests that must fail; append only. */
typedef enum {
    REF_PARTS_EXACT = 0,
    REF_PARTS_MUT_DELTA_AFTER_SOFTMAX = 1,  /* weights softmax(base) + delta scores: delta added after the softmax */
} ref_parts_mut;

/*
 * Columns of every layer's o: shared.vp[0].dim + delta_v[l].dim, which must agree across layers.
 * Fills o [layers, b, sq, hq, dv] and lse [layers, b, sq, hq] (lse may be NULL):
 * o[(l*n + rid)*dv + c], lse[l*n + rid] with n = b*sq*hq and rid as in ref_parts.
 */
int ref_parts_layers_dv(const ref_parts_layers_desc *g);
void ref_parts_layers(const ref_parts_layers_desc *g, ref_parts_mut mut, double *o, double *lse);

#endif
