/* tuner/combine_run.c: the tuner's split-KV combine runner (see combine_run.h) */
#include "tuner/combine_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/attn_params.h"
#include "runtime/attn_launch.h"
#include "runtime/family.h"
#include "tuner/ref_attn.h"

#define SPLITS 4

struct tune_combine {
    check_dtype dt;
    int b, sq, hq, dv;
    int time_ready;
    CUdeviceptr ws, o, lse;   /* the timing case */
    kf_attn_params p;
};

/* Random partials of c into wo/wl (and their fp64 copies, empty splits 0): see tune_combine_case. */
static void fill(const tune_combine_case *c, uint64_t seed, float *wo, float *wl, double *dwo, double *dwl)
{
    long long n = (long long)c->b * c->sq * c->hq;
    int S = c->splits, dv = c->dv;
    check_rng g;
    check_rng_seed(&g, seed);
    for (long long row = 0; row < n; row++) {
        int all_empty = (row % 7) == 3;
        for (int s = 0; s < S; s++) {
            long long w = (long long)s * n + row;
            int empty = all_empty || (check_rng_next(&g) % 5) == 0;
            wl[w] = empty ? -INFINITY : (float)(4.0 * check_rng_uniform(&g));
            if (dwl)
                dwl[w] = wl[w];
            for (int k = 0; k < dv; k++) {
                float x = (float)check_rng_uniform(&g);
                wo[w * dv + k] = empty ? NAN : x;      /* an empty split's O must never be read */
                if (dwo)
                    dwo[w * dv + k] = empty ? 0.0 : x;
            }
        }
    }
}

/* Device partials (uploaded), o and lse of case c; p's strides, sizes and workspace pointers. */
static int dev_make(tune_ctx *ctx, const tune_combine_case *c, const tune_compiled *v, const float *wo,
                    const float *wl, CUdeviceptr *ws, CUdeviceptr *o, CUdeviceptr *lse, kf_attn_params *p)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    long long n = (long long)c->b * c->sq * c->hq;
    size_t es = check_dtype_size(c->dtype), wob = sizeof(float) * (size_t)(c->splits * n * c->dv);
    int r = tune_ctx_upload(ctx, ws, wo, wob, sizeof(float) * (size_t)(c->splits * n));
    if (!r)
        r = cu->MemcpyHtoD(*ws + wob, wl, sizeof(float) * (size_t)(c->splits * n));
    if (!r)
        r = tune_ctx_upload(ctx, o, NULL, 0, (size_t)(n * c->dv) * es);
    if (!r)
        r = tune_ctx_upload(ctx, lse, NULL, 0, (size_t)n * 4);
    if (!r)
        r = cu->MemsetD8(*o, 0xFF, (size_t)(n * c->dv) * es);
    if (!r)
        r = cu->MemsetD32(*lse, CHECK_POISON32, (size_t)n);
    if (r)
        return tune_ctx_fail(ctx, r, "attn_combine: device buffers (cuMemAlloc/cuMemcpyHtoD/cuMemset)");
    memset(p, 0, sizeof *p);
    p->o = (void *)(uintptr_t)*o;
    p->lse = (float *)(uintptr_t)*lse;
    p->o_ss = (long long)c->hq * c->dv;
    p->o_sh = c->dv;
    p->o_sb = (long long)c->sq * p->o_ss;
    p->lse_sh = c->sq;
    p->lse_sb = (long long)c->hq * c->sq;
    p->b = c->b;
    p->sq = c->sq;
    p->hq = c->hq;
    p->hkv = 1;
    p->splits = c->splits;
    p->ws_rows = c->b * c->sq;
    rt_attn_set_workspace(&v->vp, p, (void *)(uintptr_t)*ws);   /* the partials laid out as attn_decode's */
    return 0;
}

/* Enqueues the family's kernels for p through the family table. */
static int launch(tune_ctx *ctx, const tune_compiled *v, const rt_module *m, kf_attn_params *p, CUstream stream)
{
    const rt_family *f = &rt_families[RT_FAM_ATTN_COMBINE];
    rt_launch l;
    void *args[] = {p};
    if (f->launch(&v->vp, p, &l) || l.kernels > m->n) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "%s: its binary has %d kernels", v->key ? v->key : v->family, m->n);
        return -1;
    }
    for (int i = 0; i < l.n; i++) {
        unsigned grid[3];
        if (f->grid(&v->vp, p, i, grid)) {
            return tune_ctx_seterr(ctx, KF_ERR_ARG, "no grid for kernel %d of %s (b %d sq %d hq %d splits %d)", i,
                                   v->key ? v->key : v->family, p->b, p->sq, p->hq, p->splits);
        }
        if (rt_module_launch(m, i, grid, args, stream, tune_ctx_err(ctx)))
            return -1;
    }
    return 0;
}

int tune_attn_check_combine(tune_ctx *ctx, const tune_compiled *v, const tune_combine_case *c,
                            tune_attn_result *r)
{
    memset(r, 0, sizeof *r);
    r->seed = c->seed ? c->seed : check_fresh_seed();
    r->tol = check_tol(c->dtype);
    snprintf(r->ref, sizeof r->ref, "cpu-fp64");
    if (!ctx || tune_broken(ctx))
        return tune_ctx_seterr(ctx, KF_ERR_CUDA, "the CUDA context is unusable after an earlier error");
    const rt_cu *cu = tune_ctx_cu(ctx);
    long long n = (long long)c->b * c->sq * c->hq;
    int S = c->splits, dv = c->dv;
    size_t es = check_dtype_size(c->dtype);
    float *wo = malloc(sizeof(float) * (size_t)(S * n * dv));
    float *wl = malloc(sizeof(float) * (size_t)(S * n));
    double *dwo = malloc(sizeof(double) * (size_t)(S * n * dv));
    double *dwl = malloc(sizeof(double) * (size_t)(S * n));
    double *ro = malloc(sizeof(double) * (size_t)(n * dv));
    double *rl = malloc(sizeof(double) * (size_t)n);
    void *o = malloc((size_t)(n * dv) * es);
    float *lse = malloc(sizeof(float) * (size_t)n), *lse_d = malloc(sizeof(float) * (size_t)n);
    float *sinks = c->sinks ? malloc(sizeof(float) * (size_t)c->hq) : NULL;   /* issue 21: one more denominator term */
    CUdeviceptr dws = 0, dout = 0, dlse = 0, dsinks = 0;
    rt_module own = {0};
    const rt_module *m;
    kf_attn_params p;
    int rc = -1;
    if (!wo || !wl || !dwo || !dwl || !ro || !rl || !o || !lse || !lse_d || (c->sinks && !sinks)) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
        goto out;
    }
    fill(c, r->seed, wo, wl, dwo, dwl);
    for (int h = 0; sinks && h < c->hq; h++)
        sinks[h] = (float)tune_attn_sink(h);
    if (sinks)
        ref_attn_combine_sinks(S, n, dv, c->hq, sinks, dwo, dwl, ro, rl);
    else
        ref_attn_combine(S, n, dv, dwo, dwl, ro, rl);
    if (dev_make(ctx, c, v, wo, wl, &dws, &dout, &dlse, &p))
        goto out;
    if (sinks) {
        int ur = tune_ctx_upload(ctx, &dsinks, sinks, sizeof(float) * (size_t)c->hq, 16);
        if (ur) {
            tune_ctx_fail(ctx, ur, "attn_combine: sink logits (cuMemAlloc/cuMemcpyHtoD)");
            goto out;
        }
        p.sinks = (const float *)(uintptr_t)dsinks;
    }
    if (!(m = tune_ctx_module(ctx, v, 0, &own)) || launch(ctx, v, m, &p, NULL))
        goto out;
    CUresult cr = cu->CtxSynchronize();
    if (cr) {
        tune_ctx_fail(ctx, cr, "attn_combine kernel failed");
        goto out;
    }
    r->ran = 1;
    if (cu->MemcpyDtoH(o, dout, (size_t)(n * dv) * es) || cu->MemcpyDtoH(lse_d, dlse, (size_t)n * 4)) {
        tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuMemcpyDtoH failed");
        goto out;
    }
    for (int b = 0; b < c->b; b++)
        for (int i = 0; i < c->sq; i++)
            for (int h = 0; h < c->hq; h++)
                lse[((long long)b * c->sq + i) * c->hq + h] = lse_d[((long long)b * c->hq + h) * c->sq + i];
    check_compare(c->dtype, o, ro, (size_t)(n * dv), &r->o);
    check_compare_lse(lse, rl, (size_t)n, &r->lse);
    r->pass = check_pass(&r->o, r->tol) && check_lse_pass(&r->lse, CHECK_LSE_TOL);
    char a[200], b2[200];
    check_format(a, sizeof a, &r->o, r->tol);
    check_format_lse(b2, sizeof b2, &r->lse, CHECK_LSE_TOL);
    snprintf(r->msg, sizeof r->msg, "o %s; lse %s; seed %llu", a, b2, (unsigned long long)r->seed);
    rc = 0;
out:
    if (own.mod)
        rt_module_unload(&own);
    CUdeviceptr all[] = {dws, dout, dlse, dsinks};
    for (int i = 0; i < 4; i++)
        if (all[i])
            cu->MemFree(all[i]);
    free(sinks);
    free(wo);
    free(wl);
    free(dwo);
    free(dwl);
    free(ro);
    free(rl);
    free(o);
    free(lse);
    free(lse_d);
    return rc;
}

/* ---- the runner ------------------------------------------------------------------ */

tune_combine *tune_combine_new(const gen_kvset *shape, core_err *e)
{
    const char *dt = gen_kv_str(shape, "dtype");
    tune_combine k = {0};
    k.dt = dt && !strcmp(dt, "fp16") ? CHECK_FP16 : CHECK_BF16;
    k.b = (int)gen_kv_int(shape, "b", 0), k.sq = (int)gen_kv_int(shape, "sq", 0);
    k.hq = (int)gen_kv_int(shape, "hq", 0), k.dv = (int)gen_kv_int(shape, "dv", 0);
    if (!dt || k.b < 1 || k.sq < 1 || k.hq < 1 || k.dv < 1) {
        core_err_set(e, KF_ERR_ARG, "an attn_combine shape needs dtype, b, sq, hq, dv >= 1");
        return NULL;
    }
    tune_combine *out = malloc(sizeof *out);
    if (!out) {
        core_err_set(e, KF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    *out = k;
    return out;
}

void tune_combine_free(tune_combine *k, tune_ctx *ctx)
{
    if (!k)
        return;
    const rt_cu *cu = tune_ctx_cu(ctx);
    CUdeviceptr all[] = {k->ws, k->o, k->lse};
    for (int i = 0; i < 3 && cu; i++)
        if (all[i])
            cu->MemFree(all[i]);
    free(k);
}

static tune_combine_case case_of(const tune_combine *k)
{
    tune_combine_case c = {k->dt, k->b, k->sq, k->hq, k->dv, SPLITS, 0};
    return c;
}

int tune_combine_gate(tune_ctx *ctx, tune_combine *k, const tune_compiled *v, int *pass, double *rel_err,
                      char *verdict, size_t verdictn)
{
    tune_combine_case c = case_of(k);
    tune_attn_result r;
    int rc = tune_attn_check_combine(ctx, v, &c, &r);
    *pass = !rc && r.pass;
    *rel_err = r.o.nonfinite || r.o.unwritten ? NAN : r.o.rel_err;
    if (rc) {                        /* what failed, named by the case as a verdict is; no verdict */
        tune_ctx_seterr(ctx, tune_ctx_status(ctx), "%d splits: %s", SPLITS, tune_ctx_errmsg(ctx));
        *verdict = '\0';
    } else {
        snprintf(verdict, verdictn, "%d splits: %s", SPLITS, r.msg);
    }
    tune_attn_result_free(&r);
    return rc ? -1 : 0;
}

typedef struct time_arg {
    const tune_compiled *v;
    const rt_module *m;
    kf_attn_params *p;
} time_arg;

static int bind(tune_ctx *ctx, void *arg, const rt_module *m)
{
    ((time_arg *)arg)->m = m;
    return 0;
}

static int enqueue(tune_ctx *ctx, void *arg, int set)
{
    time_arg *a = arg;
    return launch(ctx, a->v, a->m, a->p, tune_ctx_stream(ctx));
}

int tune_combine_time(tune_ctx *ctx, tune_combine *k, const tune_compiled *v, int samples, tune_timing *t)
{
    memset(t, 0, sizeof *t);
    double tm;
    tune_ctx_phase(ctx, TUNE_PH_TIME_CALL, &tm);
    tune_combine_case c = case_of(k);
    if (!k->time_ready) {
        long long n = (long long)c.b * c.sq * c.hq;
        float *wo = malloc(sizeof(float) * (size_t)(SPLITS * n * c.dv)), *wl = malloc(sizeof(float) * (size_t)(SPLITS * n));
        int bad = !wo || !wl;
        if (bad)
            tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
        else
            fill(&c, 0x636f6d62ull, wo, wl, NULL, NULL);
        bad = bad || dev_make(ctx, &c, v, wo, wl, &k->ws, &k->o, &k->lse, &k->p);
        free(wo);
        free(wl);
        if (bad)
            return -1;
        k->time_ready = 1;
    }
    tune_ctx_phase(ctx, TUNE_PH_TIME_FILL, &tm);
    time_arg a = {v, NULL, &k->p};
    return tune_ctx_time_variant(ctx, v, bind, enqueue, &a, 1, samples, t, &tm);
}
