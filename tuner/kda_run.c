/* tuner/kda_run.c: the tuner's KDA runner: a correctness gate against the CPU fp64 recurrence and L2-flushed timing */
#include "tuner/kda_run.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/family.h"
#include "runtime/kda_launch.h"
#include "tuner/check.h"
#include "tuner/ref_kda.h"
#include "tuner/tune_ilv.h"

#define KDA_TOL_O 1e-2
#define KDA_TOL_STATE 5e-3
#define GATE_LONG 700          /* tokens of the gate's long sequence (or t, when shorter) */
#define GATE_HEADS 2           /* value heads checked at each end of the head range */

/* Device copies of one host problem, and the params pointing at them. */
typedef struct dev_prob {
    kf_kda_params p;
    CUdeviceptr buf[11];       /* q k v g beta a_log dt_bias h0 cu o ht */
    size_t bytes[9];           /* of the inputs buf[0..8] */
    size_t o_bytes, ht_elems;
} dev_prob;

struct tune_kda {
    int prefill;
    int n, t, h, hv, dk, dv;
    int lens[3];
    dev_prob time;             /* the timing case, uploaded on first use */
    int time_ready;
    CUdeviceptr tset[TUNE_ROTATE_MAX_SETS][8];   /* sustained timing: copies of buf[0..7] (set 0: time.buf) */
    int tsets;
    CUdeviceptr ws;            /* workspace, grown to the largest variant's need */
    size_t ws_bytes;
    /* The gate case, one draw per shape and run: made and its reference computed at the first gate,
     * then every variant of the shape is gated on it (gate_build) */
    uint64_t gate_seed;        /* drawn at the first gate; 0: not yet */
    int gate_ready;            /* gate_hp, gate_ro and gate_rht are complete */
    ref_kda_host gate_hp;      /* host inputs: only read (dev_make uploads them for every variant) */
    double *gate_ro, *gate_rht;   /* the fp64 reference on the checked value heads: o, final state */
};

static int shape_int(const gen_kvset *s, const char *k) { return (int)gen_kv_int(s, k, 0); }

tune_kda *tune_kda_new(const gen_kvset *shape, core_err *e)
{
    const char *fam = gen_kv_str(shape, "family");
    int prefill = rt_family_is(shape, RT_FAM_KDA_PREFILL);
    if (!prefill && !rt_family_is(shape, RT_FAM_KDA_DECODE)) {
        core_err_set(e, KF_ERR_ARG, "family '%s' is not kda_prefill or kda_decode", fam ? fam : "");
        return NULL;
    }
    tune_kda k = {0};
    k.prefill = prefill;
    k.n = shape_int(shape, "n"), k.t = shape_int(shape, "t"), k.h = shape_int(shape, "h");
    k.hv = shape_int(shape, "hv"), k.dk = shape_int(shape, "dk"), k.dv = shape_int(shape, "dv");
    if (k.n < 1 || k.t < 1 || k.h < 1 || k.hv < 1 || k.dk < 1 || k.dv < 1 || k.hv % k.h) {
        core_err_set(e, KF_ERR_ARG, "a KDA shape needs n, t, h, hv, dk, dv >= 1 with hv a multiple of h; got n %d t %d"
                     " h %d hv %d dk %d dv %d", k.n, k.t, k.h, k.hv, k.dk, k.dv);
        return NULL;
    }
    k.lens[0] = k.t < GATE_LONG ? k.t : GATE_LONG, k.lens[1] = 0, k.lens[2] = 17;
    tune_kda *out = malloc(sizeof *out);
    if (!out) {
        core_err_set(e, KF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    *out = k;
    return out;
}

static void dev_free(tune_ctx *ctx, dev_prob *d)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    for (int i = 0; i < 11; i++)
        if (d->buf[i] && cu)
            cu->MemFree(d->buf[i]);
    memset(d, 0, sizeof *d);
}

/* Frees the gate case and its reference; the next gate makes them again (same seed). */
static void gate_drop(tune_kda *k)
{
    ref_kda_host_free(&k->gate_hp);
    free(k->gate_ro), free(k->gate_rht);
    k->gate_ro = k->gate_rht = NULL;
    k->gate_ready = 0;
}

void tune_kda_free(tune_kda *k, tune_ctx *ctx)
{
    if (!k)
        return;
    gate_drop(k);
    if (ctx) {
        dev_free(ctx, &k->time);
        for (int s = 1; s < k->tsets; s++)
            for (int i = 0; i < 8; i++)
                if (k->tset[s][i])
                    tune_ctx_cu(ctx)->MemFree(k->tset[s][i]);
        if (k->ws)
            tune_ctx_cu(ctx)->MemFree(k->ws);
    }
    free(k);
}

/* Uploads the host problem's inputs and allocates its outputs. */
static int dev_make(tune_ctx *ctx, const ref_kda_host *hp, dev_prob *d)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    const void *src[9] = {hp->q, hp->k, hp->v, hp->g, hp->beta, hp->a_log, hp->dt_bias, hp->h0, hp->cu};
    size_t bytes[9] = {hp->nq * 2, hp->nk * 2, hp->nv * 2, hp->ng * 4, hp->nbeta * 4, hp->nalog * 4,
                       hp->ndt * 4, hp->nh0 * 4, hp->ncu_bytes};
    memset(d, 0, sizeof *d);
    d->p = hp->p;
    for (int i = 0; i < 9; i++) {
        if (!src[i] || !bytes[i])
            continue;
        d->bytes[i] = bytes[i];
        int r = tune_ctx_upload(ctx, &d->buf[i], src[i], bytes[i], 16);
        if (r)
            return tune_ctx_fail(ctx, r, "KDA inputs: cuMemAlloc/cuMemcpyHtoD");
    }
    d->o_bytes = hp->no * 2, d->ht_elems = hp->nht;
    int r = cu->MemAlloc(&d->buf[9], d->o_bytes + 16);
    if (!r && d->ht_elems)
        r = cu->MemAlloc(&d->buf[10], d->ht_elems * 4 + 16);
    if (r)
        return tune_ctx_fail(ctx, r, "KDA outputs: cuMemAlloc");
    kf_kda_params *p = &d->p;
    p->q = (void *)(uintptr_t)d->buf[0], p->k = (void *)(uintptr_t)d->buf[1], p->v = (void *)(uintptr_t)d->buf[2];
    p->g = (float *)(uintptr_t)d->buf[3], p->beta = (float *)(uintptr_t)d->buf[4];
    p->a_log = (float *)(uintptr_t)d->buf[5], p->dt_bias = (float *)(uintptr_t)d->buf[6];
    p->h0 = (float *)(uintptr_t)d->buf[7], p->cu_seqlens = (void *)(uintptr_t)d->buf[8];
    p->o = (void *)(uintptr_t)d->buf[9], p->ht = (float *)(uintptr_t)d->buf[10];
    return 0;
}

/* Sizes the workspace for v on d (poisoned with NaN bytes when it grows: a slot read before it is
 * written fails the gate) and checks the variant against the problem. */
static int prepare(tune_ctx *ctx, tune_kda *k, const tune_compiled *v, dev_prob *d)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    rt_launch l;
    if (rt_kda_launch(&v->vp, &d->p, &l) || l.kernels != v->n_kernels) {
        return tune_ctx_seterr(ctx, KF_ERR_ARG, "%s launches %d kernels but its binary has %d",
                               v->key ? v->key : v->family, l.kernels, v->n_kernels);
    }
    size_t ws = l.ws_bytes;
    if (ws > k->ws_bytes) {
        if (k->ws)
            cu->MemFree(k->ws), k->ws = 0, k->ws_bytes = 0;
        int r = cu->MemAlloc(&k->ws, ws);
        if (!r)
            r = cu->MemsetD8(k->ws, 0xFF, ws);
        if (r)
            return tune_ctx_fail(ctx, r, "KDA workspace: cuMemAlloc");
        k->ws_bytes = ws;
    }
    d->p.ws = ws ? (void *)(uintptr_t)k->ws : NULL;
    if (rt_kda_check(&v->vp, &d->p, tune_ctx_err(ctx))) {
        tune_ctx_seterr(ctx, tune_ctx_status(ctx), "the variant refuses the case: %.400s", tune_ctx_errmsg(ctx));
        return -1;
    }
    return 0;
}

typedef struct launch_arg {
    const tune_compiled *v;
    const rt_module *m;
    kf_kda_params *p;
    tune_kda *k;
    dev_prob *d;
    int rotate;                /* set s > 0 reads the inputs of k->tset[s] */
} launch_arg;

static int bind(tune_ctx *ctx, void *arg, const rt_module *m)
{
    launch_arg *a = arg;
    a->m = m;
    return prepare(ctx, a->k, a->v, a->d);
}

/* The params of p with the inputs of set s (the copies in t). */
static kf_kda_params set_params(const kf_kda_params *p, const dev_prob *d, const CUdeviceptr *t)
{
    kf_kda_params q = *p;
    const void *bp[8];
    for (int i = 0; i < 8; i++)
        bp[i] = d->buf[i] ? (const void *)(uintptr_t)t[i] : NULL;
    q.q = (void *)bp[0], q.k = (void *)bp[1], q.v = (void *)bp[2];
    q.g = (float *)bp[3], q.beta = (float *)bp[4];
    q.a_log = (float *)bp[5], q.dt_bias = (float *)bp[6], q.h0 = (float *)bp[7];
    return q;
}

static int launch(tune_ctx *ctx, void *arg, int set)
{
    launch_arg *a = arg;
    kf_kda_params ps;
    if (a->rotate && set > 0) {
        ps = set_params(a->p, a->d, a->k->tset[set]);
        launch_arg b = *a;
        b.p = &ps, b.rotate = 0;
        return launch(ctx, &b, 0);
    }
    void *args[] = {a->p};
    for (int i = 0; i < a->m->n; i++) {
        unsigned grid[3];
        if (rt_kda_grid(&a->v->vp, a->p, i, grid)) {
            tune_ctx_seterr(ctx, KF_ERR_ARG, "rt_kda_grid refused kernel %d of %s", i,
                            a->v->key ? a->v->key : a->v->family);
            return -1;
        }
        if (rt_module_launch(a->m, i, grid, args, tune_ctx_stream(ctx), tune_ctx_err(ctx)))
            return -1;
    }
    return 0;
}

static ref_kda_case gate_case(const tune_kda *k)
{
    ref_kda_case c;
    memset(&c, 0, sizeof c);
    c.h = k->h, c.hv = k->hv, c.dk = k->dk, c.dv = k->dv;
    if (k->prefill) {
        c.nseq = 3, c.lens = k->lens;
    } else {
        c.nseq = k->n < 16 ? k->n : 16, c.t = 1;
    }
    c.gate = 1, c.lower_bound = -5.0, c.l2norm = 1, c.beta_sigmoid = 1, c.h0 = 1, c.ht = 2;
    return c;
}

/* ||a - b|| / ||b|| over the value heads [hv0, hv0 + nhv) of a [rows, hv, w] pair; NaN when a has a
 * non-finite value there. */
static void rel_err_acc(const double *a, const double *b, long long rows, int hv, int w, int hv0, int nhv,
                        double *num, double *den)
{
    for (long long r = 0; r < rows; r++)
        for (int h = hv0; h < hv0 + nhv; h++)
            for (int c = 0; c < w; c++) {
                size_t i = ((size_t)r * hv + h) * w + c;
                double d = a[i] - b[i];
                *num += d * d, *den += b[i] * b[i];
            }
}

/* The value heads the gate checks, as {first, count}: the first and the last GATE_HEADS (every head,
 * in the first range, when few). */
static void gate_heads(int hv, int ranges[2][2])
{
    int few = hv <= 2 * GATE_HEADS;
    ranges[0][0] = 0, ranges[0][1] = few ? hv : GATE_HEADS;
    ranges[1][0] = hv - GATE_HEADS, ranges[1][1] = few ? 0 : GATE_HEADS;
}

/* The gate case of k->gate_seed and its reference on the checked heads, made at the shape's first
 * gate and kept for its other variants (the fill and the fp64 recurrence are most of a gate's
 * time); phases from *t. On failure nothing is kept: the next gate tries again. */
static int gate_build(tune_ctx *ctx, tune_kda *k, double *t)
{
    if (k->gate_ready)
        return 0;
    if (!k->gate_seed)
        k->gate_seed = check_fresh_seed();
    ref_kda_case c = gate_case(k);
    ref_kda_host *hp = &k->gate_hp;
    if (ref_kda_host_make(hp, &c, k->gate_seed)) {
        gate_drop(k);
        return tune_ctx_seterr(ctx, KF_ERR_NOMEM, "gate: cannot build the KDA case (out of memory?)");
    }
    tune_ctx_phase(ctx, TUNE_PH_GATE_FILL, t);
    size_t nst = (size_t)c.nseq * c.hv * c.dk * c.dv;
    k->gate_ro = calloc(hp->no + 1, sizeof(double)), k->gate_rht = calloc(nst + 1, sizeof(double));
    if (!k->gate_ro || !k->gate_rht) {
        gate_drop(k);
        return tune_ctx_seterr(ctx, KF_ERR_NOMEM, "gate: out of host memory");
    }
    int ranges[2][2];
    gate_heads(c.hv, ranges);
    for (int i = 0; i < 2; i++)
        if (ranges[i][1])   /* (a count of 0 would mean every head to ref_kda) */
            ref_kda(&hp->p, ranges[i][0], ranges[i][1], k->gate_ro, k->gate_rht);
    tune_ctx_phase(ctx, TUNE_PH_GATE_REF, t);
    k->gate_ready = 1;
    return 0;
}

int tune_kda_gate(tune_ctx *ctx, tune_kda *k, const tune_compiled *v, int *pass, double *rel_err,
                  char *verdict, size_t verdictn)
{
    *pass = 0, *rel_err = NAN, *verdict = '\0';
    const rt_cu *cu = tune_ctx_cu(ctx);
    double t;
    tune_ctx_phase(ctx, TUNE_PH_GATE_CALL, &t);
    if (gate_build(ctx, k, &t))
        return -1;
    /* the kept host problem is only read here (dev_make copies its params, prepare and the launch
     * change the copy in d), so every variant starts from the inputs as drawn */
    const ref_kda_host *hp = &k->gate_hp;
    ref_kda_case c = gate_case(k);
    dev_prob d;
    memset(&d, 0, sizeof d);
    rt_module own;
    memset(&own, 0, sizeof own);
    double *go = NULL, *ght = NULL;
    float *raw = NULL;
    uint16_t *ob = NULL;
    int rc = -1;
    const kf_kda_params *hpp = &hp->p;
    long long rows = ref_kda_rows(hpp);
    size_t nst = (size_t)c.nseq * c.hv * c.dk * c.dv;
    const rt_module *m;
    if (dev_make(ctx, hp, &d))
        goto out;
    tune_ctx_phase(ctx, TUNE_PH_GATE_FILL, &t);
    if (!(m = tune_ctx_module(ctx, v, 0, &own)) || prepare(ctx, k, v, &d))
        goto out;
    int r = cu->MemsetD8(d.buf[9], 0xFF, d.o_bytes);
    if (!r)
        r = cu->MemsetD32(d.buf[10], CHECK_POISON32, d.ht_elems);
    if (r) {
        tune_ctx_fail(ctx, r, "gate: poison outputs");
        goto out;
    }
    launch_arg a = {v, m, &d.p};
    if (tune_ctx_run(ctx, launch, &a, "gate: the kernels failed"))
        goto out;
    ob = malloc(d.o_bytes + 2), raw = malloc(d.ht_elems * 4 + 4);
    go = malloc(sizeof(double) * (hp->no + 1)), ght = malloc(sizeof(double) * (nst + 1));
    if (!ob || !raw || !go || !ght) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "gate: out of host memory");
        goto out;
    }
    if ((r = cu->MemcpyDtoH(ob, d.buf[9], d.o_bytes)) || (r = cu->MemcpyDtoH(raw, d.buf[10], d.ht_elems * 4))) {
        tune_ctx_fail(ctx, r, "gate: cuMemcpyDtoH");
        goto out;
    }
    size_t nonfinite = 0, unwritten = 0;
    for (size_t i = 0; i < hp->no; i++) {
        unwritten += ob[i] == CHECK_POISON16;
        go[i] = check_bf16_to_f32(ob[i]);
        nonfinite += !isfinite(go[i]);
    }
    for (int n = 0; n < c.nseq; n++)
        for (int hv = 0; hv < c.hv; hv++)
            for (int x = 0; x < c.dk; x++)
                for (int y = 0; y < c.dv; y++) {
                    size_t src = (size_t)(n * hpp->ht_sn + hv * hpp->ht_sh +
                                          (hpp->ht_vfirst ? y * hpp->ht_sr + x : x * hpp->ht_sr + y));
                    uint32_t bits;
                    memcpy(&bits, &raw[src], 4);
                    unwritten += bits == CHECK_POISON32;
                    ght[(((size_t)n * c.hv + hv) * c.dk + x) * c.dv + y] = raw[src];
                    nonfinite += !isfinite(raw[src]);
                }
    double on = 0, od = 0, sn = 0, sd = 0;
    int ranges[2][2];
    gate_heads(c.hv, ranges);
    for (int i = 0; i < 2; i++) {
        rel_err_acc(go, k->gate_ro, rows, c.hv, c.dv, ranges[i][0], ranges[i][1], &on, &od);
        rel_err_acc(ght, k->gate_rht, c.nseq, c.hv, c.dk * c.dv, ranges[i][0], ranges[i][1], &sn, &sd);
    }
    double eo = od > 0 ? sqrt(on / od) : sqrt(on), es = sd > 0 ? sqrt(sn / sd) : sqrt(sn);
    *rel_err = eo;
    *pass = !nonfinite && !unwritten && eo <= KDA_TOL_O && es <= KDA_TOL_STATE;
    snprintf(verdict, verdictn, "%s: o rel %.2e (tol %.0e), state rel %.2e (tol %.0e), nonfinite %zu, unwritten %zu; "
             "lens [%d, %d, %d] x %d value heads, seed %llu", *pass ? "pass" : "FAIL", eo, KDA_TOL_O, es,
             KDA_TOL_STATE, nonfinite, unwritten, c.lens ? c.lens[0] : 1, c.lens ? c.lens[1] : c.nseq,
             c.lens ? c.lens[2] : 0, c.hv, (unsigned long long)k->gate_seed);
    rc = 0;
out:
    tune_ctx_phase(ctx, TUNE_PH_GATE_RUN, &t);   /* the run, its outputs copied back and compared */
    if (own.mod)
        rt_module_unload(&own);
    dev_free(ctx, &d);
    free(go), free(ght), free(raw), free(ob);
    return rc;
}

int tune_kda_time(tune_ctx *ctx, tune_kda *k, const tune_compiled *v, int samples, tune_timing *t)
{
    memset(t, 0, sizeof *t);
    double tm;
    tune_ctx_phase(ctx, TUNE_PH_TIME_CALL, &tm);
    if (!k->time_ready) {
        ref_kda_case c;
        memset(&c, 0, sizeof c);
        c.nseq = k->n, c.t = k->t, c.h = k->h, c.hv = k->hv, c.dk = k->dk, c.dv = k->dv;
        c.gate = 0, c.log_gate_max = 0.1, c.h0 = 1, c.ht = 1;
        c.fill_rows = 1024;   /* 1024 token rows drawn and repeated: T 8192 x H 64 took 5.9 s drawing every value */
        ref_kda_host hp;
        if (ref_kda_host_make(&hp, &c, 0x6b6461)) {
            tune_ctx_seterr(ctx, KF_ERR_NOMEM, "timing: cannot build the KDA case n %d t %d hv %d (out of memory?)",
                            k->n, k->t, k->hv);
            return -1;
        }
        int bad = dev_make(ctx, &hp, &k->time);
        ref_kda_host_free(&hp);
        if (bad)
            return -1;
        k->time_ready = 1;
        k->tsets = 1;
    }
    /* sustained: copies of the inputs (state included), so that the rotated sets exceed the L2 */
    double set_bytes = 0;
    for (int i = 0; i < 8; i++)
        set_bytes += (double)k->time.bytes[i];
    int sets = tune_ctx_sets(ctx, set_bytes);
    for (; k->tsets < sets; k->tsets++)
        for (int i = 0; i < 8; i++) {
            int r = k->time.buf[i] ? tune_ctx_clone(ctx, &k->tset[k->tsets][i], k->time.buf[i], k->time.bytes[i]) : 0;
            if (r) {
                k->tsets++;
                return tune_ctx_fail(ctx, r, "timing: copies of the KDA inputs (cuMemAlloc/cuMemcpyDtoD)");
            }
        }
    tune_ctx_phase(ctx, TUNE_PH_TIME_FILL, &tm);
    launch_arg a = {v, NULL, &k->time.p, k, &k->time, 1};
    return tune_ctx_time_variant(ctx, v, bind, launch, &a, k->tsets, samples, t, &tm);
}

void tune_kda_work(const gen_kvset *shape, tune_work *w)
{
    double n = (double)gen_kv_int(shape, "n", 0), t = (double)gen_kv_int(shape, "t", 0);
    double h = (double)gen_kv_int(shape, "h", 0), hv = (double)gen_kv_int(shape, "hv", 0);
    double dk = (double)gen_kv_int(shape, "dk", 0), dv = (double)gen_kv_int(shape, "dv", 0);
    /* q, k (bf16, h heads), v, o (bf16), g (fp32 [hv, dk]), beta (fp32) per token, and the
     * fp32 state read and written once per (sequence, value head) */
    w->amount = n * t * (2.0 * h * dk * 2 + 2.0 * hv * dv * 2 + 4.0 * hv * dk + 4.0 * hv) + 2.0 * n * hv * dk * dv * 4;
    w->unit = "B/s";
}
