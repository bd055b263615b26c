/* runtime/select_parts.c: split-score decode selection: one pure function of (description, device, tuned table), and binding a call */
#include "runtime/parts_launch.h"
#include "runtime/parts_plan.h"
#include "runtime/select.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* "latent512_rope64" -> dims {512, 64}; -1 when malformed. */
static int parse_parts(const char *s, int dims[KF_PARTS_MAXK])
{
    int n = 0;
    const char *c = s;
    while (*c) {
        if (n == KF_PARTS_MAXK || !islower((unsigned char)*c))
            return -1;
        while (islower((unsigned char)*c))
            c++;
        if (!isdigit((unsigned char)*c))
            return -1;
        long v = 0;
        while (isdigit((unsigned char)*c) && v < 100000)
            v = v * 10 + (*c++ - '0');
        dims[n++] = (int)v;
        if (*c == '_' && c[1])
            c++;
        else if (*c)
            return -1;
    }
    return n;
}

kf_status rt_parts_check(const kf_parts_desc *d, const rt_devinfo *dev, rt_parts_info *info, char *msg, size_t n)
{
    memset(info, 0, sizeof *info);
    if (!d)
        return rt_say(KF_ERR_ARG, msg, n, "desc is NULL");
    if (d->dtype != KF_BF16 && d->dtype != KF_FP16)
        return rt_say(KF_ERR_ARG, msg, n, "desc.dtype must be KF_BF16 or KF_FP16, got %d", (int)d->dtype);
    if (!d->parts)
        return rt_say(KF_ERR_ARG, msg, n, "desc.parts is NULL (e.g. \"latent512_rope64\")");
    if (strlen(d->parts) >= sizeof info->parts || (info->nk = parse_parts(d->parts, info->dims)) < 1)
        return rt_say(KF_ERR_ARG, msg, n, "desc.parts = '%.80s' is not 1..4 parts <name><dim> joined by '_'", d->parts);
    snprintf(info->parts, sizeof info->parts, "%s", d->parts);
    int sum = 0;
    for (int i = 0; i < info->nk; i++) {
        if (info->dims[i] < 16 || info->dims[i] % 16 || info->dims[i] > 1024)
            return rt_say(KF_ERR_UNSUPPORTED, msg, n, "desc.parts = '%s': part %d has dim %d (a multiple of 16 in 16..1024)",
                       d->parts, i, info->dims[i]);
        sum += info->dims[i];
    }
    if (d->value != KF_PARTS_VALUE_ALIAS && d->value != KF_PARTS_VALUE_SEPARATE)
        return rt_say(KF_ERR_ARG, msg, n, "desc.value must be KF_PARTS_VALUE_ALIAS or KF_PARTS_VALUE_SEPARATE, got %d",
                   (int)d->value);
    if (d->value == KF_PARTS_VALUE_SEPARATE && d->dv != sum)
        return rt_say(KF_ERR_ARG, msg, n, "desc.dv = %d must be the sum of the parts' dims (%d) with separate values", d->dv,
                   sum);
    if (d->value == KF_PARTS_VALUE_ALIAS && (d->dv < 16 || d->dv % 16 || d->dv > info->dims[0]))
        return rt_say(KF_ERR_ARG, msg, n, "desc.dv = %d must be a multiple of 16 within key part 0 (%d columns)", d->dv,
                   info->dims[0]);
    if (d->hq <= 0 || d->hkv <= 0 || d->hq % d->hkv)
        return rt_say(KF_ERR_ARG, msg, n, "desc.hq = %d, desc.hkv = %d: both positive, hq a multiple of hkv", d->hq, d->hkv);
    if (d->layers < 1 || d->layers > KF_PARTS_MAXL)
        return rt_say(KF_ERR_ARG, msg, n, "desc.layers must be 1..4, got %d", d->layers);
    if (d->page_size && (d->page_size < 16 || d->page_size > 1024 || (d->page_size & (d->page_size - 1))))
        return rt_say(KF_ERR_UNSUPPORTED, msg, n, "desc.page_size = %d: 0 (contiguous) or a power of two in 16..1024",
                   d->page_size);
    if (d->causal != 0 && d->causal != 1)
        return rt_say(KF_ERR_ARG, msg, n, "desc.causal must be 0 or 1, got %d", d->causal);
    if (!(d->scale > 0.0f) || isinf(d->scale))
        return rt_say(KF_ERR_ARG, msg, n, "desc.scale must be finite and > 0 (the caller's softmax scale), got %g",
                   (double)d->scale);
    if (d->max_batch <= 0 || d->max_batch > 65535)
        return rt_say(KF_ERR_ARG, msg, n, "desc.max_batch must be 1..65535, got %d", d->max_batch);
    if (d->max_q <= 0 || d->max_q > 16)
        return rt_say(d->max_q <= 0 ? KF_ERR_ARG : KF_ERR_UNSUPPORTED, msg, n, "desc.max_q must be 1..16 (decode), got %d",
                   d->max_q);
    if (d->max_kv < 0)
        return rt_say(KF_ERR_ARG, msg, n, "desc.max_kv must be >= 0, got %d", d->max_kv);
    if (dev->cc_major < 8)
        return rt_say(KF_ERR_UNSUPPORTED, msg, n, "%s (compute capability %d.%d) is not supported: kforge needs sm_80 or newer",
                   dev->name, dev->cc_major, dev->cc_minor);
    info->d = *d;
    info->d.parts = info->parts;
    return KF_OK;
}

static void shape_of(const rt_parts_info *in, gen_kvset *s)
{
    const kf_parts_desc *d = &in->d;
    char value[80];
    gen_kv_clear(s);
    gen_kv_set_str(s, "family", "attn_parts_decode");
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
    p->ws_rows = d->max_batch * d->max_q;
    p->scale = d->scale;
    p->scale_log2 = d->scale * 1.4426950408889634f;
}

kf_status rt_parts_select(const kf_parts_desc *d, const rt_devinfo *dev, const struct rt_table *t,
                          int (*dflt)(void *, const gen_kvset *, gen_kvset *, char *, size_t), void *arg,
                          struct rt_choice *out, char *msg, size_t msgn)
{
    memset(out, 0, sizeof *out);
    msg[0] = 0;
    rt_parts_info info;
    kf_status st = rt_parts_check(d, dev, &info, msg, msgn);
    if (st)
        return st;
    shape_of(&info, &out->shape);
    static const char *const class_keys[] = {"family", "dtype", "hq", "hkv", "parts", "value", "dv",
                                             "layers", "page_size", "causal", NULL};
    static const char *const dist_keys[] = {"b", "sq", "skv", NULL};
    st = rt_select_variant(dev, t, class_keys, dist_keys, dflt, arg, out, msg, msgn);
    if (st)
        return st;
    kf_parts_params p;
    rt_parts_base_params(&info, &out->vp, &p);
    out->workspace = rt_parts_workspace_bytes(&out->vp, &p);
    return KF_OK;
}

/* ---- one call ---------------------------------------------------------------------- */

static kf_status view(const char *what, const kf_parts_view *v, long long d0, long long d1, long long d2,
                      kf_parts_tensor *out, char *msg, size_t n)
{
    if (!v->ptr)
        return rt_say(KF_ERR_ARG, msg, n, "tensors.%s.ptr is NULL", what);
    if ((uintptr_t)v->ptr & 15u)
        return rt_say(KF_ERR_UNSUPPORTED, msg, n, "tensors.%s.ptr = %p is not 16-byte aligned", what, v->ptr);
    for (int i = 0; i < 3; i++) {
        if (v->strides[i] < 0)
            return rt_say(KF_ERR_ARG, msg, n, "tensors.%s.strides[%d] must be >= 0, got %lld", what, i, v->strides[i]);
        if (v->strides[i] % 8)
            return rt_say(KF_ERR_UNSUPPORTED, msg, n, "tensors.%s.strides[%d] = %lld breaks 16-byte row alignment "
                       "(must be a multiple of 8 elements)", what, i, v->strides[i]);
    }
    out->p = v->ptr;
    out->sb = v->strides[0] ? v->strides[0] : d0;
    out->ss = v->strides[1] ? v->strides[1] : d1;
    out->sh = v->strides[2] ? v->strides[2] : d2;
    return KF_OK;
}

kf_status rt_parts_bind(const rt_parts_info *info, const kf_parts_params *base, const gen_kvset *vp,
                        size_t ws_bytes, void *plan_ws, const kf_parts_tensors *t, kf_parts_params *out,
                        char *msg, size_t msgn)
{
    const kf_parts_desc *d = &info->d;
    kf_status st;
    char what[32];
    msg[0] = 0;
    if (!t)
        return rt_say(KF_ERR_ARG, msg, msgn, "tensors is NULL");
    if (t->batch < 0 || t->batch > d->max_batch)
        return rt_say(KF_ERR_ARG, msg, msgn, "tensors.batch = %d is outside 0..%d (the plan's max_batch)", t->batch,
                   d->max_batch);
    if (t->q_len < 1 || t->q_len > d->max_q)
        return rt_say(KF_ERR_ARG, msg, msgn, "tensors.q_len = %d is outside 1..%d (the plan's max_q)", t->q_len, d->max_q);
    if (!t->kv_len && (t->kv_len_all < 0 || t->kv_len_all > d->max_kv))
        return rt_say(KF_ERR_ARG, msg, msgn, "tensors.kv_len_all = %d is outside 0..%d (the plan's max_kv)", t->kv_len_all,
                   d->max_kv);
    if (d->page_size && (!t->block_table || t->bt_stride < 1))
        return rt_say(KF_ERR_ARG, msg, msgn, "the plan is paged (page_size %d): tensors.block_table (%p) and "
                   "tensors.bt_stride (%d) are required", d->page_size, (const void *)t->block_table, t->bt_stride);
    if (!d->page_size && t->block_table)
        return rt_say(KF_ERR_ARG, msg, msgn, "tensors.block_table = %p is set but the plan's caches are contiguous",
                   (const void *)t->block_table);
    if (t->workspace && ((uintptr_t)t->workspace & 15u))
        return rt_say(KF_ERR_UNSUPPORTED, msg, msgn, "tensors.workspace = %p is not 16-byte aligned", t->workspace);
    kf_parts_params a = *base;
    const int L = d->layers, sq = t->q_len;
    const long long rows = d->page_size ? d->page_size : d->max_kv;
    int nc = 0;
    /* caches in tile order: key part 0, key part p of each layer, then (separate) the values alike */
    for (int pass = 0; pass < (d->value == KF_PARTS_VALUE_SEPARATE ? 2 : 1); pass++)
        for (int p = 0; p < info->nk; p++)
            for (int l = 0; l < (p ? L : 1); l++) {
                const long long dim = info->dims[p];
                snprintf(what, sizeof what, "%s[%d][%d]", pass ? "v" : "k", l, p);
                if ((st = view(what, pass ? &t->v[l][p] : &t->k[l][p], rows * d->hkv * dim, d->hkv * dim, dim,
                               &a.c[nc++], msg, msgn)))
                    return st;
            }
    for (int l = 0; l < L; l++) {
        for (int p = 0; p < info->nk; p++) {
            const long long dim = info->dims[p];
            snprintf(what, sizeof what, "q[%d][%d]", l, p);
            if ((st = view(what, &t->q[l][p], (long long)sq * d->hq * dim, (long long)d->hq * dim, dim, &a.q[l][p], msg,
                           msgn)))
                return st;
        }
        snprintf(what, sizeof what, "o[%d]", l);
        kf_parts_view ov = t->o[l];
        if ((st = view(what, &ov, (long long)sq * d->hq * d->dv, (long long)d->hq * d->dv, d->dv, &a.o[l], msg, msgn)))
            return st;
        if (t->lse[l] && ((uintptr_t)t->lse[l] & 3u))
            return rt_say(KF_ERR_ARG, msg, msgn, "tensors.lse[%d] = %p is not 4-byte aligned", l, (void *)t->lse[l]);
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
