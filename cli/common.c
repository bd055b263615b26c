/* cli/common.c: messages, database and template set-up, target arch and shape selection for the CLI */
#include "cli/cli.h"
#include "runtime/device.h"
#include "gen/sweep.h"
#include "runtime/cuda.h"
#include "runtime/shape.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return EXIT_USAGE;
}

void cli_progress(const cli_opts *o, const char *fmt, ...)
{
    if (o->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

db_store *cli_open_db(const cli_opts *o, int create)
{
    const char *path = o->db_path ? o->db_path : getenv("KFORGE_DB");
    if (!path || !*path)
        path = "kforge.db";
    db_store *s = NULL;
    if (db_open(&s, path, create ? DB_CREATE : 0) != DB_OK) {
        cli_error("%s", db_errmsg(s));
        db_close(s);
        return NULL;
    }
    return s;
}

gen_host *cli_host(const cli_opts *o)
{
    gen_host *h = gen_host_new(o->templates);
    if (!h)
        cli_error("cannot start the template host: out of memory");
    return h;
}

const char *cli_arch(const cli_opts *o, gen_device *dev, int *from_gpu)
{
    static char arch[16];
    if (from_gpu)
        *from_gpu = 0;
    if (o->arch) {
        snprintf(arch, sizeof arch, "%s", o->arch);
        if (gen_device_for_arch(dev, arch))
            gen_device_for_arch(dev, "sm_90a"), snprintf(dev->arch, sizeof dev->arch, "%s", arch);
        return arch;
    }
    rt_devinfo info;
    core_err err = CORE_ERR_INIT;
    if (getenv("KFORGE_NO_GPU") == NULL && rt_device_info(0, &info, &err) == 0) {
        snprintf(arch, sizeof arch, "%s", info.arch);
        rt_gen_device(&info, dev);
        if (from_gpu)
            *from_gpu = 1;
        return arch;
    }
    snprintf(arch, sizeof arch, "sm_90a");
    gen_device_for_arch(dev, arch);
    return arch;
}

/* A shape of --shape or of a sweep through the checks of the C API (runtime/shape.h): 0, or the exit code. */
int cli_check_shape(const cli_opts *o, gen_host *h, const gen_kvset *shape)
{
    const char *family = gen_kv_str(shape, "family");
    gen_tmpl *t = gen_tmpl_load(h, family);
    core_err why = CORE_ERR_INIT;
    if (!t)
        return cli_error("%s", gen_host_errmsg(h));
    if (rt_shape_check(family, shape, gen_tmpl_shape_fields(t), RT_NAMES_SHAPE, &why))
        return o->shape ? cli_usage_error("bad --shape for '%s': %s", family, why.msg)
                        : cli_error("sweep '%s' has a bad shape for '%s': %s", o->sweep ? o->sweep : "default", family, why.msg);
    return 0;
}

int cli_shapes(const cli_opts *o, gen_host *h, const char *family, gen_kvset **out)
{
    *out = NULL;
    if (o->shape) {
        if (!family)
            return -cli_usage_error("--shape needs a FAMILY");
        gen_kvset *s = calloc(1, sizeof *s);
        char err[256];
        if (gen_kv_parse(s, o->shape, err, sizeof err)) {
            free(s);
            return -cli_usage_error("bad --shape: %s", err);
        }
        gen_kv_set_str(s, "family", family);
        *out = s;
        int bad = cli_check_shape(o, h, s);
        if (bad) {
            free(s), *out = NULL;
            return -bad;
        }
        return 1;
    }
    gen_sweep sw;
    if (gen_sweep_load(h, o->sweep ? o->sweep : "default", &sw)) {
        cli_error("cannot load sweep '%s': %s", o->sweep ? o->sweep : "default", gen_host_errmsg(h));
        return -1;
    }
    gen_kvset *v = calloc((size_t)sw.n + 1, sizeof *v);
    int n = 0;
    for (int i = 0; i < sw.n; i++)
        if (!family || !strcmp(gen_kv_str(&sw.shapes[i], "family"), family))
            v[n++] = sw.shapes[i];
    gen_sweep_free(&sw);
    *out = v;
    return n;
}

/* ---- which sweeps hold a family, and an example shape for it ------------------------------------- */

struct sweeps_ctx {
    gen_host *h;
    const char *family;
    cli_family_sweeps *out;
    gen_kvset *shapes;     /* when collecting: the family's distinct shapes (GEN_SWEEP_MAX at most) */
    int n_shapes, rc;
};

static int has_shape(const gen_kvset *v, int n, const gen_kvset *s)
{
    char a[512], b[512];
    gen_shape_key(s, a, sizeof a);
    for (int i = 0; i < n; i++)
        if (gen_shape_key(&v[i], b, sizeof b) == 0 && !strcmp(a, b))
            return 1;
    return 0;
}

static int sweep_cb(const char *name, void *arg)
{
    struct sweeps_ctx *c = arg;
    gen_sweep sw;
    if (gen_sweep_load(c->h, name, &sw)) {
        c->rc = cli_error("cannot load sweep '%s': %s", name, gen_host_errmsg(c->h));
        return 1;
    }
    int k = 0;
    for (int i = 0; i < sw.n; i++) {
        if (strcmp(gen_kv_str(&sw.shapes[i], "family"), c->family))
            continue;
        if (!k++ && (!c->out->n || !strcmp(name, "default")))   /* the default sweep's, else the first */
            c->out->first = sw.shapes[i];
        if (c->shapes && c->n_shapes < GEN_SWEEP_MAX && !has_shape(c->shapes, c->n_shapes, &sw.shapes[i]))
            c->shapes[c->n_shapes++] = sw.shapes[i];
    }
    if (k && c->out->n < CLI_SWEEPS_MAX) {
        snprintf(c->out->name[c->out->n], sizeof c->out->name[0], "%s", name);
        c->out->count[c->out->n++] = k;
    }
    gen_sweep_free(&sw);
    return 0;
}

int cli_sweeps_of(gen_host *h, const char *family, cli_family_sweeps *out, gen_kvset **shapes)
{
    memset(out, 0, sizeof *out);
    struct sweeps_ctx c = {h, family, out, NULL, 0, 0};
    if (shapes)
        c.shapes = *shapes = calloc(GEN_SWEEP_MAX, sizeof **shapes);
    if (gen_sweep_names(h, sweep_cb, &c) && !c.rc)
        c.rc = cli_error("cannot list the sweeps: %s", gen_host_errmsg(h));
    if (c.rc) {
        if (shapes)
            free(*shapes), *shapes = NULL;
        return -1;
    }
    return shapes ? c.n_shapes : out->n;
}

void cli_sweep_list(const cli_family_sweeps *s, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && k < n; i++) {
        int w = snprintf(buf + k, n - k, "%s%s", i ? ", " : "", s->name[i]);
        k += w > 0 ? (size_t)w : 0;
    }
}

/* 1 when shape gives t a fixed set, a default and a valid default on dev. */
static int works(gen_tmpl *t, const gen_kvset *shape, const gen_device *dev)
{
    gen_kvset fixed, params;
    char why[256];
    return gen_tmpl_fixed(t, shape, &fixed) == 0 && gen_tmpl_default(t, shape, dev, &params) == 0 &&
           gen_tmpl_valid(t, &fixed, &params, dev, why, sizeof why) == 1;
}

/* The fields t declares, taken from shape where it has them; missing ints become 128, missing strings
 * "bf16" (the dtype every attention family takes; works() rejects what does not fit). Returns how many
 * fields shape had. */
static int project(gen_tmpl *t, const gen_kvset *shape, gen_kvset *out)
{
    const gen_kvset *fields = gen_tmpl_shape_fields(t);
    int had = 0;
    gen_kv_clear(out);
    for (int i = 0; i < fields->n; i++) {
        const gen_kv *f = &fields->kv[i], *v = gen_kv_find(shape, f->name);
        int is_str = !strncmp(f->s, "string", 6);
        if (!v && gen_shape_optional(f->s))
            continue;   /* an optional field (a model feature): left out, off */
        if (v && v->is_str == is_str) {
            had++;
            if (is_str)
                gen_kv_set_str(out, f->name, v->s);
            else
                gen_kv_set_int(out, f->name, v->i);
        } else if (is_str)
            gen_kv_set_str(out, f->name, "bf16");
        else
            gen_kv_set_int(out, f->name, 128);
    }
    return had;
}

struct example_ctx {
    gen_host *h;
    gen_tmpl *t;
    const gen_device *dev;
    gen_kvset best;
    int best_had;          /* fields of best taken from a sweep shape; -1: none yet */
};

static int example_sweep_cb(const char *name, void *arg)
{
    struct example_ctx *c = arg;
    gen_sweep sw;
    if (gen_sweep_load(c->h, name, &sw))
        return 0;
    for (int i = 0; i < sw.n; i++) {
        gen_kvset s;
        int had = project(c->t, &sw.shapes[i], &s);
        /* more than half the fields from the sweep shape, or it is no example of a real case */
        if (had > c->best_had && 2 * had > gen_tmpl_shape_fields(c->t)->n && works(c->t, &s, c->dev))
            c->best = s, c->best_had = had;
    }
    gen_sweep_free(&sw);
    return 0;
}

int cli_example_shape(gen_host *h, gen_tmpl *t, const gen_device *dev, char *buf, size_t n)
{
    cli_family_sweeps s;
    buf[0] = 0;
    if (cli_sweeps_of(h, gen_tmpl_family(t), &s, NULL) < 0)
        return -1;
    gen_kvset shape;
    if (s.n) {
        shape = s.first;
        gen_kv_remove(&shape, "family");
        return gen_kv_format(&shape, buf, n) < 0 ? -1 : 0;
    }
    /* a family no sweep holds (a helper): the sweep shape of another family that holds the most of this
     * family's fields and, cut to them (the missing ones filled in), gives a valid default (the default
     * sweep's first on a tie); else every int 128 */
    struct example_ctx c = {h, t, dev};
    c.best_had = -1;
    example_sweep_cb("default", &c);
    gen_sweep_names(h, example_sweep_cb, &c);
    if (c.best_had < 0) {
        gen_kvset none;
        gen_kv_clear(&none);
        project(t, &none, &c.best);
        if (!works(t, &c.best, dev))
            return -1;
    }
    return gen_kv_format(&c.best, buf, n) < 0 ? -1 : 0;
}

/* ---- --json and --csv: one escaper each, one null convention (JSON null, an empty CSV field) ------ */

const char *cli_json_num(char *buf, size_t n, const char *fmt, double v)
{
    if (isnan(v) || isinf(v))
        snprintf(buf, n, "null");
    else
        snprintf(buf, n, fmt, v);
    return buf;
}

void cli_csv_str(FILE *f, const char *s)
{
    if (!s)
        return;
    if (!s[strcspn(s, ",\"\r\n")]) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void cli_csv_num(FILE *f, const char *fmt, double v)
{
    if (!isnan(v) && !isinf(v))
        fprintf(f, fmt, v);
}

void cli_csv_row(FILE *f, int n, const char *const *fields)
{
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        cli_csv_str(f, fields[i]);
    }
    fputc('\n', f);
}
