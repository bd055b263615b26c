/* runtime/parts_plan.h: the split-score decode family's plan side: description checks, selection, and binding a call (pure, no device) */
#ifndef KF_RT_PARTS_PLAN_H
#define KF_RT_PARTS_PLAN_H

#include <stddef.h>

#include "core/err.h"
#include "gen/kv.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"
#include "templates/common/attn_params.h"   /* before parts_params.h: kf_tmap */
#include "templates/common/parts_params.h"

/* A kf_parts_desc as a plan keeps it: the parts string copied and parsed. */
typedef struct rt_parts_info {
    kf_parts_desc d;               /* d.parts points at parts below */
    char parts[64];
    int nk;                        /* key parts */
    int dims[KF_PARTS_MAXK];
} rt_parts_info;

struct rt_table;
struct rt_choice;

/* Parses and checks d into info (KF_ERR_ARG / KF_ERR_UNSUPPORTED with a message naming the field
 * and its value). */
kf_status rt_parts_check(const kf_parts_desc *d, const rt_devinfo *dev, rt_parts_info *info, core_err *e);

/* The split-score selection: rt_parts_check, then the exact winner for the shape {family
 * attn_parts_decode, dtype, b, sq, skv, hq, hkv, parts, value, dv, layers, page_size, causal}, else the
 * nearest winner with every field but b, skv equal (not one that kept its own default), else the default (dflt NULL:
 * KF_ERR_NOT_TUNED). out->workspace covers the maxima. Same inputs, same answer. */
kf_status rt_parts_select(const kf_parts_desc *d, const rt_devinfo *dev, const struct rt_table *t,
                          int (*dflt)(void *, const gen_kvset *, gen_kvset *, core_err *), void *arg,
                          struct rt_choice *out, core_err *e);

/* The shape of a split-score description (an rt_parts_info): family attn_parts_decode, dtype, b, sq,
 * skv, hq, hkv, parts, value (separate, or alias_<part 0>), dv, layers, page_size, causal. The family
 * table's desc_shape. */
void rt_parts_desc_shape(const void *desc, gen_kvset *shape);

/* The params of a call of the plan's maxima: sizes, scale, splits; no pointers or strides. */
void rt_parts_base_params(const rt_parts_info *info, const gen_kvset *vp, kf_parts_params *p);

/* The params of one call: pointers, strides (0: contiguous), lengths, block table, workspace;
 * every argument checked (message names the tensors field and its value). Pure. */
kf_status rt_parts_bind(const rt_parts_info *info, const kf_parts_params *base, const gen_kvset *vp,
                        size_t ws_bytes, void *plan_ws, const kf_parts_tensors *t, kf_parts_params *out,
                        core_err *e);

#endif
