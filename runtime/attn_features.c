/* runtime/attn_features.c: the model features of an attention description (window, softcap, sinks, FP8 K/V) in one place: shape keys, checks, params */
#include "runtime/attn_features.h"
#include "runtime/select.h"

#include <math.h>
#include <stdint.h>

void rt_attn_feature_shape(const kf_attn_desc *d, gen_kvset *s)
{
    if (d->window)
        gen_kv_set_int(s, "window", d->window_left);
    if (d->softcap > 0)
        gen_kv_set_int(s, "softcap", d->softcap < 1 ? 1 : (long long)ceilf(d->softcap));
    if (d->sinks)
        gen_kv_set_int(s, "sinks", 1);
    if (d->kv_dtype == KF_KV_E4M3)
        gen_kv_set_str(s, "kv_dtype", "e4m3");
    if (d->page_size > 0)   /* paged K/V: a kernel fact (wgmma_tma has no tensor map of a page pool) */
        gen_kv_set_int(s, "page_size", d->page_size);
}

kf_status rt_attn_feature_check(const kf_attn_desc *d, core_err *e)
{
    if (d->window != 0 && d->window != 1)
        return core_err_set(e, KF_ERR_ARG, "desc.window must be 0 or 1, got %d", d->window);
    if (d->window && d->window_left < 0)
        return core_err_set(e, KF_ERR_ARG, "desc.window_left must be >= 0 with desc.window, got %d", d->window_left);
    if (!d->window && d->window_left)
        return core_err_set(e, KF_ERR_ARG, "desc.window_left = %d is set but desc.window is 0", d->window_left);
    if (d->window && !d->causal)
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "a sliding window (desc.window, window_left %d) needs causal attention "
                            "(desc.causal = 0): no kernel serves a two-sided window", d->window_left);
    if (!(d->softcap >= 0.0f) || isinf(d->softcap) || (d->softcap > 0 && d->softcap < 1e-3f))
        return core_err_set(e, KF_ERR_ARG,
                            "desc.softcap must be 0 (none) or a finite cap >= 0.001, got %g", d->softcap);
    if (d->sinks != 0 && d->sinks != 1)
        return core_err_set(e, KF_ERR_ARG, "desc.sinks must be 0 or 1, got %d", d->sinks);
    if (d->kv_dtype != KF_KV_SAME && d->kv_dtype != KF_KV_E4M3)
        return core_err_set(e, KF_ERR_ARG, "desc.kv_dtype must be KF_KV_SAME or KF_KV_E4M3, got %d", d->kv_dtype);
    if (d->kv_dtype == KF_KV_E4M3) {
        const long long *sts[2] = {d->k_strides, d->v_strides};
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 3; i++)
                if (sts[t][i] % 16)
                    return core_err_set(e, KF_ERR_UNSUPPORTED,
                                        "desc.%s_strides[%d] = %lld breaks 16-byte row alignment of FP8 "
                                        "K/V (strides in bytes, multiples of 16)", t ? "v" : "k", i, sts[t][i]);
    }
    return KF_OK;
}

void rt_attn_feature_params(const kf_attn_desc *d, kf_attn_params *p)
{
    p->window_left = d->window ? d->window_left : -1;
    p->softcap = d->softcap > 0 ? d->softcap : 0.0f;
}

static kf_status need(const void *ptr, int on, const char *field, const char *why, core_err *e)
{
    if (on && !ptr)
        return core_err_set(e, KF_ERR_ARG, "tensors.%s is NULL but the plan has %s", field, why);
    if (!on && ptr)
        return core_err_set(e, KF_ERR_ARG, "tensors.%s = %p is set but the plan has no %s", field, ptr, why);
    if (ptr && ((uintptr_t)ptr & 3u))
        return core_err_set(e, KF_ERR_ARG, "tensors.%s = %p is not 4-byte aligned (fp32)", field, ptr);
    return KF_OK;
}

kf_status rt_attn_feature_tensors(const kf_attn_desc *d, const kf_attn_tensors *t, core_err *e)
{
    kf_status st;
    int fp8 = d->kv_dtype == KF_KV_E4M3;
    if ((st = need(t->sinks, d->sinks, "sinks", "sinks (desc.sinks)", e)) ||
        (st = need(t->k_scale, fp8, "k_scale", "FP8 K/V (desc.kv_dtype)", e)) ||
        (st = need(t->v_scale, fp8, "v_scale", "FP8 K/V (desc.kv_dtype)", e)))
        return st;
    return KF_OK;
}

void rt_attn_feature_bind(const kf_attn_desc *d, const kf_attn_tensors *t, kf_attn_params *a)
{
    a->sinks = d->sinks ? t->sinks : NULL;
    a->k_scale = d->kv_dtype == KF_KV_E4M3 ? t->k_scale : NULL;
    a->v_scale = d->kv_dtype == KF_KV_E4M3 ? t->v_scale : NULL;
}
