/* cli/cmd_run.c: `kforge run`: one variant on the GPU against the reference: error, time, throughput */
#include "cli/cli.h"
#include "gen/build.h"
#include "runtime/cuda.h"
#include "runtime/nvml.h"
#include "runtime/family.h"
#include "tuner/attn_run.h"
#include "tuner/tune_family.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int shape_int(const gen_kvset *s, const char *name, int dflt) { return (int)gen_kv_int(s, name, dflt); }

/* Whether `kforge run` runs family f: on the GQA harness, or through its tuner runner. */
static int runnable(const tune_family *f) { return f && (f->attn_case || f->runner); }

/* The timing lines of the text report, and the throughput of the shape's work figure. */
static void print_timing(const tune_timing *tm, tune_ctx *ctx, const tune_work *w, double thr, int causal)
{
    if (tm->mode == TUNE_TIMING_BURST)
        printf("time       median %.4f ms (p10 %.4f, p90 %.4f, spread %.1f%%, %d samples, L2 flushed, burst)\n",
               tm->median_ms, tm->p10_ms, tm->p90_ms, 100.0 * tm->spread, tm->samples);
    else
        printf("time       median %.4f ms (p10 %.4f, p90 %.4f, spread %.1f%%, %d samples of %d calls %s over"
               " %d input sets, sustained after %.0f ms of warm-up)\n", tm->median_ms, tm->p10_ms, tm->p90_ms,
               100.0 * tm->spread, tm->samples, tm->launches, tm->graph ? "replayed as a graph" : "back to back",
               tm->sets, tm->warm_ms);
    if (tm->clk.n > 0)
        printf("clocks     SM %.0f MHz (min %.0f), %.0f W (max %.0f), %.0f C during the samples\n", tm->clk.sm_mean,
               tm->clk.sm_min, tm->clk.power_mean, tm->clk.power_max, tm->clk.temp_max);
    else
        printf("clocks     unknown (%s)\n", tune_nvml(ctx) ? "NVML gave no reading" : rt_nvml_why());
    if (isnan(thr))
        printf("throughput unknown (the family has no work figure)\n");
    else if (!strcmp(w->unit, "B/s"))
        printf("throughput %.1f GB/s of %s\n", thr / 1e9, w->ceiling && !strcmp(w->ceiling, "copy") ? "bytes moved" : "K+V read");
    else
        printf("throughput %.1f TFLOP/s%s\n", thr / 1e12, causal ? " (causal counted half)" : "");
}

/* The timing fields of the --json object. */
static void json_timing(const tune_timing *tm, const tune_work *w, double thr)
{
    char jr[64];
    printf(",\"median_ms\":%.6f,\"p10_ms\":%.6f,\"p90_ms\":%.6f,\"samples\":%d", tm->median_ms, tm->p10_ms,
           tm->p90_ms, tm->samples);
    printf(isnan(thr) ? ",\"throughput\":null" : ",\"throughput\":%.6g", thr);
    printf(",\"throughput_unit\":%s,\"timing\":\"%s\",\"graph\":%s,\"launches\":%d,\"sets\":%d,\"warm_ms\":%.1f",
           gen_json_str(jr, sizeof jr, w->unit), tune_timing_str(tm->mode), tm->graph ? "true" : "false",
           tm->launches, tm->sets, tm->warm_ms);
    const char *kn[] = {"sm_clock_mean", "sm_clock_min", "power_mean", "power_max", "temp_max"};
    const double kv[] = {tm->clk.sm_mean, tm->clk.sm_min, tm->clk.power_mean, tm->clk.power_max, tm->clk.temp_max};
    for (int i = 0; i < 5; i++)
        printf(isnan(kv[i]) ? ",\"%s\":null" : ",\"%s\":%.1f", kn[i], kv[i]);
}

/* A family with a tuner runner but not on the GQA harness (split-score, KDA): the runner's gate on
 * its gate case, then its timing. */
static int run_runner(cli_opts *o, const tune_family *tf, gen_job *jobs, int nj, const gen_kvset *shape,
                      tune_ctx *ctx, int timing)
{
    core_err err = CORE_ERR_INIT;
    char verdict[700];
    void *st = tf->runner->make(shape, &err);
    if (!st)
        return cli_error("shape '%s': %.511s", o->shape, err.msg);
    tune_compiled v, ref;
    tune_compiled_from_job(&v, &jobs[0]);
    if (nj > 1)
        tune_compiled_from_job(&ref, &jobs[1]);
    int pass = 0, rc;
    double rel = NAN;
    tune_timing tm;
    memset(&tm, 0, sizeof tm);
    cli_progress(o, "gating against %s\n", tf->reference ? tf->reference : "the reference");
    if (tf->runner->gate(ctx, st, &v, nj > 1 ? &ref : NULL, &pass, &rel, verdict, sizeof verdict)) {
        rc = cli_error("%s: %.699s", jobs[0].variant_key, tune_ctx_errmsg(ctx));
        goto out;
    }
    if (pass) {
        cli_progress(o, "timing (%s)\n", tune_timing_str(timing));
        tune_set_timing(ctx, timing);
        if (tf->runner->time(ctx, st, &v, 30, &tm)) {
            rc = cli_error("%s: timing: %.511s", jobs[0].variant_key, tune_ctx_errmsg(ctx));
            goto out;
        }
    }
    tune_work w;
    tune_work_of(tf->name, shape, &w);
    double thr = tm.samples ? tune_throughput(&w, tm.median_ms) : NAN;
    if (o->json) {
        char jv[1024], jm[1500], jr[300];
        printf("{\"variant\":%s,\"reference\":%s", gen_json_str(jv, sizeof jv, jobs[0].variant_key),
               gen_json_str(jr, sizeof jr, tf->reference));
        printf(isnan(rel) ? ",\"rel_err\":null" : ",\"rel_err\":%.6g", rel);
        printf(",\"pass\":%s,\"verdict\":%s", pass ? "true" : "false", gen_json_str(jm, sizeof jm, verdict));
        if (tm.samples)
            json_timing(&tm, &w, thr);
        printf("}\n");
    } else {
        printf("variant    %s\n", jobs[0].variant_key);
        printf("reference  %s\n", tf->reference ? tf->reference : "?");
        printf("gate       %s\n", verdict);
        printf("result     %s\n", pass ? "pass" : "FAIL");
        if (tm.samples)
            print_timing(&tm, ctx, &w, thr, 0);
    }
    rc = pass ? 0 : 1;
out:
    tune_timing_free(&tm);
    tf->runner->release(st, ctx);
    return rc;
}

int cmd_run(cli_opts *o)
{
    core_err err = CORE_ERR_INIT;
    if (o->argc < 1)
        return cli_usage_error("which family? (see 'kforge list')");
    const char *family = o->argv[0];
    const rt_family *rf = rt_family_find(family);
    const tune_family *tf = tune_family_of(rf);
    if (!runnable(tf)) {
        char names[512] = "";
        size_t len = 0;
        for (int i = 0; i < RT_FAM_COUNT; i++)
            if (runnable(&tune_families[i]))
                len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", rt_families[i].name);
        return cli_usage_error("'kforge run' runs %s, not '%s'", names, family);
    }
    if (!o->shape) {
        gen_host *h = cli_host(o);
        int rc = h ? cli_shape_required(o, h) : 1;
        gen_host_free(h);
        return rc;
    }
    int timing = o->timing ? tune_timing_parse(o->timing) : TUNE_TIMING_SUSTAINED;
    if (timing < 0)
        return cli_usage_error("--timing wants sustained or burst, got '%s'", o->timing);
    if (!rt_cuda(&err))
        return cli_error("%s", err.msg);

    /* --page-size N is the shape's page_size (paged K/V is a kernel fact: wgmma_tma serves none) */
    char paged_shape[1024];
    if (o->page_size) {
        gen_kvset s0;
        gen_kv_clear(&s0);
        if (!gen_kv_parse(&s0, o->shape, err.msg, sizeof err.msg) && gen_kv_find(&s0, "page_size")) {
            if (gen_kv_int(&s0, "page_size", 0) != o->page_size)
                return cli_usage_error("--page-size %d but the shape says page_size=%lld", o->page_size,
                                       gen_kv_int(&s0, "page_size", 0));
        } else {
            snprintf(paged_shape, sizeof paged_shape, "%s,page_size=%d", o->shape, o->page_size);
            o->shape = paged_shape;
        }
    }
    gen_host *h = cli_host(o);
    if (!h)
        return 1;
    gen_tmpl *t;
    gen_kvset fixed, params, shape;
    gen_device dev;
    int rc = cli_variant(o, h, &t, &fixed, &params, &dev);
    if (rc) {
        gen_host_free(h);
        return rc;
    }
    gen_kv_clear(&shape);
    gen_kv_parse(&shape, o->shape, err.msg, sizeof err.msg);   /* already parsed once by cli_variant */
    const char *dt = gen_kv_str(&shape, "dtype");
    check_dtype dtype = dt && !strcmp(dt, "fp16") ? CHECK_FP16 : CHECK_BF16;

    tune_attn_case c;
    memset(&c, 0, sizeof c);
    c.dtype = dtype;
    c.b = shape_int(&shape, "b", 1);
    c.sq = shape_int(&shape, "sq", 1);
    c.skv = shape_int(&shape, "skv", 0);
    c.hq = shape_int(&shape, "hq", 1);
    c.hkv = shape_int(&shape, "hkv", 1);
    c.d = shape_int(&shape, "d", shape_int(&shape, "dv", 128));
    c.causal = shape_int(&shape, "causal", 0);
    /* the model features (issue 21): the shape's optional keys */
    c.window = gen_kv_find(&shape, "window") != NULL, c.window_left = shape_int(&shape, "window", 0);
    c.softcap = shape_int(&shape, "softcap", 0), c.sinks = shape_int(&shape, "sinks", 0);
    const char *kvd = gen_kv_str(&shape, "kv_dtype");
    c.kv_fp8 = kvd && !strcmp(kvd, "e4m3");     /* e4m3 bytes with per-head scales */
    if (tf->attn_case && gen_kv_find(&shape, "page_size"))   /* GQA: the shape's page_size (or --page-size's, added
                                                              * above); attn_parts_decode's is its own key */
        o->page_size = shape_int(&shape, "page_size", 0);
    if (o->page_size) {
        if (!tf->attn_case || rf->id == RT_FAM_ATTN_NAIVE) {
            gen_host_free(h);
            return cli_usage_error("--page-size is for attn_prefill and attn_decode, not '%s'", family);
        }
        c.page_size = o->page_size;             /* a shuffled pool through a block table */
    }

    gen_target tg;
    if (gen_target_init(&tg, dev.arch, 0, &dev)) {
        gen_host_free(h);
        return cli_usage_error("unknown --arch '%s' (sm_90a, sm_90, sm_80, ...)", dev.arch);
    }
    gen_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    int nj = 1;
    jobs[0].tmpl = t;
    jobs[0].fixed = fixed;
    jobs[0].params = params;
    int use_naive = tf->attn_case && rf->id != RT_FAM_ATTN_NAIVE &&
                    tune_attn_ref_work(&c) > TUNE_ATTN_CPU_REF_MAX;
    db_store *db = NULL;
    tune_ctx *ctx = NULL;
    void *rst = NULL;
    gen_kv_set_str(&shape, "family", family);
    if (gen_build_prepare(&jobs[0], &tg) || (use_naive && tune_attn_naive_job(h, &c, &tg, &jobs[nj++]))) {
        rc = cli_error("%s", gen_host_errmsg(h));
        goto out;
    }
    if (!tf->attn_case && tf->runner->ref_job) {   /* the reference binary the runner's gate needs */
        if (!(rst = tf->runner->make(&shape, &err))) {
            rc = cli_error("shape '%s': %.399s", o->shape, err.msg);
            goto out;
        }
        int need = tf->runner->ref_job(rst, h, &tg, &jobs[1]);
        tf->runner->release(rst, NULL);
        if (need < 0) {
            rc = cli_error("%s", gen_host_errmsg(h));
            goto out;
        }
        nj += need;
    }
    db = cli_open_db(o, 1);
    if (!db) {
        rc = 1;
        goto out;
    }
    cli_progress(o, "building %s\n", jobs[0].variant_key);
    char dberr[512];
    int failed = gen_build_run(jobs, nj, nj, db, &tg, NULL, NULL, dberr, sizeof dberr);
    if (failed < 0) {
        rc = cli_error("%s", dberr);
        goto out;
    }
    for (int i = 0; i < nj; i++)
        if (jobs[i].failed) {
            rc = cli_error("%s", jobs[i].err);
            goto out;
        }
    ctx = tune_open(0, &err);
    if (!ctx) {
        rc = cli_error("%s", err.msg);
        goto out;
    }
    if (!tf->attn_case) {
        rc = run_runner(o, tf, jobs, nj, &shape, ctx, timing);
        goto out;
    }
    tune_compiled v, nv;
    tune_compiled_from_job(&v, &jobs[0]);
    if (use_naive)
        tune_compiled_from_job(&nv, &jobs[1]);
    tune_attn_result r;
    tune_timing tm;
    memset(&tm, 0, sizeof tm);
    cli_progress(o, "running against the %s reference\n", use_naive ? "GPU naive" : "CPU fp64");
    /* big shapes, features included, against the GPU naive kernel (built with the same features) */
    int crc = tune_attn_check(ctx, &v, &c, use_naive ? &nv : NULL, 0, &r, NULL);
    if (crc) {
        rc = cli_error("%s: %.511s", jobs[0].variant_key, tune_ctx_errmsg(ctx));
        goto out;
    }
    /* the timing on its own inputs (N(0,1), rotated over copies larger than the L2 when sustained) */
    if (r.pass) {
        cli_progress(o, "timing (%s)\n", tune_timing_str(timing));
        tune_set_timing(ctx, timing);
        if (tune_attn_time(ctx, &v, &c, 30, &tm)) {
            rc = cli_error("%s: timing: %s", jobs[0].variant_key, tune_ctx_errmsg(ctx));
            tune_attn_result_free(&r);
            goto out;
        }
    }
    tune_work w;
    tune_work_of(family, &shape, &w);
    double thr = tm.samples ? tune_throughput(&w, tm.median_ms) : NAN;
    if (o->json) {
        char jv[1024], jr[64];
        printf("{\"variant\":%s,\"reference\":%s,\"rel_err\":%.6g,\"tol\":%.3g,\"lse_err\":%.6g,"
               "\"unwritten\":%zu,\"nonfinite\":%zu,\"stray\":%zu,\"pass\":%s,\"seed\":%llu",
               gen_json_str(jv, sizeof jv, jobs[0].variant_key), gen_json_str(jr, sizeof jr, r.ref), r.o.rel_err,
               r.tol, r.lse.max_abs, r.o.unwritten, r.o.nonfinite, r.stray, r.pass ? "true" : "false",
               (unsigned long long)r.seed);
        if (tm.samples)
            json_timing(&tm, &w, thr);
        printf("}\n");
    } else {
        printf("variant    %s\n", jobs[0].variant_key);
        printf("reference  %s\n", r.ref);
        printf("o          rel %.3e (tol %.1e), max_abs %.3e, unwritten %zu, nonfinite %zu, stray %zu\n",
               r.o.rel_err, r.tol, r.o.max_abs, r.o.unwritten, r.o.nonfinite, r.stray);
        printf("lse        max_abs %.3e (tol %.1e), unwritten %zu, bad %zu, -inf mismatch %zu\n", r.lse.max_abs,
               CHECK_LSE_TOL, r.lse.unwritten, r.lse.bad, r.lse.inf_mismatch);
        printf("result     %s\n", r.pass ? "pass" : "FAIL");
        if (tm.samples)
            print_timing(&tm, ctx, &w, thr, c.causal);
        if (!r.pass)
            printf("why        %s\n", r.msg);
    }
    rc = r.pass ? 0 : 1;
    tune_attn_result_free(&r);
    tune_timing_free(&tm);
out:
    tune_close(ctx);
    for (int i = 0; i < 2; i++)
        gen_job_free(&jobs[i]);
    db_close(db);
    gen_host_free(h);
    return rc;
}
