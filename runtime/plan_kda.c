/* runtime/plan_kda.c: KDA plans (kf_kda_supported, kf_kda_plan) and graph-safe runs (kf_kda_run) */
#include "runtime/family.h"
#include "runtime/kda_launch.h"
#include "runtime/plan.h"
#include "runtime/shape.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static kf_status kda_select(const void *desc, const rt_devinfo *dev, const rt_table *t, rt_default_fn dflt,
                            void *arg, rt_choice *out, core_err *e)
{
    return rt_kda_select(desc, dev, t, dflt, arg, out, e);
}

static kf_status kda_finish(kf_plan *p, const void *desc, const rt_choice *ch, core_err *e)
{
    (void)ch;
    const kf_kda_desc *d = desc;
    p->d.kda = *d;
    rt_kda_base_params(d, &p->base.kda);
    rt_launch l;
    p->n_launch = rt_kda_launch(&p->vp, &p->base.kda, &l) ? -1 : l.n;
    if (p->n_launch < 1 || p->n_launch > p->mod.n) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "binary of '%s' has %d kernels, the variant launches %d", p->variant, p->mod.n,
                            p->n_launch);
    }
    return KF_OK;
}

static const rt_plan_ops kda_ops = {RT_PLAN_KDA, kda_select, kda_finish};

kf_status kf_kda_supported(kf_ctx *c, const kf_kda_desc *d) { return rt_plan_supported(c, &kda_ops, d); }

kf_status kf_kda_plan(kf_ctx *c, const kf_kda_desc *d, kf_plan **out) { return rt_plan_new(c, &kda_ops, d, out); }

/* ---- one call ------------------------------------------------------------------ */

/* NULL when required, set when refused, alignment (align bytes; misaligned 16-byte rows are
 * KF_ERR_UNSUPPORTED, a pointer not aligned to its own element KF_ERR_ARG). */
static kf_status check_ptr(const char *name, const void *ptr, int wanted, const char *why_not, unsigned align,
                           core_err *e)
{
    if (!ptr && wanted)
        return core_err_set(e, KF_ERR_ARG, "tensors.%s is NULL", name);
    if (ptr && !wanted)
        return core_err_set(e, KF_ERR_ARG, "tensors.%s = %p is set but %s", name, ptr, why_not);
    if (ptr && ((uintptr_t)ptr & (align - 1)))
        return core_err_set(e, align == 16 ? KF_ERR_UNSUPPORTED : KF_ERR_ARG, "tensors.%s = %p is not %u-byte aligned",
                            name, ptr, align);
    return KF_OK;
}

/* A sequence stride of 0 in the description: contiguous for this call's tokens per sequence; -1 when
 * that does not fit in 63 bits. */
static long long seq_stride(long long declared, long long token_stride, int t)
{
    long long s;
    return declared ? declared : rt_mul_ll(token_stride, t, &s) ? -1 : s;
}

kf_status rt_kda_bind(const kf_kda_desc *d, const kf_kda_params *base, const gen_kvset *vp, size_t ws_bytes,
                      void *plan_ws, const kf_kda_tensors *t, kf_kda_params *out, core_err *e)
{
    kf_status st;
    if (!t)
        return core_err_set(e, KF_ERR_ARG, "tensors is NULL");
    if (t->n < 0 || t->n > d->max_seqs)
        return core_err_set(e, KF_ERR_ARG, "tensors.n = %d is outside 0..%d (the plan's max_seqs)", t->n, d->max_seqs);
    if (t->total < 0 || t->total > d->max_tokens)
        return core_err_set(e, KF_ERR_ARG, "tensors.total = %d is outside 0..%d (the plan's max_tokens)", t->total,
                            d->max_tokens);
    if (t->cu_seqlens && t->cu_seqlens64)
        return core_err_set(e, KF_ERR_ARG, "tensors.cu_seqlens and tensors.cu_seqlens64 are both set (at most one)");
    const void *cu = t->cu_seqlens ? (const void *)t->cu_seqlens : (const void *)t->cu_seqlens64;
    if (!cu && t->n > 0 && t->total % t->n)
        return core_err_set(e, KF_ERR_ARG,
                            "tensors.total = %d is not a multiple of tensors.n = %d (padded sequences have total / n tokens "
                            "each; pass cu_seqlens for packed ones)", t->total, t->n);
    const int sig = d->gate == KF_KDA_GATE_SIGMOID;
    if ((st = check_ptr("q", t->q, 1, "", 16, e)) || (st = check_ptr("k", t->k, 1, "", 16, e)) ||
        (st = check_ptr("v", t->v, 1, "", 16, e)) || (st = check_ptr("g", t->g, 1, "", 16, e)) ||
        (st = check_ptr("beta", t->beta, 1, "", 4, e)) || (st = check_ptr("o", t->o, 1, "", 16, e)) ||
        (st = check_ptr("a_log", t->a_log, sig, "the plan's gate is KF_KDA_GATE_LOG", 4, e)) ||
        (st = check_ptr("dt_bias", t->dt_bias, t->dt_bias && sig, "the plan's gate is KF_KDA_GATE_LOG", 4, e)) ||
        (st = check_ptr("initial_state", t->initial_state, d->has_initial_state, "the plan has has_initial_state = 0",
                        16, e)) ||
        (st = check_ptr("final_state", t->final_state, d->wants_final_state, "the plan has wants_final_state = 0", 16, e)) ||
        (st = check_ptr("cu_seqlens", t->cu_seqlens, t->cu_seqlens != NULL, "", 4, e)) ||
        (st = check_ptr("cu_seqlens64", t->cu_seqlens64, t->cu_seqlens64 != NULL, "", 8, e)))
        return st;
    if (t->workspace && ((uintptr_t)t->workspace & 15u))
        return core_err_set(e, KF_ERR_UNSUPPORTED, "tensors.workspace = %p is not 16-byte aligned", t->workspace);

    kf_kda_params a = *base;
    a.q = t->q, a.k = t->k, a.v = t->v, a.o = t->o;
    a.g = t->g, a.beta = t->beta;
    a.a_log = sig ? t->a_log : NULL;
    a.dt_bias = sig ? t->dt_bias : NULL;
    a.h0 = t->initial_state;
    a.ht = t->final_state;
    a.cu_seqlens = cu;
    a.cu64 = t->cu_seqlens64 != NULL;
    a.nseq = t->n;
    a.total = t->total;
    a.t = 0;
    if (!cu && t->n > 0) {
        a.t = t->total / t->n;
        a.q_sb = seq_stride(d->q_strides[0], a.q_st, a.t);
        a.k_sb = seq_stride(d->k_strides[0], a.k_st, a.t);
        a.v_sb = seq_stride(d->v_strides[0], a.v_st, a.t);
        a.o_sb = seq_stride(d->o_strides[0], a.o_st, a.t);
        a.g_sb = seq_stride(d->g_strides[0], a.g_st, a.t);
        a.b_sb = seq_stride(d->beta_strides[0], a.b_st, a.t);
        if ((a.q_sb | a.k_sb | a.v_sb | a.o_sb | a.g_sb | a.b_sb) < 0)
            return core_err_set(e, KF_ERR_ARG, "tensors (n %d, total %d): a sequence stride of %d tokens does not fit "
                                "in 63 bits", t->n, t->total, a.t);
    }
    a.ws = ws_bytes ? (t->workspace ? t->workspace : plan_ws) : NULL;
    *out = a;
    if (t->n == 0)
        return KF_OK;  /* nothing to launch */
    if (rt_kda_check(vp, &a, e))
        return core_err_set(e, KF_ERR_ARG, "tensors (n %d, total %d): %s", t->n, t->total, e->msg);
    return KF_OK;
}

kf_status kf_kda_run(kf_plan *p, const kf_kda_tensors *t, void *stream)
{
    if (!p)
        return KF_ERR_ARG;
    if (p->family != RT_PLAN_KDA)
        return rt_plan_err(p, KF_ERR_ARG, "the plan is an attention plan '%s': run it with kf_attn_run", p->variant);
    kf_kda_params a;
    core_err e;
    kf_status st = rt_kda_bind(&p->d.kda, &p->base.kda, &p->vp, p->ws_bytes, (void *)(uintptr_t)p->ws, t, &a, &e);
    if (st)
        return rt_plan_err(p, st, "%s", e.msg);
    if (t->n == 0)
        return KF_OK;
    void *args[] = {&a};
    for (int i = 0; i < p->n_launch; i++) {
        unsigned grid[3];
        if (rt_kda_grid(&p->vp, &a, i, grid))
            return rt_plan_err(p, KF_ERR_ARG, "no launch grid for kernel %d of '%s' (n %d, total %d)", i, p->variant,
                               t->n, t->total);
        if (rt_module_launch(&p->mod, i, grid, args, (CUstream)stream, &e))
            return rt_plan_err(p, e.st, "%s", e.msg);
    }
    return KF_OK;
}
