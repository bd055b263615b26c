/* runtime/select.c: kernel selection: one pure function of (problem, device, tuned table) */
#include "runtime/select.h"
#include "runtime/attn_launch.h"
#include "runtime/attn_features.h"
#include "runtime/family.h"
#include "runtime/shape.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rt_attn_desc_shape(const void *desc, gen_kvset *s)
{
    const kf_attn_desc *d = desc;
    gen_kv_clear(s);
    gen_kv_set_str(s, "family", rt_family_name(d->kind == KF_ATTN_DECODE ? RT_FAM_ATTN_DECODE : RT_FAM_ATTN_PREFILL));
    gen_kv_set_str(s, "dtype", d->dtype == KF_BF16 ? "bf16" : "fp16");
    gen_kv_set_int(s, "b", d->max_batch);
    gen_kv_set_int(s, "sq", d->max_q);
    gen_kv_set_int(s, "skv", d->max_kv);
    gen_kv_set_int(s, "hq", d->hq);
    gen_kv_set_int(s, "hkv", d->hkv);
    gen_kv_set_int(s, "d", d->d);
    gen_kv_set_int(s, "causal", d->causal);
    rt_attn_feature_shape(d, s);   /* the model features' keys, only those that are on */
}

/* The elements of a [b, rows, h, dd] tensor (contiguous for the maxima) and the span of its declared
 * strides fit in 63 bits. */
static kf_status check_extent(const char *name, const long long st[3], long long b, long long rows, long long h,
                              long long dd, core_err *e)
{
    long long x;
    if (rt_mul_ll(b, rows, &x) || rt_mul_ll(x, h, &x) || rt_mul_ll(x, dd, &x))
        return core_err_set(e, KF_ERR_ARG,
                            "%s: %lld x %lld x %lld x %lld elements do not fit in 63 bits", name, b, rows,
                            h, dd);
    const long long ext[4] = {b, rows, h, dd};
    const long long str[4] = {st[0] ? st[0] : rows * h * dd, st[1] ? st[1] : h * dd, st[2] ? st[2] : dd, 1};
    if (rt_span(4, ext, str) < 0)
        return core_err_set(e, KF_ERR_ARG,
                            "desc.%s_strides = {%lld, %lld, %lld} over [%lld, %lld, %lld, %lld] span more "
                            "than 2^63 elements", name, st[0], st[1], st[2], b, rows, h, dd);
    return KF_OK;
}

/* The description's own fields (enums, strides, paging, device), and its shape through rt_shape_check:
 * the checks kforge gen / compile make of a --shape. Sets shape. */
static kf_status check_desc(const kf_attn_desc *d, const rt_devinfo *dev, gen_kvset *shape, core_err *e)
{
    if (!d)
        return core_err_set(e, KF_ERR_ARG, "desc is NULL");
    if (d->kind != KF_ATTN_PREFILL && d->kind != KF_ATTN_DECODE)
        return core_err_set(e, KF_ERR_ARG, "desc.kind must be KF_ATTN_PREFILL or KF_ATTN_DECODE, got %d", d->kind);
    if (d->dtype != KF_BF16 && d->dtype != KF_FP16)
        return core_err_set(e, KF_ERR_ARG, "desc.dtype must be KF_BF16 or KF_FP16, got %d", d->dtype);
    if (!(d->scale >= 0.0f) || isinf(d->scale))
        return core_err_set(e, KF_ERR_ARG, "desc.scale must be finite and >= 0 (0: 1/sqrt(d)), got %g", d->scale);
    if (d->packed_q != 0 && d->packed_q != 1)
        return core_err_set(e, KF_ERR_ARG, "desc.packed_q must be 0 or 1, got %d", d->packed_q);
    kf_status st = rt_attn_feature_check(d, e);
    if (st)
        return st;
    rt_family_for_desc(RT_API_ATTN, d, shape);
    st = rt_shape_check(NULL, shape, NULL, RT_NAMES_DESC, e);
    if (st)
        return st;
    const long long *sts[4] = {d->q_strides, d->k_strides, d->v_strides, d->o_strides};
    const char *names[4] = {"q", "k", "v", "o"};
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 3; i++) {
            if (sts[t][i] < 0)
                return core_err_set(e, KF_ERR_ARG,
                                    "desc.%s_strides[%d] must be >= 0, got %lld", names[t], i, sts[t][i]);
            /* rows must stay 16-byte aligned: strides in elements of 2 bytes */
            if (sts[t][i] % 8)
                return core_err_set(e, KF_ERR_UNSUPPORTED, "desc.%s_strides[%d] = %lld breaks 16-byte row alignment "
                                    "(must be a multiple of 8 elements)", names[t], i, sts[t][i]);
        }
    if (d->page_size < 0)
        return core_err_set(e, KF_ERR_ARG, "desc.page_size must be >= 0 (0: contiguous K/V), got %d", d->page_size);
    if (d->kind == KF_ATTN_DECODE && d->packed_q)
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "decode takes q as [B, Sq, Hq, D]; packed q (desc.packed_q) is for prefill");
    /* paged: k and v are pools of pages of page_size rows, the number of pages is the caller's */
    long long kv_b = d->page_size > 0 ? 1 : d->max_batch, kv_rows = d->page_size > 0 ? d->page_size : d->max_kv;
    if ((st = check_extent("q", d->q_strides, d->max_batch, d->max_q, d->hq, d->d, e)) ||
        (st = check_extent("o", d->o_strides, d->max_batch, d->max_q, d->hq, d->d, e)) ||
        (st = check_extent("k", d->k_strides, kv_b, kv_rows, d->hkv, d->d, e)) ||
        (st = check_extent("v", d->v_strides, kv_b, kv_rows, d->hkv, d->d, e)))
        return st;
    if (dev->cc_major < 8)
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "%s (compute capability %d.%d) is not supported: kforge needs sm_80 or newer",
                            dev->name, dev->cc_major, dev->cc_minor);
    return KF_OK;
}

static int same_kernel_class(const gen_kvset *a, const gen_kvset *b, const char *const *keys)
{
    for (const char *const *k = keys; *k; k++) {
        const gen_kv *x = gen_kv_find(a, *k), *y = gen_kv_find(b, *k);
        if (!x && !y)
            continue;   /* an optional key (a model feature) absent from both */
        if (!x || !y || x->is_str != y->is_str || (x->is_str ? strcmp(x->s, y->s) : x->i != y->i))
            return 0;
    }
    return 1;
}

static double log_dist(const gen_kvset *a, const gen_kvset *b, const char *const *keys)
{
    double s = 0;
    for (const char *const *k = keys; *k; k++)
        s += fabs(log2(1.0 + (double)gen_kv_int(a, *k, 0)) - log2(1.0 + (double)gen_kv_int(b, *k, 0)));
    return s;
}

const rt_winner *rt_select_nearest(const rt_table *t, const gen_kvset *shape, const char *const *class_keys,
                                   const char *const *dist_keys)
{
    const rt_winner *best = NULL;
    double best_d = 1e30;
    for (int i = 0; t && i < t->n; i++) {
        const rt_winner *w = &t->v[i];
        if (!same_kernel_class(&w->shape, shape, class_keys))
            continue;
        double dist = log_dist(&w->shape, shape, dist_keys);
        /* ties: a bundle beats the database, then the earlier entry */
        if (dist < best_d - 1e-12 || (fabs(dist - best_d) <= 1e-12 && w->from_bundle && best && !best->from_bundle)) {
            best = w;
            best_d = dist;
        }
    }
    return best;
}

kf_status rt_select_variant(const rt_devinfo *dev, const rt_table *t, const char *const *class_keys,
                            const char *const *dist_keys, rt_default_fn dflt, void *arg, rt_choice *out,
                            core_err *e)
{
    const rt_winner *best = rt_select_nearest(t, &out->shape, class_keys, dist_keys);
    /* A kept default says only that its own shape's default is best there: a shape near it takes its own
     * default, not the other's parameters. Without a default (JIT off) the tuned binary still serves. */
    if (best && best->kept_default && dflt && log_dist(&best->shape, &out->shape, dist_keys) > 0)
        best = NULL;
    if (best) {
        out->winner = best;
        out->vp = best->vp;
    } else if (!dflt) {
        char key[512];
        gen_kvset s = out->shape;
        gen_kv_remove(&s, "family");
        gen_kv_keyform(&s, key, sizeof key);
        return core_err_set(e, KF_ERR_NOT_TUNED, "no tuned %s variant for %s on %s, and JIT is off",
                            gen_kv_str(&out->shape, "family"), key, dev->name);
    } else if (dflt(arg, &out->shape, &out->vp, e)) {
        if (e)
            e->st = KF_ERR_UNSUPPORTED;   /* the default's message, whatever its own status */
        return KF_ERR_UNSUPPORTED;
    }
    return KF_OK;
}

kf_status rt_select(const kf_attn_desc *d, const rt_devinfo *dev, const rt_table *t,
                    rt_default_fn dflt, void *arg, rt_choice *out, core_err *e)
{
    memset(out, 0, sizeof *out);
    kf_status st = check_desc(d, dev, &out->shape, e);
    if (st)
        return st;
    const rt_family *f = rt_family_of(&out->shape);
    st = rt_select_variant(dev, t, f->class_keys, f->dist_keys, dflt, arg, out, e);
    if (st)
        return st;
    kf_attn_params p;
    rt_launch l;
    rt_attn_base_params(d, &out->vp, &p);
    if (f->launch(&out->vp, &p, &l))
        return core_err_set(e, KF_ERR_UNSUPPORTED, "the %s variant '%s' is not of an attention family", f->name,
                            out->winner ? out->winner->variant : "(default)");
    out->workspace = l.ws_bytes;
    if (out->workspace == SIZE_MAX)
        return core_err_set(e, KF_ERR_ARG, "the split workspace of %d splits x desc.max_batch %d x desc.max_q %d x "
                            "desc.hq %d rows of desc.d %d does not fit in memory", p.splits, d->max_batch, d->max_q, d->hq, d->d);
    return KF_OK;
}

static void strides(const long long in[3], long long s, long long h, long long dd, long long out[3])
{
    /* contiguous [B, S, H, D] for the maxima unless declared */
    out[0] = in[0] ? in[0] : s * h * dd;
    out[1] = in[1] ? in[1] : h * dd;
    out[2] = in[2] ? in[2] : dd;
}

void rt_attn_base_params(const kf_attn_desc *d, const gen_kvset *vp, void *params_out)
{
    kf_attn_params *p = params_out;
    memset(p, 0, sizeof *p);
    long long st[3];
    strides(d->q_strides, d->max_q, d->hq, d->d, st);
    p->q_sb = st[0], p->q_ss = st[1], p->q_sh = st[2];
    strides(d->o_strides, d->max_q, d->hq, d->d, st);
    p->o_sb = st[0], p->o_ss = st[1], p->o_sh = st[2];
    /* paged: the "batch" stride of K/V is the page stride of the pools */
    long long kv_rows = d->page_size > 0 ? d->page_size : d->max_kv;
    strides(d->k_strides, kv_rows, d->hkv, d->d, st);
    p->k_sb = st[0], p->k_ss = st[1], p->k_sh = st[2];
    strides(d->v_strides, kv_rows, d->hkv, d->d, st);
    p->v_sb = st[0], p->v_ss = st[1], p->v_sh = st[2];
    p->b = d->max_batch;
    p->sq = d->max_q;
    p->skv = d->max_kv;
    p->hq = d->hq;
    p->hkv = d->hkv;
    p->page_size = d->page_size;
    p->splits = (int)gen_kv_int(vp, "sp", 1);
    p->ws_rows = (int)((long long)d->max_batch * d->max_q);   /* within an int: rt_shape_check */
    p->lse_sh = d->max_q;
    p->lse_sb = (long long)d->hq * d->max_q;
    float scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)d->d);
    p->scale = scale;
    p->scale_log2 = scale * 1.4426950408889634f;
    rt_attn_feature_params(d, p);
}

int rt_table_add(rt_table *t, const rt_winner *w)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        rt_winner *v = realloc(t->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = *w;
    return 0;
}

void rt_table_free(rt_table *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}
