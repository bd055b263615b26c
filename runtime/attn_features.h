/* runtime/attn_features.h: the model features of an attention description (window, softcap, sinks, FP8 K/V) in one place: shape keys, checks, params */
#ifndef KF_RT_ATTN_FEATURES_H
#define KF_RT_ATTN_FEATURES_H

#include <stddef.h>

#include "core/err.h"
#include "gen/kv.h"
#include "runtime/kforge.h"
#include "templates/common/attn_params.h"

/* The shape keys of the features that are on (window = window_left, softcap = the cap rounded up, sinks = 1,
 * kv_dtype = "e4m3"); none when every feature is off, so a plain description has the shape of before. */
void rt_attn_feature_shape(const kf_attn_desc *d, gen_kvset *shape);
/* The description's feature fields: KF_OK, KF_ERR_ARG (a value out of range) or KF_ERR_UNSUPPORTED (a
 * combination no kernel serves), the message naming the fields and values. */
kf_status rt_attn_feature_check(const kf_attn_desc *d, core_err *e);
/* window_left and softcap of the plan into p (pointers come with each call). */
void rt_attn_feature_params(const kf_attn_desc *d, kf_attn_params *p);
/* A call's feature tensors against the plan: each required one present and 4-byte aligned, none the plan does
 * not read. KF_OK or KF_ERR_ARG naming the field. */
kf_status rt_attn_feature_tensors(const kf_attn_desc *d, const kf_attn_tensors *t, core_err *e);
/* The call's feature pointers into a (after rt_attn_feature_tensors passed). */
void rt_attn_feature_bind(const kf_attn_desc *d, const kf_attn_tensors *t, kf_attn_params *a);

#endif
