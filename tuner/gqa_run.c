/* tuner/gqa_run.c: the tuner's GQA attention runner (see gqa_run.h) */
#include "tuner/gqa_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/sweep.h"
#include "tuner/tune_enum.h"
#include "tuner/tune_gate.h"

struct tune_gqa {
    gen_kvset shape;
    char label[640];             /* "family shape-key", for the warning */
    tune_attn_case time_case;
    int use_naive;               /* gate against the GPU naive kernel (large cases) */
    int naive_checked;           /* the naive kernel was checked against fp64 in this run */
    uint64_t gate_seed;          /* the gates' inputs in this run: fresh, drawn at the shape's first gate */
    int *kvl;                    /* the gate case's lengths */
};

tune_gqa *tune_gqa_new(const gen_kvset *shape, core_err *e)
{
    char key[512];
    if (gen_shape_key(shape, key, sizeof key)) {
        core_err_set(e, KF_ERR_ARG, "the shape key is too long");
        return NULL;
    }
    tune_gqa *g = calloc(1, sizeof *g);
    int *kvl = malloc(sizeof(int) * (size_t)(gen_kv_int(shape, "b", 1) + 1));
    tune_attn_case gc;
    if (!g || !kvl || tune_time_case(shape, tune_seed_of(key, 0x6b666f72), &g->time_case) ||
        tune_gate_case(shape, 1, &gc, kvl) < 0) {
        core_err_set(e, KF_ERR_ARG, "not a GQA attention shape (b, sq, skv, hq, hkv, d, dtype bf16/fp16)");
        free(g);
        free(kvl);
        return NULL;
    }
    g->shape = *shape;
    g->kvl = kvl;
    const char *fam = gen_kv_str(shape, "family");
    snprintf(g->label, sizeof g->label, "%s %s", fam ? fam : "", key);
    g->use_naive = tune_attn_ref_work(&gc) > TUNE_GATE_CPU_REF_MAX;
    return g;
}

void tune_gqa_free(tune_gqa *g, tune_ctx *ctx)
{
    (void)ctx;
    if (g)
        free(g->kvl);
    free(g);
}

int tune_gqa_ref_job(tune_gqa *g, gen_host *h, const gen_target *tg, gen_job *j)
{
    if (!g->use_naive)
        return 0;
    tune_attn_case gc;
    tune_gate_case(&g->shape, 1, &gc, g->kvl);
    return tune_attn_naive_job(h, &gc, tg, j) ? -1 : 1;
}

/* Before the GPU naive kernel gates a shape's variants, it is itself checked against the CPU
 * fp64 reference on a small case of the shape (its dtype, heads, d and causal flag; one
 * sequence, at most 64 query rows and 512 keys). */
static void naive_selfcheck(tune_ctx *ctx, tune_gqa *g, const tune_compiled *nv)
{
    if (!g->use_naive || g->naive_checked || !nv)
        return;
    g->naive_checked = 1;
    tune_attn_case c = g->time_case;
    c.seed = 0, c.kv_len = NULL, c.q_lens = NULL, c.b = 1;
    c.skv = c.skv < 512 ? c.skv : 512;
    c.sq = c.sq < 64 ? c.sq : 64;
    c.sq = c.sq < c.skv ? c.sq : c.skv;
    tune_attn_result r;
    int rc = tune_attn_check(ctx, nv, &c, NULL, 0, &r, NULL);
    if ((rc || !r.pass) && !tune_broken(ctx)) {
        g->use_naive = 0;
        fprintf(stderr, "warning: %s: the attn_naive reference disagrees with the CPU fp64 one on b1 sq%d"
                " skv%d (%s); gating against the CPU reference\n", g->label, c.sq, c.skv,
                rc ? tune_ctx_errmsg(ctx) : r.msg);
    }
    tune_attn_result_free(&r);
}

int tune_gqa_gate(tune_ctx *ctx, tune_gqa *g, const tune_compiled *v, const tune_compiled *ref, int *pass,
                  double *rel_err, char *verdict, size_t verdictn)
{
    naive_selfcheck(ctx, g, ref);
    /* fresh inputs, one draw per shape and run: every variant of the shape is gated on them, so
     * they are filled and the reference computed once (tune_attn_check keeps both); each gate
     * uploads them into fresh buffers and poisons fresh outputs */
    if (!g->gate_seed)
        g->gate_seed = check_fresh_seed();
    tune_attn_case gc;
    int reduced = tune_gate_case(&g->shape, g->gate_seed, &gc, g->kvl);
    gc.seed = g->gate_seed;
    tune_attn_result r;
    memset(&r, 0, sizeof r);
    char cs[64];
    tune_case_str(&gc, cs, sizeof cs);
    int rc = tune_attn_check(ctx, v, &gc, g->use_naive ? ref : NULL, 0, &r, NULL);
    *pass = !rc && r.pass;
    *rel_err = r.o.nonfinite || r.o.unwritten ? NAN : r.o.rel_err;
    if (rc) {                        /* what failed, named by the case as a verdict is; no verdict */
        tune_ctx_seterr(ctx, tune_ctx_status(ctx), "%s%s: %s", cs, reduced ? ", reduced" : "", tune_ctx_errmsg(ctx));
        *verdict = '\0';
    } else {
        snprintf(verdict, verdictn, "%s%s: %s", cs, reduced ? ", reduced" : "", r.msg);
    }
    tune_attn_result_free(&r);
    return rc ? -1 : 0;
}

int tune_gqa_time(tune_ctx *ctx, tune_gqa *g, const tune_compiled *v, int samples, tune_timing *t)
{
    return tune_attn_time(ctx, v, &g->time_case, samples, t);
}

static double esize(const gen_kvset *shape)
{
    const char *dt = gen_kv_str(shape, "dtype");
    return dt && !strcmp(dt, "fp32") ? 4.0 : 2.0;
}

void tune_gqa_work_decode(const gen_kvset *shape, tune_work *w)
{
    double b = (double)gen_kv_int(shape, "b", 1), skv = (double)gen_kv_int(shape, "skv", 0);
    double hkv = (double)gen_kv_int(shape, "hkv", 0), d = (double)gen_kv_int(shape, "d", 0);
    const char *kv = gen_kv_str(shape, "kv_dtype");   /* FP8 K/V: the bytes actually read */
    w->amount = 2.0 * b * skv * hkv * d * (kv && !strcmp(kv, "e4m3") ? 1.0 : esize(shape));
    w->unit = "B/s";
}

void tune_gqa_work_prefill(const gen_kvset *shape, tune_work *w)
{
    double b = (double)gen_kv_int(shape, "b", 1), sq = (double)gen_kv_int(shape, "sq", 1);
    double skv = (double)gen_kv_int(shape, "skv", 0), hq = (double)gen_kv_int(shape, "hq", 0);
    double d = (double)gen_kv_int(shape, "d", 0);
    w->amount = 4.0 * b * hq * sq * skv * d * (gen_kv_int(shape, "causal", 0) ? 0.5 : 1.0);
    w->unit = "FLOP/s";
}
