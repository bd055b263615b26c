/* runtime/select.h: kernel selection: one pure function of (problem, device, tuned table) */
#ifndef KF_RT_SELECT_H
#define KF_RT_SELECT_H

#include <stddef.h>

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
} rt_winner;

typedef struct rt_table {
    rt_winner *v;
    int n, cap;
} rt_table;

/* Default variant of a shape (the template's default), or -1 with a message. */
typedef int (*rt_default_fn)(void *arg, const gen_kvset *shape, gen_kvset *vp, char *err, size_t errn);

typedef struct rt_choice {
    gen_kvset shape;          /* the plan's shape: family + fields, from the maxima */
    gen_kvset vp;             /* the chosen variant */
    const rt_winner *winner;  /* NULL: the template default */
    size_t workspace;         /* bytes for the maxima */
} rt_choice;

/* Checks d (KF_ERR_ARG / KF_ERR_UNSUPPORTED with a message), then picks the variant:
 * the exact winner for the shape, else the nearest winner with the same dtype, heads,
 * head dim and causal flag (log distance in batch and lengths), else the default
 * (dflt NULL: KF_ERR_NOT_TUNED naming the shape). Same inputs, same answer. */
kf_status rt_select(const kf_attn_desc *d, const rt_devinfo *dev, const rt_table *t,
                    rt_default_fn dflt, void *arg, rt_choice *out, char *msg, size_t msgn);

/* The attention params of a call of the plan's shape maxima (strides resolved). */
void rt_attn_base_params(const kf_attn_desc *d, const gen_kvset *vp, void *params_out);

int rt_table_add(rt_table *t, const rt_winner *w);
void rt_table_free(rt_table *t);

#endif
