/* cli/cmd_compile.c: `kforge compile`: variants, families or sweeps into the binary cache */
#include "cli/cli.h"
#include "gen/variant.h"
#include "gen/build.h"
#include "runtime/shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct job_list {
    gen_job *v;
    int n, cap;
    int skipped;          /* duplicates of a binary already listed */
} job_list;

static gen_job *push(job_list *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    memset(&l->v[l->n], 0, sizeof l->v[0]);
    return &l->v[l->n++];
}

/* Adds a job unless a job with the same binary is already listed. */
static int add_job(job_list *l, gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                   const gen_target *tg)
{
    gen_job *j = push(l);
    j->tmpl = t;
    j->fixed = *fixed;
    j->params = *params;
    if (gen_build_prepare(j, tg)) {
        l->n--;
        gen_job_free(j);
        return -1;
    }
    for (int i = 0; i < l->n - 1; i++)
        if (!strcmp(l->v[i].cache_key, j->cache_key)) {
            gen_job_free(j);
            l->n--;
            l->skipped++;
            return 0;
        }
    return 0;
}

struct enum_ctx {
    job_list *l;
    gen_tmpl *t;
    const gen_kvset *fixed;
    const gen_target *tg;
    int rc;
};

static int enum_cb(const gen_kvset *params, int valid, const char *why, void *arg)
{
    struct enum_ctx *c = arg;
    if (valid && add_job(c->l, c->t, c->fixed, params, c->tg)) {
        c->rc = -1;
        return 1;
    }
    return 0;
}

/* Jobs for one shape: its default variant, or every valid one with --all. */
static int shape_jobs(const cli_opts *o, gen_host *h, const gen_kvset *shape, job_list *l,
                      const gen_target *tg)
{
    gen_tmpl *t = gen_tmpl_load(h, gen_kv_str(shape, "family"));
    gen_kvset fixed, params;
    if (!t || gen_variant_resolve(t, shape, &tg->dev, NULL, 0, &fixed, &params, NULL, 0))
        return -1;
    if (o->all) {
        struct enum_ctx c = {l, t, &fixed, tg, 0};
        if (gen_tmpl_enumerate(t, &fixed, &tg->dev, enum_cb, &c) || c.rc)
            return -1;
        return 0;
    }
    return add_job(l, t, &fixed, &params, tg);
}

struct prog_ctx {
    const cli_opts *o;
};

static void progress(const gen_job *j, int done, int total, void *arg)
{
    const cli_opts *o = ((struct prog_ctx *)arg)->o;
    if (j->failed)
        cli_progress(o, "[%d/%d] FAILED %s\n", done, total, j->binary_key);
    else
        cli_progress(o, "[%d/%d] %-10s %s  %.0f ms, %d regs, %d B spills%s\n", done, total,
                     j->cache_hit ? "cache hit" : "compiled", j->binary_key, j->bin.ms, j->bin.regs,
                     j->bin.spill_bytes, j->bin.wgmma_serial ? ", wgmma SERIALIZED by ptxas (C7520)" : "");
}

static void report(const cli_opts *o, job_list *l)
{
    int hits = 0, failed = 0;
    if (o->json)
        printf("[");
    else if (o->csv)
        printf("variant,cache_key,status,compile_ms,regs,smem_static,spill_bytes,bytes,error\n");
    for (int i = 0; i < l->n; i++) {
        gen_job *j = &l->v[i];
        hits += j->cache_hit;
        failed += j->failed;
        if (o->json) {
            char jv[1024], jc[1024], je[4 * sizeof j->err];
            printf("%s\n {\"variant\":%s,\"cache_key\":%s,\"status\":\"%s\",\"compile_ms\":%.1f,"
                   "\"regs\":%d,\"smem_static\":%d,\"spill_bytes\":%d,\"bytes\":%zu",
                   i ? "," : "", gen_json_str(jv, sizeof jv, j->binary_key),
                   gen_json_str(jc, sizeof jc, j->cache_key),
                   j->failed ? "failed" : j->cache_hit ? "cache_hit" : "compiled", j->bin.ms, j->bin.regs,
                   j->bin.smem_static, j->bin.spill_bytes, j->bin.size);
            if (j->failed)   /* the message has nowhere else to go in --json mode */
                printf(",\"error\":%s", gen_json_str(je, sizeof je, j->err));
            printf("}");
        } else if (o->csv) {
            char num[5][32];
            snprintf(num[0], sizeof num[0], "%.1f", j->bin.ms);
            snprintf(num[1], sizeof num[1], "%d", j->bin.regs);
            snprintf(num[2], sizeof num[2], "%d", j->bin.smem_static);
            snprintf(num[3], sizeof num[3], "%d", j->bin.spill_bytes);
            snprintf(num[4], sizeof num[4], "%zu", j->bin.size);
            const char *row[] = {j->binary_key, j->cache_key,
                                 j->failed ? "failed" : j->cache_hit ? "cache_hit" : "compiled", num[0], num[1],
                                 num[2], num[3], num[4], j->failed ? j->err : NULL};
            cli_csv_row(stdout, 9, row);
        } else if (j->failed) {
            fprintf(stderr, "error: %s\n", j->err);
        }
    }
    if (o->json)
        printf("\n]\n");
    else if (!o->csv)
        printf("%d variant%s: %d compiled, %d cache hit%s, %d failed\n", l->n, l->n == 1 ? "" : "s",
               l->n - hits - failed, hits, hits == 1 ? "" : "s", failed);
}

/* FAMILY alone: its shapes over every sweep that holds it. The count, or -1 after printing an error. */
static int family_shapes(const cli_opts *o, gen_host *h, const char *family, const gen_device *dev,
                         gen_kvset **shapes)
{
    if (!gen_tmpl_load(h, family))
        return cli_error("%s", gen_host_errmsg(h)), -1;
    cli_family_sweeps sw;
    int n = cli_sweeps_of(h, family, &sw, shapes);
    if (n > 0) {
        char names[2048];
        cli_sweep_list(&sw, names, sizeof names);
        cli_progress(o, "%s: %d distinct shape%s of sweep%s %s\n", family, n, n == 1 ? "" : "s",
                     sw.n == 1 ? "" : "s", names);
    }
    return n;
}

/* The usage error for a family with no shapes to compile: the sweeps that hold it, or an example --shape. */
static int no_shapes(const cli_opts *o, gen_host *h, const char *family, const gen_device *dev)
{
    if (!family)
        return cli_error("sweep '%s' holds no shapes", o->sweep ? o->sweep : "default");
    gen_tmpl *t = gen_tmpl_load(h, family);
    if (!t)
        return cli_error("%s", gen_host_errmsg(h));
    cli_family_sweeps sw;
    char names[2048], example[1024];
    if (cli_sweeps_of(h, family, &sw, NULL) < 0)
        return 1;
    cli_sweep_list(&sw, names, sizeof names);
    if (o->sweep && sw.n)
        return cli_usage_error("no shapes for '%s' in sweep '%s'; the sweeps that hold it: %s", family, o->sweep,
                               names);
    if (cli_example_shape(h, t, dev, example, sizeof example))
        snprintf(example, sizeof example, "...");
    return cli_usage_error("no sweep holds '%s' (a helper family): give it a shape, e.g. kforge compile %s "
                           "--shape \"%s\" (its shape keys: kforge list %s)", family, family, example, family);
}

int cmd_compile(cli_opts *o)
{
    if (o->params && o->all)
        return cli_usage_error("--params and --all exclude each other");
    if (o->shape && o->sweep)
        return cli_usage_error("--shape and --sweep exclude each other");
    if (o->json && o->csv)
        return cli_usage_error("--csv and --json exclude each other");
    const char *family = o->argc > 0 ? o->argv[0] : NULL;
    cli_opts eff = *o;
    if (!family && !o->shape && !o->sweep)
        eff.all = 1;  /* the main job: every variant of the default sweep */
    gen_host *h = cli_host(o);
    if (!h)
        return 1;
    gen_device dev;
    const char *arch = cli_arch(o, &dev, NULL);
    gen_target tg;
    if (gen_target_init(&tg, arch, o->ptx, &dev)) {
        gen_host_free(h);
        return cli_usage_error("unknown --arch '%s' (sm_90a, sm_90, sm_80, ...)", arch);
    }
    job_list l = {0};
    int rc = 0;
    if (family && o->shape && !o->all) {
        gen_tmpl *t;
        gen_kvset fixed, params;
        rc = cli_variant(o, h, &t, &fixed, &params, &dev);
        if (!rc && add_job(&l, t, &fixed, &params, &tg))
            rc = cli_error("%s", gen_host_errmsg(h));
    } else {
        gen_kvset *shapes = NULL;
        int n = family && !o->shape && !o->sweep ? family_shapes(o, h, family, &dev, &shapes)
                                                 : cli_shapes(&eff, h, family, &shapes);
        if (n < 0)
            rc = -n;
        else if (n == 0)
            rc = no_shapes(o, h, family, &dev);
        for (int i = 0; i < n && !rc; i++)
            if (!(rc = cli_check_shape(o, h, &shapes[i])) && shape_jobs(&eff, h, &shapes[i], &l, &tg))
                rc = cli_error("%s", gen_host_errmsg(h));
        free(shapes);
    }
    db_store *db = rc ? NULL : cli_open_db(o, 1);
    if (!rc && !db)
        rc = 1;
    if (!rc) {
        int threads = o->jobs ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
        cli_progress(o, "compiling %d variant%s for %s with %d thread%s into %s\n", l.n,
                     l.n == 1 ? "" : "s", tg.arch, threads, threads == 1 ? "" : "s", db_path(db));
        char dberr[512];
        struct prog_ctx pc = {o};
        int failed = gen_build_run(l.v, l.n, threads, db, &tg, progress, &pc, dberr, sizeof dberr);
        if (failed < 0)
            rc = cli_error("%s", dberr);
        else {
            report(o, &l);
            rc = failed ? 1 : 0;
        }
    }
    for (int i = 0; i < l.n; i++)
        gen_job_free(&l.v[i]);
    free(l.v);
    db_close(db);
    gen_host_free(h);
    return rc;
}
