/* runtime/plan_attn.c: attention plans (kf_attn_supported, kf_attn_plan) and graph-safe runs (kf_attn_run) */
#include "runtime/attn_features.h"
#include "runtime/attn_launch.h"
#include "runtime/attn_tmap.h"
#include "runtime/ctx.h"
#include "runtime/family.h"
#include "runtime/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static kf_status attn_select(const void *desc, const rt_devinfo *dev, const rt_table *t, rt_default_fn dflt,
                             void *arg, rt_choice *out, core_err *e)
{
    return rt_select(desc, dev, t, dflt, arg, out, e);
}

static kf_status attn_finish(kf_plan *p, const void *desc, const rt_choice *ch, core_err *e)
{
    (void)ch;
    const kf_attn_desc *d = desc;
    p->d.attn = *d;
    rt_attn_base_params(d, &p->vp, &p->base.attn);
    p->geo = rt_attn_geom_of(&p->vp);
    p->geo.ctas = p->ctx->dev.sms;   /* sched=persist: one CTA an SM */
    if (p->geo.tma && d->page_size > 0 && !rt_attn_tma_pages_ok(d->page_size, p->geo.bn)) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "the variant '%s' (impl wgmma_tma) loads K/V pages by tensor map: desc.page_size %d and "
                            "its key block %d must be multiples of one another, with a multiple of 8 keys per box "
                            "(impl wgmma_pp takes any page size)", p->variant, d->page_size, p->geo.bn);
    }
    rt_launch l;
    if (rt_attn_launch(&p->vp, &p->base.attn, &l) || l.n > p->mod.n) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "binary of '%s' has %d kernels, the variant launches %d", p->variant, p->mod.n, l.n);
    }
    p->n_launch = l.n;
    return KF_OK;
}

static const rt_plan_ops attn_ops = {RT_PLAN_ATTN, attn_select, attn_finish};

kf_status kf_attn_supported(kf_ctx *c, const kf_attn_desc *d) { return rt_plan_supported(c, &attn_ops, d); }

kf_status kf_attn_plan(kf_ctx *c, const kf_attn_desc *d, kf_plan **out) { return rt_plan_new(c, &attn_ops, d, out); }

static int misaligned(const void *ptr) { return ((uintptr_t)ptr & 15u) != 0; }

kf_status kf_attn_run(kf_plan *p, const kf_attn_tensors *t, void *stream)
{
    if (!p)
        return KF_ERR_ARG;
    if (!t)
        return rt_plan_err(p, KF_ERR_ARG, "tensors is NULL");
    if (p->family != RT_PLAN_ATTN)
        return rt_plan_err(p, KF_ERR_ARG, "the plan '%s' is not an attention plan: run it with kf_kda_run or kf_parts_run",
                           p->variant);
    const kf_attn_desc *d = &p->d.attn;
    static const char *const names[4] = {"q", "k", "v", "o"};
    const void *ptrs[4] = {t->q, t->k, t->v, t->o};
    for (int i = 0; i < 4; i++) {
        if (!ptrs[i])
            return rt_plan_err(p, KF_ERR_ARG, "tensors.%s is NULL", names[i]);
        if (misaligned(ptrs[i]))
            return rt_plan_err(p, KF_ERR_UNSUPPORTED, "tensors.%s = %p is not 16-byte aligned", names[i], ptrs[i]);
    }
    if (t->lse && ((uintptr_t)t->lse & 3u))
        return rt_plan_err(p, KF_ERR_ARG, "tensors.lse = %p is not 4-byte aligned", (void *)t->lse);
    if (t->batch < 0 || t->batch > d->max_batch)
        return rt_plan_err(p, KF_ERR_ARG, "tensors.batch = %d is outside 0..%d (the plan's max_batch)", t->batch,
                              d->max_batch);
    if (t->q_len < 1 || t->q_len > d->max_q)
        return rt_plan_err(p, KF_ERR_ARG, "tensors.q_len = %d is outside 1..%d (the plan's max_q)", t->q_len, d->max_q);
    if (!t->kv_len && (t->kv_len_all < 0 || t->kv_len_all > d->max_kv))
        return rt_plan_err(p, KF_ERR_ARG, "tensors.kv_len_all = %d is outside 0..%d (the plan's max_kv)",
                              t->kv_len_all, d->max_kv);
    if (t->kv_len && ((uintptr_t)t->kv_len & 3u))
        return rt_plan_err(p, KF_ERR_ARG, "tensors.kv_len = %p is not 4-byte aligned (int32)", (const void *)t->kv_len);
    if (d->packed_q && !t->cu_seqlens_q)
        return rt_plan_err(p, KF_ERR_ARG, "tensors.cu_seqlens_q is NULL but the plan has packed_q");
    if (!d->packed_q && t->cu_seqlens_q)
        return rt_plan_err(p, KF_ERR_ARG, "tensors.cu_seqlens_q = %p is set but the plan has packed_q = 0 (q is "
                           "[B, Sq, Hq, D])", (const void *)t->cu_seqlens_q);
    if (!d->packed_q && t->total_q)
        return rt_plan_err(p, KF_ERR_ARG, "tensors.total_q = %d is set but the plan has packed_q = 0", t->total_q);
    if (t->cu_seqlens_q && ((uintptr_t)t->cu_seqlens_q & 3u))
        return rt_plan_err(p, KF_ERR_ARG, "tensors.cu_seqlens_q = %p is not 4-byte aligned (int32)",
                           (const void *)t->cu_seqlens_q);
    if (d->packed_q && (t->total_q < 0 || t->total_q > (long long)d->max_batch * d->max_q))
        return rt_plan_err(p, KF_ERR_ARG, "tensors.total_q = %d is outside 0..%lld", t->total_q,
                              (long long)d->max_batch * d->max_q);
    if (d->page_size > 0) {
        long long need = ((long long)d->max_kv + d->page_size - 1) / d->page_size;
        if (!t->block_table)
            return rt_plan_err(p, KF_ERR_ARG, "tensors.block_table is NULL but the plan is paged (page_size %d)",
                               d->page_size);
        if ((uintptr_t)t->block_table & 3u)
            return rt_plan_err(p, KF_ERR_ARG, "tensors.block_table = %p is not 4-byte aligned", (void *)t->block_table);
        if (t->bt_stride < need)
            return rt_plan_err(p, KF_ERR_ARG, "tensors.bt_stride = %d is less than the %lld pages of max_kv %d"
                               " at page_size %d", t->bt_stride, need, d->max_kv, d->page_size);
    }
    if (d->page_size == 0 && t->block_table)
        return rt_plan_err(p, KF_ERR_ARG, "tensors.block_table = %p is set but the plan's K/V are contiguous "
                           "(desc.page_size 0)", (const void *)t->block_table);
    if (d->page_size == 0 && t->bt_stride)
        return rt_plan_err(p, KF_ERR_ARG, "tensors.bt_stride = %d is set but the plan's K/V are contiguous "
                           "(desc.page_size 0)", t->bt_stride);
    {   /* the model features' tensors (runtime/attn_features.c) */
        core_err fe;
        kf_status fst = rt_attn_feature_tensors(d, t, &fe);
        if (fst)
            return rt_plan_err(p, fst, "%s", fe.msg);
    }
    if (t->workspace && misaligned(t->workspace))
        return rt_plan_err(p, KF_ERR_UNSUPPORTED, "tensors.workspace = %p is not 16-byte aligned", t->workspace);
    if (t->batch == 0)
        return KF_OK;
    kf_attn_params a = p->base.attn;
    a.q = t->q, a.k = t->k, a.v = t->v, a.o = t->o, a.lse = t->lse;
    a.cu_seqlens_q = d->packed_q ? t->cu_seqlens_q : NULL;
    a.kv_len = t->kv_len;
    rt_attn_feature_bind(d, t, &a);
    a.block_table = d->page_size > 0 ? t->block_table : NULL;
    a.bt_sb = d->page_size > 0 ? t->bt_stride : 0;
    a.b = t->batch;
    a.sq = t->q_len;
    a.skv = t->kv_len ? d->max_kv : t->kv_len_all;
    a.ws_rows = d->packed_q ? t->total_q : t->batch * t->q_len;
    /* lse [B, Hq, Sq] for this call's Sq, or [Hq, total] packed */
    a.lse_sh = d->packed_q ? t->total_q : t->q_len;
    a.lse_sb = (long long)d->hq * t->q_len;
    if (p->ws_bytes)
        rt_attn_set_workspace(&p->vp, &a, t->workspace ? t->workspace : (void *)(uintptr_t)p->ws);
    kf_attn_tmaps tm;   /* impl wgmma_tma: its second argument, encoded for this call's pointers and strides */
    void *args[] = {&a, &tm};
    if (p->geo.tma) {
        core_err te;
        int st = rt_attn_tmaps(&p->geo, &a, -1, &tm, &te);   /* no cu_seqlens_k in kf_attn_tensors */
        if (st)
            return rt_plan_err(p, (kf_status)st, "%s", te.msg);
    }
    for (int i = 0; i < p->n_launch; i++) {
        unsigned grid[3];
        core_err le;
        if (rt_attn_grid_geom(&p->geo, &a, i, grid))
            return rt_plan_err(p, KF_ERR_ARG, "no launch grid for kernel %d of '%s' (batch %d, q_len %d)", i,
                           p->variant, t->batch, t->q_len);
        if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
            continue;
        if (rt_module_launch(&p->mod, i, grid, args, (CUstream)stream, &le))
            return rt_plan_err(p, le.st, "%s", le.msg);
    }
    return KF_OK;
}
