/* runtime/plan_parts.c: split-score decode plans (kf_parts_supported, kf_parts_plan) and graph-safe runs (kf_parts_run) */
#include "runtime/family.h"
#include "runtime/parts_launch.h"
#include "runtime/parts_tmap.h"
#include "runtime/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static kf_status parts_select(const void *desc, const rt_devinfo *dev, const rt_table *t, rt_default_fn dflt,
                              void *arg, rt_choice *out, core_err *e)
{
    return rt_parts_select(desc, dev, t, dflt, arg, out, e);
}

static kf_status parts_finish(kf_plan *p, const void *desc, const rt_choice *ch, core_err *e)
{
    (void)ch;
    kf_status st = rt_parts_check(desc, &p->ctx->dev, &p->d.parts, e);
    if (st)
        return st;
    rt_parts_base_params(&p->d.parts, &p->vp, &p->base.parts);
    rt_launch l;
    p->n_launch = rt_parts_launch(&p->vp, &p->base.parts, &l) ? -1 : l.n;
    if (p->n_launch < 1 || l.kernels > p->mod.n) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "binary of '%s' has %d kernels, the variant needs %d", p->variant, p->mod.n, l.kernels);
    }
    return KF_OK;
}

static const rt_plan_ops parts_ops = {RT_PLAN_PARTS, parts_select, parts_finish};

kf_status kf_parts_supported(kf_ctx *c, const kf_parts_desc *d) { return rt_plan_supported(c, &parts_ops, d); }

kf_status kf_parts_plan(kf_ctx *c, const kf_parts_desc *d, kf_plan **out) { return rt_plan_new(c, &parts_ops, d, out); }

kf_status kf_parts_run(kf_plan *p, const kf_parts_tensors *t, void *stream)
{
    if (!p)
        return KF_ERR_ARG;
    if (p->family != RT_PLAN_PARTS)
        return rt_plan_err(p, KF_ERR_ARG, "the plan '%s' is not a split-score plan: run it with kf_attn_run or kf_kda_run",
                           p->variant);
    kf_parts_params a;
    core_err e;
    kf_status st = rt_parts_bind(&p->d.parts, &p->base.parts, &p->vp, p->ws_bytes, (void *)(uintptr_t)p->ws, t, &a, &e);
    if (st)
        return rt_plan_err(p, st, "%s", e.msg);
    if (t->batch == 0)
        return KF_OK;
    unsigned grid[3];
    kf_parts_tmaps tm;   /* impl wgmma_tma: its second argument, encoded for this call's pointers and strides */
    void *args[2];
    if ((st = rt_parts_args(&p->vp, &a, &tm, args, &e)))
        return rt_plan_err(p, st, "%s", e.msg);
    if (rt_parts_grid(&p->vp, &a, 0, grid))
        return rt_plan_err(p, KF_ERR_ARG, "no launch grid for '%s' (batch %d, q_len %d)", p->variant, t->batch, t->q_len);
    if (rt_module_launch(&p->mod, 0, grid, args, (CUstream)stream, &e))
        return rt_plan_err(p, e.st, "%s", e.msg);
    for (int l = 0; a.splits > 1 && l < p->d.parts.d.layers; l++) {
        kf_attn_params c;
        rt_parts_combine_params(&a, l, &c);
        void *cargs[] = {&c};
        if (rt_parts_grid(&p->vp, &a, 1, grid))
            return rt_plan_err(p, KF_ERR_ARG, "no combine grid for '%s' (batch %d)", p->variant, t->batch);
        if (rt_module_launch(&p->mod, 1, grid, cargs, (CUstream)stream, &e))
            return rt_plan_err(p, e.st, "%s", e.msg);
    }
    return KF_OK;
}
