/* runtime/ctx.c: contexts: open (device, bundles, database winners, JIT host), close, messages, module cache */
#include "runtime/ctx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef KF_VERSION_STR
#define KF_VERSION_STR "0.1.0"
#endif

const char *kf_version(void) { return KF_VERSION_STR; }
int kf_version_number(void) { return KF_VERSION_NUMBER; }

const char *kf_status_str(kf_status s)
{
    switch (s) {
    case KF_OK: return "ok";
    case KF_ERR_ARG: return "invalid argument";
    case KF_ERR_UNSUPPORTED: return "unsupported";
    case KF_ERR_NOT_TUNED: return "not tuned";
    case KF_ERR_CUDA: return "CUDA error";
    case KF_ERR_NVRTC: return "compilation failed";
    case KF_ERR_DB: return "database error";
    case KF_ERR_BUNDLE: return "bad bundle";
    case KF_ERR_NOMEM: return "out of memory";
    }
    return "unknown status";
}

kf_status rt_ctx_err(kf_ctx *c, kf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_err_vset(&c->err, st, fmt, ap);
    va_end(ap);
    return st;
}

const char *kf_errmsg(const kf_ctx *ctx) { return ctx ? ctx->err.msg : "out of memory"; }

/* ---- context ---------------------------------------------------------------- */

/* A winner row (shape key "b1.causal0.d128.dtype-bf16...", params "name=value,...")
 * as the selection table holds it. */
static int winner_of(const char *family, const char *shape_key, const char *params, const char *variant,
                     const char *cache_key, double speedup, int from_bundle, rt_winner *r)
{
    char err[256];
    memset(r, 0, sizeof *r);
    if (gen_kv_parse(&r->vp, params, err, sizeof err) || gen_kv_set_str(&r->vp, "family", family))
        return -1;
    /* the key's "name<value>" / "name-value" fields back into a shape: the parse the bundle loader checks */
    if (db_bundle_shape_parse(shape_key, &r->shape, NULL) || gen_kv_set_str(&r->shape, "family", family))
        return -1;
    snprintf(r->variant, sizeof r->variant, "%s", variant);
    snprintf(r->cache_key, sizeof r->cache_key, "%s", cache_key ? cache_key : "");
    r->from_bundle = from_bundle;
    r->kept_default = speedup > 0 && speedup <= 1.0;   /* 1.0: kept; NULL (read 0) or NaN: the default not measured */
    return 0;
}

struct load_ctx {
    kf_ctx *c;
    int bad;
};

static int winner_cb(const db_winner *w, void *arg)
{
    struct load_ctx *l = arg;
    rt_winner r;
    if (winner_of(w->family, w->shape_key, w->params, w->variant_key, w->cache_key, w->speedup, 0, &r) ||
        rt_table_add(&l->c->table, &r))
        l->bad++;
    return 0;
}

/* Opens and verifies the bundle at path (checksums, images) before any device is known. */
static kf_status open_bundle(kf_ctx *c, int i, const char *path)
{
    db_bundle *b;
    if (!path)
        return rt_ctx_err(c, KF_ERR_ARG, "config.bundles[%d] is NULL", i);
    if (db_bundle_load(path, NULL, &b, &c->err))
        return c->err.st;
    c->bundles[c->n_bundles++] = b;
    return KF_OK;
}

/* A bundle opened by open_bundle against the device: its arch and GPU, then its winners. */
static kf_status serve_bundle(kf_ctx *c, const char *path, db_bundle *b)
{
    if (strcmp(db_bundle_arch(b), c->dev.arch))
        return rt_ctx_err(c, KF_ERR_BUNDLE, "cannot load bundle '%s': it holds %s binaries and this device is %s", path,
                          db_bundle_arch(b), c->dev.arch);
    if (strcmp(db_bundle_gpu(b), c->dev.name))
        return rt_ctx_err(c, KF_ERR_BUNDLE, "cannot load bundle '%s': it was tuned on '%s' and device %d is '%s'", path,
                          db_bundle_gpu(b), c->device, c->dev.name);
    for (int i = 0; i < db_bundle_n_winners(b); i++) {
        const db_bundle_winner *w = db_bundle_winner_at(b, i);
        rt_winner r;
        if (winner_of(w->family, w->shape_key, w->params, w->variant_key, w->cache_key, w->speedup, 1, &r) ||
            rt_table_add(&c->table, &r))
            return rt_ctx_err(c, KF_ERR_BUNDLE, "cannot load bundle '%s': winner '%s' is malformed", path,
                              w->variant_key);
    }
    return KF_OK;
}

kf_status kf_open(kf_ctx **out, const kf_config *cfg)
{
    kf_config dflt = KF_CONFIG_INIT;
    if (!out)
        return KF_ERR_ARG;
    if (!cfg)
        cfg = &dflt;
    kf_ctx *c = calloc(1, sizeof *c);
    *out = c;
    if (!c)
        return KF_ERR_NOMEM;
    pthread_mutex_init(&c->mu, NULL);
    c->device = cfg->device;
    if (cfg->jit != KF_JIT_ALLOW && cfg->jit != KF_JIT_FORBID)
        return rt_ctx_err(c, KF_ERR_ARG, "config.jit must be KF_JIT_ALLOW or KF_JIT_FORBID, got %d", cfg->jit);
    if (cfg->n_bundles < 0 || (cfg->n_bundles > 0 && !cfg->bundles))
        return rt_ctx_err(c, KF_ERR_ARG, "config.bundles is NULL with config.n_bundles = %d", cfg->n_bundles);
    /* the caller's files first, so a wrong path is named also on a machine without a GPU */
    struct stat sb;
    if (cfg->template_dir && stat(cfg->template_dir, &sb))
        return rt_ctx_err(c, KF_ERR_ARG, "config.template_dir = '%s': %s", cfg->template_dir, strerror(errno));
    if (cfg->template_dir && !S_ISDIR(sb.st_mode))
        return rt_ctx_err(c, KF_ERR_ARG, "config.template_dir = '%s' is not a directory", cfg->template_dir);
    if (cfg->n_bundles > 0 && !(c->bundles = calloc((size_t)cfg->n_bundles, sizeof *c->bundles)))
        return rt_ctx_err(c, KF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < cfg->n_bundles; i++) {
        kf_status st = open_bundle(c, i, cfg->bundles[i]);
        if (st)
            return st;
    }
    if (cfg->db_path && db_open(&c->db, cfg->db_path, DB_CREATE) != DB_OK)
        return rt_ctx_err(c, KF_ERR_DB, "%s", db_errmsg(c->db));
    c->cu = rt_cuda(&c->err);
    if (!c->cu)
        return c->err.st;
    if (rt_device_info(cfg->device, &c->dev, &c->err) || rt_module_context(cfg->device, &c->err))
        return rt_ctx_err(c, c->err.st, "config.device = %d: %s", cfg->device, c->err.msg);
    for (int i = 0; i < c->n_bundles; i++) {
        kf_status st = serve_bundle(c, cfg->bundles[i], c->bundles[i]);
        if (st)
            return st;
    }
    if (c->db) {
        struct load_ctx l = {c, 0};
        if (db_winner_each(c->db, c->dev.name, NULL, winner_cb, &l) != DB_OK)
            return rt_ctx_err(c, KF_ERR_DB, "%s", db_errmsg(c->db));
    }
    if (cfg->jit == KF_JIT_ALLOW)
        c->jit = rt_jit_new(cfg->template_dir, NULL);  /* NULL in libkforge_rt: JIT off, no error */
    return KF_OK;
}

/* Frees c and everything it holds (no plan is alive). */
static void ctx_free(kf_ctx *c)
{
    for (int i = 0; i < c->n_mods; i++)
        rt_module_unload(&c->mods[i].mod);
    free(c->mods);
    rt_table_free(&c->table);
    for (int i = 0; i < c->n_bundles; i++)
        db_bundle_free(c->bundles[i]);
    free(c->bundles);
    rt_jit_free(c->jit);
    db_close(c->db);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void kf_close(kf_ctx *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    int alive = c->plans;
    c->closed = 1;
    pthread_mutex_unlock(&c->mu);
    if (!alive)   /* else the last kf_plan_free frees c (rt_ctx_plan_freed) */
        ctx_free(c);
}

void rt_ctx_plan_freed(kf_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    int last = --c->plans == 0 && c->closed;
    pthread_mutex_unlock(&c->mu);
    if (last)
        ctx_free(c);
}

/* ---- module cache ------------------------------------------------------------ */

int rt_ctx_default(void *arg, const gen_kvset *shape, gen_kvset *vp, core_err *e)
{
    kf_ctx *c = arg;
    return rt_jit_default(c->jit, shape, &c->dev, vp, e);
}

const rt_module *rt_ctx_find_module(kf_ctx *c, const char *key)
{
    for (int i = 0; i < c->n_mods; i++)
        if (!strcmp(c->mods[i].cache_key, key))
            return &c->mods[i].mod;
    return NULL;
}

/* Loads image under key into the context's module cache. */
kf_status rt_ctx_add_module(kf_ctx *c, const char *key, const void *image, const gen_kernel *k, int n,
                            const rt_module **out)
{
    if (c->n_mods == c->cap_mods) {
        int cap = c->cap_mods ? 2 * c->cap_mods : 16;
        rt_loaded *v = realloc(c->mods, (size_t)cap * sizeof *v);
        if (!v)
            return rt_ctx_err(c, KF_ERR_NOMEM, "out of memory");
        c->mods = v;
        c->cap_mods = cap;
    }
    rt_kernel_desc kd[RT_MODULE_MAX_KERNELS];
    if (n > RT_MODULE_MAX_KERNELS)
        return rt_ctx_err(c, KF_ERR_ARG, "binary '%s' lists %d kernels (at most %d)", key, n, RT_MODULE_MAX_KERNELS);
    for (int i = 0; i < n; i++) {
        snprintf(kd[i].name, sizeof kd[i].name, "%s", k[i].name);
        kd[i].threads = k[i].threads;
        kd[i].smem = k[i].smem;
        kd[i].pdl = k[i].pdl;
    }
    rt_loaded *l = &c->mods[c->n_mods];
    memset(l, 0, sizeof *l);
    if (rt_module_context(c->device, &c->err) || rt_module_load(&l->mod, image, kd, n, &c->err))
        return rt_ctx_err(c, c->err.st, "loading '%s': %s", key, c->err.msg);
    snprintf(l->cache_key, sizeof l->cache_key, "%s", key);
    c->n_mods++;
    *out = &l->mod;
    return KF_OK;
}
