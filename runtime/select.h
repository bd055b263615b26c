/* runtime/select.h: kernel selection: one pure function of (problem, device, tuned table) */
#ifndef KF_RT_SELECT_H
#define KF_RT_SELECT_H

#include <stddef.h>

#include "core/err.h"
#include "gen/kv.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"

/* A tuned winner as served: from a bundle or from the database. */
typedef struct rt_winner {
    gen_kvset shape;          /* family + shape fields */
    gen_kvset vp;             /* family + fixed values + params */
    char variant[512];
    char cache_key[600];
    int from_bundle;
    int kept_default;         /* the tuner kept its shape's default (speedup 1): no advice for another shape */
} rt_winner;

typedef struct rt_table {
    rt_winner *v;
    int n, cap;
} rt_table;

/* Default variant of a shape (the template's default), or -1 with a message in *e. */
typedef int (*rt_default_fn)(void *arg, const gen_kvset *shape, gen_kvset *vp, core_err *e);

typedef struct rt_choice {
    gen_kvset shape;          /* the plan's shape: family + fields, from the maxima */
    gen_kvset vp;             /* the chosen variant */
    const rt_winner *winner;  /* NULL: the template default */
    size_t workspace;         /* bytes for the maxima */
} rt_choice;

/* Checks d (KF_ERR_ARG / KF_ERR_UNSUPPORTED with a message), then picks the variant:
 * the exact winner for the shape, else the nearest winner with the same dtype, heads,
 * head dim and causal flag (and, for decode, Sq; log distance in batch and lengths) unless that
 * winner only kept its own shape's default, else the default (dflt NULL: KF_ERR_NOT_TUNED naming
 * the shape). Same inputs, same answer. */
kf_status rt_select(const kf_attn_desc *d, const rt_devinfo *dev, const rt_table *t,
                    rt_default_fn dflt, void *arg, rt_choice *out, core_err *e);

/* The shape of an attention description (a kf_attn_desc): family attn_decode or attn_prefill by
 * d->kind, dtype, b, sq, skv (the maxima), hq, hkv, d, causal. The family table's desc_shape. */
void rt_attn_desc_shape(const void *desc, gen_kvset *shape);
/* The shape of a KDA description (a kf_kda_desc): kda_decode or kda_prefill by d->mode,
 * n = max_seqs, t = ceil(max_tokens / max_seqs), h, hv, dk, dv. The family table's desc_shape. */
void rt_kda_desc_shape(const void *desc, gen_kvset *shape);

/* The attention params of a call of the plan's shape maxima (strides resolved). */
void rt_attn_base_params(const kf_attn_desc *d, const gen_kvset *vp, void *params_out);

/* The nearest winner of t for shape: same values under class_keys (NULL-terminated), least sum of
 * |log2(1 + a) - log2(1 + b)| over dist_keys; ties go to a bundle, then to the earlier entry. NULL: none. */
const rt_winner *rt_select_nearest(const rt_table *t, const gen_kvset *shape, const char *const *class_keys,
                                   const char *const *dist_keys);

/* The variant for out->shape (already set): the nearest winner (one that kept its own shape's default
 * only on that very shape, or when dflt is NULL), else dflt's default (its failure is KF_ERR_UNSUPPORTED),
 * else (dflt NULL) KF_ERR_NOT_TUNED naming the shape and device. Sets out->vp and out->winner. */
kf_status rt_select_variant(const rt_devinfo *dev, const rt_table *t, const char *const *class_keys,
                            const char *const *dist_keys, rt_default_fn dflt, void *arg, rt_choice *out,
                            core_err *e);

/* KDA: checks d (KF_ERR_ARG / KF_ERR_UNSUPPORTED with a message naming the field and its value),
 * then picks the variant of kda_prefill or kda_decode for the shape {n = max_seqs,
 * t = ceil(max_tokens / max_seqs), h, hv, dk, dv}: the exact winner, else the nearest winner with
 * the same family, heads and dims (log distance in n and t), else the default (dflt NULL:
 * KF_ERR_NOT_TUNED naming the shape). out->workspace covers the maxima. Same inputs, same answer. */
kf_status rt_kda_select(const kf_kda_desc *d, const rt_devinfo *dev, const rt_table *t,
                        rt_default_fn dflt, void *arg, rt_choice *out, core_err *e);

/* The KDA params (a kf_kda_params) of the plan's maxima: strides resolved (a sequence stride of 0
 * stays 0: it depends on the call's tokens per sequence), dims, heads, gate form, flags, scale;
 * no pointers. */
void rt_kda_base_params(const kf_kda_desc *d, void *params_out);

int rt_table_add(rt_table *t, const rt_winner *w);
void rt_table_free(rt_table *t);

#endif
