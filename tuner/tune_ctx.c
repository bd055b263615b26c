/* tuner/tune_ctx.c: the tuner's GPU session, generic over families: context, stream, modules, phase accounting, timing, upload caches */
#include "tuner/tune_ctx.h"
#include "tuner/tune_ctx_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/check.h"

static int sticky(CUresult r)
{
    /* errors after which the context cannot be used again */
    return r == 700 || r == 702 || r == 714 || r == 715 || r == 716 || r == 717 || r == 718 ||
           r == 719 || r == 720;
}

int tune_compiled_from_job(tune_compiled *v, const gen_job *j)
{
    memset(v, 0, sizeof *v);
    if (!j || j->failed || !j->bin.image)
        return -1;
    v->family = gen_tmpl_family(j->tmpl);
    v->vp = j->fixed;
    gen_kv_merge(&v->vp, &j->params);
    gen_kv_set_str(&v->vp, "family", v->family);
    v->image = j->bin.image;
    v->kernels = j->kernels;
    v->n_kernels = j->n_kernels;
    v->key = j->variant_key;
    return 0;
}

void tune_timing_free(tune_timing *t)
{
    if (!t)
        return;
    free(t->samples_ms);
    t->samples_ms = NULL;
}

tune_ctx *tune_open(int ordinal, core_err *e)
{
    const rt_cu *cu = rt_cuda(e);
    if (!cu)
        return NULL;
    tune_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        core_err_set(e, KF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->cu = cu;
    c->ordinal = ordinal;
    if (rt_device_info(ordinal, &c->info, e) || rt_module_context(ordinal, e)) {
        free(c);
        return NULL;
    }
    c->flush_bytes = (size_t)(c->info.l2 > 0 ? c->info.l2 : 64ll << 20) * 2;
    CUresult r = cu->MemAlloc(&c->flush, c->flush_bytes);
    if (r) {
        char why[128];
        rt_cuda_errstr(r, why, sizeof why);
        core_err_set(e, KF_ERR_CUDA, "cannot allocate the L2 flush buffer (%zu bytes): %s", c->flush_bytes, why);
        free(c);
        return NULL;
    }
    c->timing = TUNE_TIMING_SUSTAINED;
    c->nvml = rt_nvml_open(c->info.uuid);
    return c;
}

void tune_ctx_time_cache_drop(tune_ctx *c)
{
    for (int i = 0; i < 6; i++)
        if (c->tc_in[i])
            c->cu->MemFree(c->tc_in[i]), c->tc_in[i] = 0;
    for (int s = 1; s < c->tc_sets; s++)
        for (int i = 0; i < 3; i++)
            if (c->tc_set[s][i])
                c->cu->MemFree(c->tc_set[s][i]), c->tc_set[s][i] = 0;
    c->tc_sets = 0;
    free(c->tc_kv), free(c->tc_q);
    c->tc_kv = c->tc_q = NULL;
    c->tc_valid = 0;
}

void tune_ctx_gate_cache_drop(tune_ctx *c)
{
    free(c->gc_in.q), free(c->gc_in.k), free(c->gc_in.v);
    free(c->gc_ref_o), free(c->gc_ref_lse);
    free(c->gc_kv), free(c->gc_q);
    memset(&c->gc_in, 0, sizeof c->gc_in);
    c->gc_ref_o = c->gc_ref_lse = NULL;
    c->gc_kv = c->gc_q = NULL;
    c->gc_valid = 0;
}

void tune_hold(tune_ctx *c, int on)
{
    if (!c)
        return;
    for (int i = 0; i < 2; i++) {
        rt_module_unload(&c->held[i].m);
        c->held[i].image = NULL;
    }
    c->hold = on;
}

void tune_set_phases(tune_ctx *c, tune_phases *ph)
{
    if (c)
        c->ph = ph;
}

void tune_close(tune_ctx *c)
{
    if (!c)
        return;
    tune_hold(c, 0);
    tune_ctx_time_cache_drop(c);
    tune_ctx_gate_cache_drop(c);
    if (c->flush)
        c->cu->MemFree(c->flush);
    rt_nvml_close(c->nvml);
    free(c);
}

int tune_timing_parse(const char *s)
{
    if (s && !strcmp(s, "sustained"))
        return TUNE_TIMING_SUSTAINED;
    if (s && !strcmp(s, "burst"))
        return TUNE_TIMING_BURST;
    return -1;
}

const char *tune_timing_str(int mode) { return mode == TUNE_TIMING_BURST ? "burst" : "sustained"; }

void tune_set_timing(tune_ctx *c, int mode)
{
    if (c)
        c->timing = mode == TUNE_TIMING_BURST ? TUNE_TIMING_BURST : TUNE_TIMING_SUSTAINED;
}

int tune_timing_mode(const tune_ctx *c) { return c ? c->timing : TUNE_TIMING_SUSTAINED; }

rt_nvml_dev *tune_nvml(const tune_ctx *c) { return c ? c->nvml : NULL; }

void tune_set_rewarm(tune_ctx *c, double ms, int max_calls)
{
    if (c) {
        c->rewarm_ms = ms > 0 ? (ms < TUNE_WARM_MAX_MS ? ms : TUNE_WARM_MAX_MS) : 0;
        c->rewarm_calls = max_calls > 0 ? max_calls : 0;
    }
}

void tune_set_extra(tune_ctx *c, int every)
{
    if (c)
        c->extra_every = every > 0 ? every : 0;
}

int tune_broken(const tune_ctx *c) { return c ? c->broken : 1; }

const char *tune_ctx_errmsg(const tune_ctx *c)
{
    return c ? c->err.msg : "no tuner session (no CUDA context)";
}

kf_status tune_ctx_status(const tune_ctx *c) { return c ? c->err.st : KF_ERR_CUDA; }

core_err *tune_ctx_err(tune_ctx *c) { return c ? &c->err : NULL; }

int tune_ctx_seterr(tune_ctx *c, kf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_err_vset(tune_ctx_err(c), st, fmt, ap);
    va_end(ap);
    return -1;
}

int tune_ctx_load(tune_ctx *ctx, const tune_compiled *v, rt_module *m)
{
    rt_kernel_desc k[RT_MODULE_MAX_KERNELS];
    if (v->n_kernels < 1 || v->n_kernels > RT_MODULE_MAX_KERNELS) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "variant %s has %d kernels", v->key ? v->key : v->family, v->n_kernels);
        return -1;
    }
    for (int i = 0; i < v->n_kernels; i++) {
        snprintf(k[i].name, sizeof k[i].name, "%s", v->kernels[i].name);
        k[i].threads = v->kernels[i].threads;
        k[i].smem = v->kernels[i].smem;
        k[i].pdl = v->kernels[i].pdl;
    }
    if (rt_module_load(m, v->image, k, v->n_kernels, &ctx->err)) {
        tune_ctx_seterr(ctx, ctx->err.st, "%s: %.400s", v->key ? v->key : v->family, ctx->err.msg);
        return -1;
    }
    return 0;
}

/* The module of v: the one held in `slot` when tune_hold keeps v's image, else loaded into
 * *own (then held in `slot` instead when holding; *own stays empty). NULL on error. */
static const rt_module *module_of(tune_ctx *ctx, const tune_compiled *v, int slot, rt_module *own)
{
    struct held *h = &ctx->held[slot];
    if (ctx->hold && h->m.mod && h->image == v->image)
        return &h->m;
    if (tune_ctx_load(ctx, v, own))
        return NULL;
    if (!ctx->hold)
        return own;
    rt_module_unload(&h->m);
    h->m = *own;
    h->image = v->image;
    memset(own, 0, sizeof *own);
    return &h->m;
}

const rt_cu *tune_ctx_cu(const tune_ctx *ctx) { return ctx ? ctx->cu : NULL; }

const rt_module *tune_ctx_module(tune_ctx *ctx, const tune_compiled *v, int slot, rt_module *own)
{
    if (slot < 0 || slot > 1) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "tune_ctx_module: slot %d is not 0 or 1", slot);
        return NULL;
    }
    return module_of(ctx, v, slot, own);
}

int tune_ctx_fail(tune_ctx *ctx, int cuda_result, const char *what)
{
    char e[128];
    rt_cuda_errstr((CUresult)cuda_result, e, sizeof e);
    if (sticky((CUresult)cuda_result))
        ctx->broken = 1;
    tune_ctx_seterr(ctx, KF_ERR_CUDA, "%s: %s%s", what, e,
                    sticky((CUresult)cuda_result) ? " (context unusable from now on)" : "");
    return -1;
}

void tune_ctx_phase(tune_ctx *ctx, int what, double *t)
{
    if (!ctx->ph) {
        *t = tune_now();
        return;
    }
    double *acc[] = {&ctx->ph->gate_fill, &ctx->ph->gate_ref, &ctx->ph->gate_run,
                     &ctx->ph->time_fill, &ctx->ph->time_load, &ctx->ph->time_run};
    if (what == TUNE_PH_GATE_CALL || what == TUNE_PH_TIME_CALL) {
        if (what == TUNE_PH_GATE_CALL)
            ctx->ph->gates++;
        else
            ctx->ph->timings++;
        *t = tune_now();
        return;
    }
    tune_lap(what >= 0 && what < 6 ? acc[what] : NULL, t);
}

int tune_ctx_run(tune_ctx *ctx, tune_enqueue_fn enqueue, void *arg, const char *what)
{
    if (enqueue(ctx, arg, 0))
        return -1;
    CUresult r = ctx->cu->CtxSynchronize();
    return r ? cu_fail(ctx, r, what) : 0;
}

int tune_ctx_upload(tune_ctx *ctx, CUdeviceptr *p, const void *src, size_t bytes, size_t pad)
{
    CUresult r = ctx->cu->MemAlloc(p, bytes + pad);
    if (!r && bytes)
        r = ctx->cu->MemcpyHtoD(*p, src, bytes);
    return (int)r;
}

int tune_ctx_alloc(tune_ctx *ctx, CUdeviceptr *p, size_t bytes)
{
    CU_TRY(ctx->cu->MemAlloc(p, bytes ? bytes : 16), "cuMemAlloc");
    return 0;
}

int tune_ctx_time_variant(tune_ctx *ctx, const tune_compiled *v, tune_bind_fn bind, tune_enqueue_fn enqueue,
                          void *arg, int sets, int samples, tune_timing *t, double *tm)
{
    rt_module own;
    memset(&own, 0, sizeof own);
    const rt_module *m = tune_ctx_module(ctx, v, 0, &own);
    int rc = -1;
    if (m && !bind(ctx, arg, m)) {
        tune_ctx_phase(ctx, TUNE_PH_TIME_LOAD, tm);
        rc = tune_ctx_time(ctx, enqueue, arg, sets, samples, t);
    }
    tune_ctx_phase(ctx, TUNE_PH_TIME_RUN, tm);
    if (own.mod)
        rt_module_unload(&own);
    return rc;
}

/* t's samples: a copy of ms_in (n of them), then their statistics. */
static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void timing_stats(tune_timing *t, const double *ms_in, int n)
{
    t->samples = n;
    t->samples_ms = malloc(sizeof(double) * (size_t)n);
    if (!t->samples_ms) {
        t->samples = 0;
        return;
    }
    memcpy(t->samples_ms, ms_in, sizeof(double) * (size_t)n);
    tune_timing_stats(t);
}

void tune_timing_stats(tune_timing *t)
{
    int n = t->samples;
    double *ms = n > 0 ? malloc(sizeof *ms * (size_t)n) : NULL;
    if (!ms)
        return;
    memcpy(ms, t->samples_ms, sizeof(double) * (size_t)n);
    qsort(ms, (size_t)n, sizeof *ms, cmp_dbl);
    t->min_ms = ms[0];
    t->median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    t->p10_ms = ms[(n - 1) / 10];
    t->p90_ms = ms[(n - 1) - (n - 1) / 10];
    t->spread = t->median_ms > 0 ? (t->p90_ms - t->p10_ms) / t->median_ms : 0;
    free(ms);
}

/* Events ev[0..n) made; -1 on error (on ctx). */
static int events_make(tune_ctx *ctx, CUevent *ev, int n, int *made)
{
    for (; *made < n; (*made)++)
        if (ctx->cu->EventCreate(&ev[*made], 0)) {
            tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuEventCreate failed");
            return -1;
        }
    return 0;
}

static int elapsed(tune_ctx *ctx, CUevent a, CUevent b, double *ms)
{
    float f = 0;
    if (ctx->cu->EventElapsedTime(&f, a, b)) {
        tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuEventElapsedTime failed");
        return -1;
    }
    *ms = f;
    return 0;
}

/* The old timer: 3 warm-up calls, then each sample one call after an L2 flush. */
static int time_burst(tune_ctx *ctx, tune_enqueue_fn enqueue, void *arg, int samples, tune_timing *t)
{
    CUevent *ev = calloc((size_t)samples * 2, sizeof *ev);
    double *ms = calloc((size_t)samples, sizeof *ms);
    int rc = -1, made = 0;
    tune_sampler smp;
    if (!ev || !ms) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (events_make(ctx, ev, samples * 2, &made))
        goto out;
    for (int w = 0; w < 3; w++)      /* warm-up: clocks, instruction cache, TLB */
        if (enqueue(ctx, arg, 0))
            goto out;
    tune_sampler_start(&smp, ctx->nvml, 2000);
    for (int s = 0; s < samples; s++) {
        ctx->flush_val ^= 0x5A;
        if (ctx->cu->MemsetD8Async(ctx->flush, ctx->flush_val, ctx->flush_bytes, NULL)) {
            tune_sampler_stop(&smp, NULL);
            tune_ctx_seterr(ctx, KF_ERR_CUDA, "cuMemsetD8Async (L2 flush) failed");
            goto out;
        }
        ctx->cu->EventRecord(ev[2 * s], NULL);
        if (enqueue(ctx, arg, 0)) {
            tune_sampler_stop(&smp, NULL);
            goto out;
        }
        ctx->cu->EventRecord(ev[2 * s + 1], NULL);
    }
    CUresult cr = ctx->cu->CtxSynchronize();
    tune_sampler_stop(&smp, &t->clk);
    if (cr) {
        cu_fail(ctx, cr, "timing: kernel failed");
        goto out;
    }
    for (int s = 0; s < samples; s++)
        if (elapsed(ctx, ev[2 * s], ev[2 * s + 1], &ms[s]))
            goto out;
    t->launches = 1, t->sets = 1;
    timing_stats(t, ms, samples);
    rc = 0;
out:
    for (int i = 0; i < made; i++)
        ctx->cu->EventDestroy(ev[i]);
    free(ev);
    free(ms);
    return rc;
}

/* n back-to-back calls from set *next on (advanced), events a and b around them (b may be NULL). */
static int enqueue_n(tune_ctx *ctx, tune_enqueue_fn enqueue, void *arg, int n, int sets, int *next, CUevent a,
                     CUevent b)
{
    if (a)
        ctx->cu->EventRecord(a, NULL);
    int every = ctx->extra_every;
    for (int i = 0; i < n; i++) {
        if (enqueue(ctx, arg, *next))
            return -1;
        *next = (*next + 1) % sets;
        if (every && i % every == every - 1) {      /* the extra call reads the next set, as a real one */
            if (enqueue(ctx, arg, *next))
                return -1;
            *next = (*next + 1) % sets;
        }
    }
    if (b)
        ctx->cu->EventRecord(b, NULL);
    return 0;
}

CUstream tune_ctx_stream(const tune_ctx *ctx) { return ctx ? ctx->stream : NULL; }

/* A graph of n calls (rotating from set *next) captured on a new stream *st; NULL (nothing left
 * behind, *next unchanged) when the driver refuses any step: the caller launches plainly. */
static CUgraphExec capture(tune_ctx *ctx, tune_enqueue_fn enqueue, void *arg, int n, int sets, int *next,
                           CUstream *st)
{
    const rt_cu *cu = ctx->cu;
    *st = NULL;
    if (!cu->StreamCreate || !cu->StreamBeginCapture || !cu->StreamEndCapture || !cu->GraphInstantiate ||
        !cu->GraphLaunch || cu->StreamCreate(st, 1 /* non-blocking */))
        return NULL;
    int at = *next;
    core_err keep = ctx->err;          /* a refused capture is no failure: the caller launches plainly */
    CUgraph g = NULL;
    CUgraphExec e = NULL;
    if (cu->StreamBeginCapture(*st, 2 /* relaxed */) == 0) {
        ctx->stream = *st;
        int bad = enqueue_n(ctx, enqueue, arg, n, sets, &at, NULL, NULL);
        ctx->stream = NULL;
        ctx->err = keep;
        CUresult r = cu->StreamEndCapture(*st, &g);
        if (!bad && !r && g && cu->GraphInstantiate(&e, g, 0))
            e = NULL;
        if (g)
            cu->GraphDestroy(g);
    }
    if (!e) {
        cu->StreamDestroy(*st);
        *st = NULL;
        return NULL;
    }
    *next = at;
    return e;
}

/* Sustained: warm-up to steady state when the GPU was idle, then samples of back-to-back bursts
 * over rotating input sets (see TUNE_TIMING_SUSTAINED); calls shorter than TUNE_GRAPH_BELOW_MS
 * replay a captured graph of the burst (launch cost out of the figure, as an engine's graph). */
static int time_sustained(tune_ctx *ctx, tune_enqueue_fn enqueue, void *arg, int sets, int samples,
                          tune_timing *t)
{
    enum { HIST = 160 };                                /* > TUNE_WARM_MAX_MS / TUNE_WARM_POLL_MS */
    CUevent ev[2 * 1 + 2];
    int made = 0, rc = -1, next = 0;
    CUevent *sev = calloc((size_t)samples + 1, sizeof *sev);
    double *ms = calloc((size_t)samples, sizeof *ms);
    rt_nvml_reading hist[HIST];
    double hist_t[HIST];
    int nh = 0, smade = 0;
    tune_sampler smp;
    /* idle: the gap before this timing, not counting its own first calls below (three calls of a 15 ms kernel
     * made every timing of the 32K prefill shape look idle and run the full warm-up, >= 200 ms, until session 7) */
    const double entry = tune_now();
    const int idle = ctx->last_busy == 0 || entry - ctx->last_busy > TUNE_IDLE_S;
    if (!sev || !ms) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (events_make(ctx, ev, 4, &made) || events_make(ctx, sev, samples + 1, &smade))
        goto out;
    /* a first call of each set (module, TLB), then one timed call for the per-call estimate */
    if (enqueue_n(ctx, enqueue, arg, sets, sets, &next, NULL, NULL) ||
        enqueue_n(ctx, enqueue, arg, 2, sets, &next, ev[0], ev[1]))
        goto out;
    CUresult cr = ctx->cu->CtxSynchronize();
    if (cr) {
        cu_fail(ctx, cr, "timing: kernel failed");
        goto out;
    }
    double one;
    if (elapsed(ctx, ev[0], ev[1], &one))
        goto out;
    one = one / 2 > 1e-4 ? one / 2 : 1e-4;
    /* short calls: a graph of the burst, captured now, replayed by the warm-up and the samples */
    int graph = one < TUNE_GRAPH_BELOW_MS;
    int n = graph ? tune_burst_calls(one, TUNE_BURST_MS, ctx->extra_every, sets, 1) : 0;
    CUstream gs = NULL;
    CUgraphExec ge = graph ? capture(ctx, enqueue, arg, n, sets, &next, &gs) : NULL;
    /* warm-up: chunks of about TUNE_WARM_POLL_MS back to back, NVML read after each, until steady
     * (tune_warm_done); none when the GPU has been busy until just now */
    double t0 = tune_now();
    double done = 0;
    if (ge) {                                           /* once untimed: the graph's upload */
        CUresult lr = ctx->cu->GraphLaunch(ge, gs);
        if (lr || (lr = ctx->cu->StreamSynchronize(gs))) {
            cu_fail(ctx, lr, "timing: cuGraphLaunch");
            goto out_graph;
        }
    }
    /* a re-warm (tune_set_rewarm) of at most its call cap */
    const double capped = ctx->rewarm_calls > 0 ? ctx->rewarm_calls * one : ctx->rewarm_ms;
    double rewarm = ctx->rewarm_ms < capped ? ctx->rewarm_ms : capped;
    while (idle || rewarm > 0) {
        double per = ge ? one * n : one;                /* ms of one replay, or of one call */
        /* a re-warm's chunk no longer than what is left of it: a whole poll chunk (50 ms) would
         * undo the call cap of short calls (it did until session 7: every slot ran >= 50 ms) */
        double chunk_ms = idle || rewarm - done > TUNE_WARM_POLL_MS ? TUNE_WARM_POLL_MS : rewarm - done;
        int m = (int)ceil(chunk_ms / per);
        m = m < 1 ? 1 : m > 100000 ? 100000 : m;
        if (ge) {
            ctx->cu->EventRecord(ev[2], gs);
            for (int i = 0; i < m; i++)
                if ((cr = ctx->cu->GraphLaunch(ge, gs))) {
                    cu_fail(ctx, cr, "timing (warm-up): cuGraphLaunch");
                    goto out_graph;
                }
            ctx->cu->EventRecord(ev[3], gs);
        } else if (enqueue_n(ctx, enqueue, arg, m, sets, &next, ev[2], ev[3])) {
            goto out_graph;
        }
        if ((cr = ctx->cu->CtxSynchronize())) {
            cu_fail(ctx, cr, "timing (warm-up): kernel failed");
            goto out_graph;
        }
        double chunk;
        if (elapsed(ctx, ev[2], ev[3], &chunk))
            goto out_graph;
        if (!ge)
            one = chunk / m > 1e-4 ? chunk / m : 1e-4;
        done = 1e3 * (tune_now() - t0);
        if (nh == HIST) {
            memmove(hist, hist + 1, sizeof hist[0] * (HIST - 1));
            memmove(hist_t, hist_t + 1, sizeof hist_t[0] * (HIST - 1));
            nh--;
        }
        rt_nvml_read(ctx->nvml, &hist[nh]);
        hist_t[nh++] = done;
        if (idle ? tune_warm_done(done, one, hist_t, hist, nh) : done >= rewarm)
            break;
    }
    t->warm_ms = done;
    /* the samples: bursts of about TUNE_BURST_MS, back to back, one event between two */
    if (!ge)
        n = tune_burst_calls(one, TUNE_BURST_MS, ctx->extra_every, sets, 0);
    tune_sampler_start(&smp, ctx->nvml, 2000);
    ctx->cu->EventRecord(sev[0], gs);
    for (int s = 0; s < samples; s++) {
        if (ge) {
            CUresult lr = ctx->cu->GraphLaunch(ge, gs);
            if (lr) {
                tune_sampler_stop(&smp, NULL);
                cu_fail(ctx, lr, "timing: cuGraphLaunch");
                goto out_graph;
            }
            ctx->cu->EventRecord(sev[s + 1], gs);
        } else if (enqueue_n(ctx, enqueue, arg, n, sets, &next, NULL, sev[s + 1])) {
            tune_sampler_stop(&smp, NULL);
            goto out_graph;
        }
    }
    cr = ctx->cu->CtxSynchronize();
    tune_sampler_stop(&smp, &t->clk);
    ctx->last_busy = tune_now();
    if (cr) {
        cu_fail(ctx, cr, "timing: kernel failed");
        goto out_graph;
    }
    for (int s = 0; s < samples; s++) {
        if (elapsed(ctx, sev[s], sev[s + 1], &ms[s]))
            goto out_graph;
        ms[s] /= n;
    }
    t->launches = n, t->sets = sets, t->graph = ge != NULL;
    timing_stats(t, ms, samples);
    rc = 0;
out_graph:
    if (ge) {
        ctx->cu->StreamSynchronize(gs);
        ctx->cu->GraphExecDestroy(ge);
        ctx->cu->StreamDestroy(gs);
    }
out:
    for (int i = 0; i < made; i++)
        ctx->cu->EventDestroy(ev[i]);
    for (int i = 0; i < smade; i++)
        ctx->cu->EventDestroy(sev[i]);
    free(sev);
    free(ms);
    return rc;
}

int tune_ctx_time(tune_ctx *ctx, tune_enqueue_fn enqueue, void *arg, int sets, int samples,
                  tune_timing *t)
{
    if (samples <= 0)
        samples = 30;
    memset(t, 0, sizeof *t);
    tune_clock_init(&t->clk);
    t->mode = ctx->timing;
    if (sets < 1)
        sets = 1;
    int rc = ctx->timing == TUNE_TIMING_BURST ? time_burst(ctx, enqueue, arg, samples, t)
                                              : time_sustained(ctx, enqueue, arg, sets, samples, t);
    if (!rc && !t->samples) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of memory");
        rc = -1;
    }
    return rc;
}

int tune_ctx_sets(const tune_ctx *ctx, double set_bytes)
{
    if (!ctx || ctx->timing == TUNE_TIMING_BURST)
        return 1;
    return tune_rotate_sets(set_bytes, (double)(ctx->info.l2 > 0 ? ctx->info.l2 : 64ll << 20));
}

int tune_ctx_clone(tune_ctx *ctx, CUdeviceptr *dst, CUdeviceptr src, size_t bytes)
{
    CUresult r = ctx->cu->MemAlloc(dst, bytes + 16);
    if (!r && bytes)
        r = ctx->cu->MemcpyDtoD(*dst, src, bytes);
    return (int)r;
}

int tune_ctx_fill_normal(tune_ctx *ctx, CUdeviceptr dst, size_t elems, check_dtype dt, uint64_t seed,
                         double sigma)
{
    /* a tile of 2^20 values + 7 (odd: rows of a power-of-two width do not repeat in step) */
    size_t tile = ((size_t)1 << 20) + 7, es = check_dtype_size(dt);
    size_t n = elems < tile ? elems : tile;
    void *h = malloc(n * es + 16);
    if (!h) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
        return -1;
    }
    check_fill_normal(dt, h, n, seed, sigma);
    for (size_t i = 0; i < n; i++)
        if (check_load(dt, h, i) == 0.0)
            check_store(dt, h, i, 0.25);
    int rc = 0;
    for (size_t at = 0; at < elems && !rc; at += n) {
        size_t k = elems - at < n ? elems - at : n;
        CUresult r = ctx->cu->MemcpyHtoD(dst + at * es, h, k * es);
        if (r)
            rc = cu_fail(ctx, r, "cuMemcpyHtoD (timing inputs)");
    }
    free(h);
    return rc;
}
