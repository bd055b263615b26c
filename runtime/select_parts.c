/* runtime/select_parts.c: split-score decode selection: one pure function of (description, device, tuned table), and binding a call */
#include "runtime/family.h"
#include "runtime/parts_launch.h"
#include "runtime/parts_plan.h"
#include "runtime/select.h"
#include "runtime/shape.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void rt_parts_desc_shape(const void *desc, gen_kvset *s)
{
    const rt_parts_info *in = desc;
    const kf_parts_desc *d = &in->d;
    char value[80];
    gen_kv_clear(s);
    gen_kv_set_str(s, "family", rt_family_name(RT_FAM_PARTS_DECODE));
    gen_kv_set_str(s, "dtype", d->dtype == KF_BF16 ? "bf16" : "fp16");
    gen_kv_set_int(s, "b", d->max_batch);
    gen_kv_set_int(s, "sq", d->max_q);
    gen_kv_set_int(s, "skv", d->max_kv);
    gen_kv_set_int(s, "hq", d->hq);
    gen_kv_set_int(s, "hkv", d->hkv);
    gen_kv_set_str(s, "parts", in->parts);
    if (d->value == KF_PARTS_VALUE_SEPARATE) {
        snprintf(value, sizeof value, "separate");
    } else {   /* alias_<name of part 0> */
        int k = 0;
        while (islower((unsigned char)in->parts[k]))
            k++;
        snprintf(value, sizeof value, "alias_%.*s", k, in->parts);
    }
    gen_kv_set_str(s, "value", value);
    gen_kv_set_int(s, "dv", d->dv);
    gen_kv_set_int(s, "layers", d->layers);
    gen_kv_set_int(s, "page_size", d->page_size);
    gen_kv_set_int(s, "causal", d->causal);
    if (d->kv_dtype == KF_KV_E4M3)   /* absent when off: a 16-bit description has the shape of before */
        gen_kv_set_str(s, "kv_dtype", "e4m3");
}

/* The description's own fields (dtype, parts, value form, scale, device), then its shape through
 * rt_shape_check: the checks kforge gen / compile make of a --shape. */
static kf_status check(const kf_parts_desc *d, const rt_devinfo *dev, rt_parts_info *info, gen_kvset *shape, core_err *e)
{
    memset(info, 0, sizeof *info);
    if (!d)
        return core_err_set(e, KF_ERR_ARG, "desc is NULL");
    if (d->dtype != KF_BF16 && d->dtype != KF_FP16)
        return core_err_set(e, KF_ERR_ARG, "desc.dtype must be KF_BF16 or KF_FP16, got %d", (int)d->dtype);
    if (!d->parts)
        return core_err_set(e, KF_ERR_ARG, "desc.parts is NULL (e.g. \"latent512_rope64\")");
    if (strlen(d->parts) >= sizeof info->parts || (info->nk = rt_parts_parse(d->parts, info->dims)) < 1)
        return core_err_set(e, KF_ERR_ARG,
                            "desc.parts = '%.80s' is not 1..4 parts <name><dim> joined by '_'", d->parts);
    snprintf(info->parts, sizeof info->parts, "%s", d->parts);
    if (d->value != KF_PARTS_VALUE_ALIAS && d->value != KF_PARTS_VALUE_SEPARATE)
        return core_err_set(e, KF_ERR_ARG, "desc.value must be KF_PARTS_VALUE_ALIAS or KF_PARTS_VALUE_SEPARATE, got %d",
                            (int)d->value);
    if (d->kv_dtype != KF_KV_SAME && d->kv_dtype != KF_KV_E4M3)
        return core_err_set(e, KF_ERR_ARG, "desc.kv_dtype must be KF_KV_SAME or KF_KV_E4M3, got %d", (int)d->kv_dtype);
    if (!(d->scale > 0.0f) || isinf(d->scale))
        return core_err_set(e, KF_ERR_ARG, "desc.scale must be finite and > 0 (the caller's softmax scale), got %g",
                            (double)d->scale);
    info->d = *d;
    info->d.parts = info->parts;
    rt_family_for_desc(RT_API_PARTS, info, shape);
    kf_status st = rt_shape_check(NULL, shape, NULL, RT_NAMES_DESC, e);
    if (st)
        return st;
    /* the contiguous sizes of the maxima: caches [b, max_kv, hkv, dim] (or pages), q [b, sq, hq, dim], o */
    long long x, rows = d->page_size ? d->page_size : d->max_kv;
    for (int i = 0; i <= info->nk; i++) {
        long long dim = i < info->nk ? info->dims[i] : d->dv;
        if (rt_mul_ll(d->max_batch, rows, &x) || rt_mul_ll(x, d->hkv, &x) || rt_mul_ll(x, dim, &x) ||
            rt_mul_ll((long long)d->max_batch * d->max_q, d->hq, &x) || rt_mul_ll(x, dim, &x))
            return core_err_set(e, KF_ERR_ARG, "desc.max_batch %d, desc.max_kv %d, desc.hq %d, desc.hkv %d: the "
                                "tensors of a %lld-wide part do not fit in 63 bits", d->max_batch, d->max_kv, d->hq, d->hkv, dim);
    }
    if (dev->cc_major < 8)
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "%s (compute capability %d.%d) is not supported: kforge needs sm_80 or newer",
                            dev->name, dev->cc_major, dev->cc_minor);
    return KF_OK;
}

kf_status rt_parts_check(const kf_parts_desc *d, const rt_devinfo *dev, rt_parts_info *info, core_err *e)
{
    gen_kvset shape;
    return check(d, dev, info, &shape, e);
}

void rt_parts_base_params(const rt_parts_info *info, const gen_kvset *vp, kf_parts_params *p)
{
    const kf_parts_desc *d = &info->d;
    memset(p, 0, sizeof *p);
    p->b = d->max_batch;
    p->sq = d->max_q;
    p->skv = d->max_kv;
    p->hq = d->hq;
    p->hkv = d->hkv;
    p->splits = (int)gen_kv_int(vp, "sp", 1);
    p->ws_rows = (int)((long long)d->max_batch * d->max_q);   /* within an int: rt_shape_check */
    p->scale = d->scale;
    p->scale_log2 = d->scale * 1.4426950408889634f;
}

kf_status rt_parts_select(const kf_parts_desc *d, const rt_devinfo *dev, const struct rt_table *t,
                          int (*dflt)(void *, const gen_kvset *, gen_kvset *, core_err *), void *arg,
                          struct rt_choice *out, core_err *e)
{
    memset(out, 0, sizeof *out);
    rt_parts_info info;
    kf_status st = check(d, dev, &info, &out->shape, e);
    if (st)
        return st;
    const rt_family *f = rt_family_of(&out->shape);
    st = rt_select_variant(dev, t, f->class_keys, f->dist_keys, dflt, arg, out, e);
    if (st)
        return st;
    kf_parts_params p;
    rt_launch l;
    rt_parts_base_params(&info, &out->vp, &p);
    if (f->launch(&out->vp, &p, &l))
        return core_err_set(e, KF_ERR_UNSUPPORTED, "the %s variant lacks its layers", f->name);
    out->workspace = l.ws_bytes;
    if (out->workspace == SIZE_MAX)
        return core_err_set(e, KF_ERR_ARG, "the split workspace of desc.max_batch %d x desc.max_q %d x desc.hq %d rows "
                            "does not fit in memory", d->max_batch, d->max_q, d->hq);
    return KF_OK;
}

/* ---- one call ---------------------------------------------------------------------- */

/* A view of nb [rows, heads, dim] blocks with contiguous strides d0 = rows * heads * dim, d1 = heads * dim,
 * d2 = dim: pointer, alignment, strides (0: contiguous; multiples of a16, the elements of 16 bytes), and the span of
 * the strides within 63 bits. */
static kf_status view_a(const char *what, const kf_parts_view *v, long long nb, long long d0, long long d1, long long d2,
                        int a16, kf_parts_tensor *out, core_err *e)
{
    if (!v->ptr)
        return core_err_set(e, KF_ERR_ARG, "tensors.%s.ptr is NULL", what);
    if ((uintptr_t)v->ptr & 15u)
        return core_err_set(e, KF_ERR_UNSUPPORTED, "tensors.%s.ptr = %p is not 16-byte aligned", what, v->ptr);
    for (int i = 0; i < 3; i++) {
        if (v->strides[i] < 0)
            return core_err_set(e, KF_ERR_ARG, "tensors.%s.strides[%d] must be >= 0, got %lld", what, i, v->strides[i]);
        if (v->strides[i] % a16)
            return core_err_set(e, KF_ERR_UNSUPPORTED, "tensors.%s.strides[%d] = %lld breaks 16-byte row alignment "
                                "(must be a multiple of %d elements)", what, i, v->strides[i], a16);
    }
    out->p = v->ptr;
    out->sb = v->strides[0] ? v->strides[0] : d0;
    out->ss = v->strides[1] ? v->strides[1] : d1;
    out->sh = v->strides[2] ? v->strides[2] : d2;
    const long long ext[4] = {nb, d0 / d1, d1 / d2, d2}, str[4] = {out->sb, out->ss, out->sh, 1};
    if (rt_span(4, ext, str) < 0)
        return core_err_set(e, KF_ERR_ARG, "tensors.%s.strides = {%lld, %lld, %lld} over [%lld, %lld, %lld, %lld] span "
                            "more than 2^63 elements", what, v->strides[0], v->strides[1], v->strides[2], ext[0], ext[1],
                            ext[2], ext[3]);
    return KF_OK;
}

/* A 16-bit tensor's view (view_a, 8 elements in 16 bytes). */
static kf_status view(const char *what, const kf_parts_view *v, long long nb, long long d0, long long d1, long long d2,
                      kf_parts_tensor *out, core_err *e)
{
    return view_a(what, v, nb, d0, d1, d2, 8, out, e);
}

/* The FP8 cache's per-token scales: nb [rows, heads] fp32 blocks (contiguous strides rows * heads, heads, 1), 4-byte
 * aligned, any strides >= 0 within 63 bits. */
static kf_status scale_view(const kf_parts_view *v, long long nb, long long rows, long long heads, kf_parts_tensor *out,
                            core_err *e)
{
    if (!v->ptr)
        return core_err_set(e, KF_ERR_ARG, "tensors.kv_scale.ptr is NULL (the plan's cache is FP8: desc.kv_dtype "
                            "KF_KV_E4M3 needs the per-token scales)");
    if ((uintptr_t)v->ptr & 3u)
        return core_err_set(e, KF_ERR_ARG, "tensors.kv_scale.ptr = %p is not 4-byte aligned (fp32)", v->ptr);
    for (int i = 0; i < 3; i++)
        if (v->strides[i] < 0)
            return core_err_set(e, KF_ERR_ARG, "tensors.kv_scale.strides[%d] must be >= 0, got %lld", i, v->strides[i]);
    out->p = v->ptr;
    out->sb = v->strides[0] ? v->strides[0] : rows * heads;
    out->ss = v->strides[1] ? v->strides[1] : heads;
    out->sh = v->strides[2] ? v->strides[2] : 1;
    const long long ext[3] = {nb, rows, heads}, str[3] = {out->sb, out->ss, out->sh};
    if (rt_span(3, ext, str) < 0)
        return core_err_set(e, KF_ERR_ARG, "tensors.kv_scale.strides = {%lld, %lld, %lld} over [%lld, %lld, %lld] span "
                            "more than 2^63 elements", v->strides[0], v->strides[1], v->strides[2], nb, rows, heads);
    return KF_OK;
}

static int view_set(const kf_parts_view *v) { return v->ptr || v->strides[0] || v->strides[1] || v->strides[2]; }

/* The views, lse pointers of layers, parts and values the plan does not read are left zero. */
static kf_status check_unused(const rt_parts_info *info, const kf_parts_tensors *t, core_err *e)
{
    const kf_parts_desc *d = &info->d;
    const int L = d->layers, sep = d->value == KF_PARTS_VALUE_SEPARATE;
    for (int l = 0; l < KF_PARTS_MAXL; l++) {
        for (int p = 0; p < KF_PARTS_MAXK; p++) {
            const char *why = l >= L ? "the plan has fewer layers" : p >= info->nk ? "the plan has fewer key parts" : NULL;
            if (why && view_set(&t->q[l][p]))
                return core_err_set(e, KF_ERR_ARG,
                                    "tensors.q[%d][%d] is set but %s (desc.layers %d, %d parts)", l, p, why,
                                    L, info->nk);
            const char *kwhy = why ? why : (p == 0 && l > 0) ? "key part 0 is shared by the layers (k[0][0])" : NULL;
            if (kwhy && view_set(&t->k[l][p]))
                return core_err_set(e, KF_ERR_ARG,
                                    "tensors.k[%d][%d] is set but %s (desc.layers %d, %d parts)", l, p, kwhy,
                                    L, info->nk);
            const char *vwhy = !sep ? "the plan's values alias key part 0 (KF_PARTS_VALUE_ALIAS)" : kwhy;
            if (vwhy && view_set(&t->v[l][p]))
                return core_err_set(e, KF_ERR_ARG, "tensors.v[%d][%d] is set but %s", l, p, vwhy);
        }
        if (l >= L && view_set(&t->o[l]))
            return core_err_set(e, KF_ERR_ARG, "tensors.o[%d] is set but the plan has %d layers", l, L);
        if (l >= L && t->lse[l])
            return core_err_set(e, KF_ERR_ARG, "tensors.lse[%d] = %p is set but the plan has %d layers", l,
                                (void *)t->lse[l], L);
    }
    if (d->kv_dtype != KF_KV_E4M3 && view_set(&t->kv_scale))
        return core_err_set(e, KF_ERR_ARG, "tensors.kv_scale is set but the plan's caches are %s (desc.kv_dtype "
                            "KF_KV_SAME)", d->dtype == KF_BF16 ? "bf16" : "fp16");
    return KF_OK;
}

kf_status rt_parts_bind(const rt_parts_info *info, const kf_parts_params *base, const gen_kvset *vp,
                        size_t ws_bytes, void *plan_ws, const kf_parts_tensors *t, kf_parts_params *out,
                        core_err *e)
{
    const kf_parts_desc *d = &info->d;
    kf_status st;
    char what[32];
    if (!t)
        return core_err_set(e, KF_ERR_ARG, "tensors is NULL");
    if (t->batch < 0 || t->batch > d->max_batch)
        return core_err_set(e, KF_ERR_ARG, "tensors.batch = %d is outside 0..%d (the plan's max_batch)", t->batch,
                            d->max_batch);
    if (t->q_len < 1 || t->q_len > d->max_q)
        return core_err_set(e, KF_ERR_ARG,
                            "tensors.q_len = %d is outside 1..%d (the plan's max_q)", t->q_len, d->max_q);
    if (!t->kv_len && (t->kv_len_all < 0 || t->kv_len_all > d->max_kv))
        return core_err_set(e, KF_ERR_ARG,
                            "tensors.kv_len_all = %d is outside 0..%d (the plan's max_kv)", t->kv_len_all,
                            d->max_kv);
    if (t->kv_len && ((uintptr_t)t->kv_len & 3u))
        return core_err_set(e, KF_ERR_ARG,
                            "tensors.kv_len = %p is not 4-byte aligned (int32)", (const void *)t->kv_len);
    if (d->page_size && (!t->block_table || t->bt_stride < 1))
        return core_err_set(e, KF_ERR_ARG, "the plan is paged (page_size %d): tensors.block_table (%p) and "
                            "tensors.bt_stride (%d) are required", d->page_size, (const void *)t->block_table, t->bt_stride);
    if (d->page_size && ((uintptr_t)t->block_table & 3u))
        return core_err_set(e, KF_ERR_ARG, "tensors.block_table = %p is not 4-byte aligned (int32)",
                            (const void *)t->block_table);
    if (d->page_size && t->bt_stride < ((long long)d->max_kv + d->page_size - 1) / d->page_size)
        return core_err_set(e, KF_ERR_ARG,
                            "tensors.bt_stride = %d is less than the %lld pages of max_kv %d at page_size %d",
                            t->bt_stride, ((long long)d->max_kv + d->page_size - 1) / d->page_size, d->max_kv, d->page_size);
    if (!d->page_size && t->block_table)
        return core_err_set(e, KF_ERR_ARG, "tensors.block_table = %p is set but the plan's caches are contiguous",
                            (const void *)t->block_table);
    if (!d->page_size && t->bt_stride)
        return core_err_set(e, KF_ERR_ARG, "tensors.bt_stride = %d is set but the plan's caches are contiguous",
                            t->bt_stride);
    if ((st = check_unused(info, t, e)))
        return st;
    if (t->workspace && ((uintptr_t)t->workspace & 15u))
        return core_err_set(e, KF_ERR_UNSUPPORTED, "tensors.workspace = %p is not 16-byte aligned", t->workspace);
    kf_parts_params a = *base;
    const int L = d->layers, sq = t->q_len, fp8 = d->kv_dtype == KF_KV_E4M3;
    const long long rows = d->page_size ? d->page_size : d->max_kv;
    int nc = 0;
    /* caches in tile order: key part 0, key part p of each layer, then (separate) the values alike */
    for (int pass = 0; pass < (d->value == KF_PARTS_VALUE_SEPARATE ? 2 : 1); pass++)
        for (int p = 0; p < info->nk; p++)
            for (int l = 0; l < (p ? L : 1); l++) {
                const long long dim = info->dims[p];
                snprintf(what, sizeof what, "%s[%d][%d]", pass ? "v" : "k", l, p);
                if ((st = view_a(what, pass ? &t->v[l][p] : &t->k[l][p], d->page_size ? 1 : t->batch,
                                 rows * d->hkv * dim, d->hkv * dim, dim, fp8 ? 16 : 8,
                                 &a.c[nc++], e)))
                    return st;
            }
    if (fp8 && (st = scale_view(&t->kv_scale, d->page_size ? 1 : t->batch, rows, d->hkv, &a.cs, e)))
        return st;
    for (int l = 0; l < L; l++) {
        for (int p = 0; p < info->nk; p++) {
            const long long dim = info->dims[p];
            snprintf(what, sizeof what, "q[%d][%d]", l, p);
            if ((st = view(what, &t->q[l][p], t->batch, (long long)sq * d->hq * dim, (long long)d->hq * dim, dim, &a.q[l][p], e)))
                return st;
        }
        snprintf(what, sizeof what, "o[%d]", l);
        kf_parts_view ov = t->o[l];
        if ((st = view(what, &ov, t->batch, (long long)sq * d->hq * d->dv, (long long)d->hq * d->dv, d->dv, &a.o[l], e)))
            return st;
        if (t->lse[l] && ((uintptr_t)t->lse[l] & 3u))
            return core_err_set(e, KF_ERR_ARG, "tensors.lse[%d] = %p is not 4-byte aligned", l, (void *)t->lse[l]);
        a.lse[l] = t->lse[l];
    }
    a.lse_sb = (long long)d->hq * sq;
    a.lse_sh = sq;
    a.kv_len = t->kv_len;
    a.block_table = d->page_size ? t->block_table : NULL;
    a.bt_sb = t->bt_stride;
    a.b = t->batch;
    a.sq = sq;
    a.skv = t->kv_len ? d->max_kv : t->kv_len_all;
    a.ws_rows = t->batch * sq;
    rt_parts_set_workspace(vp, &a, ws_bytes ? (t->workspace ? t->workspace : plan_ws) : NULL);
    *out = a;
    return KF_OK;
}
