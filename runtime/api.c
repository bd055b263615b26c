/* runtime/api.c: the public C API: contexts, plans (select, load, workspace) and graph-safe runs */
#include "runtime/kforge.h"
#include "db/bundle.h"
#include "gen/kernels.h"
#include "runtime/attn_launch.h"
#include "runtime/jit.h"
#include "runtime/module.h"
#include "runtime/select.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KF_VERSION_STR
#define KF_VERSION_STR "0.1.0"
#endif

typedef struct rt_loaded {
    char cache_key[600];
    rt_module mod;
} rt_loaded;

struct kf_ctx {
    int device;
    rt_devinfo dev;
    const rt_cu *cu;
    db_store *db;
    rt_jit *jit;
    rt_table table;
    db_bundle **bundles;
    int n_bundles;
    rt_loaded *mods;
    int n_mods, cap_mods;
    int plans;                 /* live plans */
    pthread_mutex_t mu;        /* plans, the module cache, the JIT host and the message */
    char err[2048];
};

struct kf_plan {
    kf_ctx *ctx;
    kf_attn_desc d;
    gen_kvset vp;
    char variant[512];
    const char *source;
    const rt_module *mod;
    int n_launch;
    size_t ws_bytes;
    CUdeviceptr ws;
    kf_attn_params base;       /* strides and constants resolved at plan time */
};

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

static kf_status set_err(kf_ctx *c, kf_status st, const char *fmt, ...)
{
    char buf[sizeof c->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(c->err, buf, sizeof buf);
    return st;
}

const char *kf_errmsg(const kf_ctx *ctx) { return ctx ? ctx->err : "out of memory"; }

/* ---- context ---------------------------------------------------------------- */

/* A winner row (shape key "b1.causal0.d128.dtype-bf16...", params "name=value,...")
 * as the selection table holds it. */
static int winner_of(const char *family, const char *shape_key, const char *params, const char *variant,
                     const char *cache_key, int from_bundle, rt_winner *r)
{
    char err[128], shape[512], conv[1024] = "";
    memset(r, 0, sizeof *r);
    if (gen_kv_parse(&r->vp, params, err, sizeof err) || gen_kv_set_str(&r->vp, "family", family))
        return -1;
    snprintf(shape, sizeof shape, "%s", shape_key);
    size_t n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(shape, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
        char *dash = strchr(tok, '-');
        size_t k = 0;
        if (dash)
            k = (size_t)(dash - tok);
        else
            while (tok[k] && (tok[k] < '0' || tok[k] > '9'))
                k++;
        n += (size_t)snprintf(conv + n, sizeof conv - n, "%s%.*s=%s", n ? "," : "", (int)k, tok,
                              tok + k + (dash ? 1 : 0));
        if (n >= sizeof conv)
            return -1;
    }
    if (gen_kv_parse(&r->shape, conv, err, sizeof err) || gen_kv_set_str(&r->shape, "family", family))
        return -1;
    snprintf(r->variant, sizeof r->variant, "%s", variant);
    snprintf(r->cache_key, sizeof r->cache_key, "%s", cache_key ? cache_key : "");
    r->from_bundle = from_bundle;
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
    if (winner_of(w->family, w->shape_key, w->params, w->variant_key, w->cache_key, 0, &r) ||
        rt_table_add(&l->c->table, &r))
        l->bad++;
    return 0;
}

static kf_status load_bundle(kf_ctx *c, const char *path)
{
    char err[1024];
    db_bundle *b;
    if (!path)
        return set_err(c, KF_ERR_ARG, "config.bundles has a NULL path");
    if (db_bundle_load(path, c->dev.arch, &b, err, sizeof err))
        return set_err(c, KF_ERR_BUNDLE, "%s", err);
    if (strcmp(db_bundle_gpu(b), c->dev.name)) {
        set_err(c, KF_ERR_BUNDLE, "cannot load bundle '%s': it was tuned on '%s' and device %d is '%s'", path,
                db_bundle_gpu(b), c->device, c->dev.name);
        db_bundle_free(b);
        return KF_ERR_BUNDLE;
    }
    db_bundle **v = realloc(c->bundles, (size_t)(c->n_bundles + 1) * sizeof *v);
    if (!v) {
        db_bundle_free(b);
        return set_err(c, KF_ERR_NOMEM, "out of memory");
    }
    c->bundles = v;
    c->bundles[c->n_bundles++] = b;
    for (int i = 0; i < db_bundle_n_winners(b); i++) {
        const db_bundle_winner *w = db_bundle_winner_at(b, i);
        rt_winner r;
        if (winner_of(w->family, w->shape_key, w->params, w->variant_key, w->cache_key, 1, &r) ||
            rt_table_add(&c->table, &r))
            return set_err(c, KF_ERR_BUNDLE, "cannot load bundle '%s': winner '%s' is malformed", path,
                           w->variant_key);
    }
    return KF_OK;
}

kf_status kf_open(kf_ctx **out, const kf_config *cfg)
{
    kf_config dflt = KF_CONFIG_INIT;
    if (!cfg)
        cfg = &dflt;
    kf_ctx *c = calloc(1, sizeof *c);
    *out = c;
    if (!c)
        return KF_ERR_NOMEM;
    pthread_mutex_init(&c->mu, NULL);
    c->device = cfg->device;
    if (cfg->jit != KF_JIT_ALLOW && cfg->jit != KF_JIT_FORBID)
        return set_err(c, KF_ERR_ARG, "config.jit must be KF_JIT_ALLOW or KF_JIT_FORBID, got %d", cfg->jit);
    if (cfg->n_bundles < 0 || (cfg->n_bundles > 0 && !cfg->bundles))
        return set_err(c, KF_ERR_ARG, "config.bundles is NULL with config.n_bundles = %d", cfg->n_bundles);
    char err[1024];
    c->cu = rt_cuda(err, sizeof err);
    if (!c->cu)
        return set_err(c, KF_ERR_CUDA, "%s", err);
    if (rt_device_info(cfg->device, &c->dev, err, sizeof err) ||
        rt_module_context(cfg->device, err, sizeof err))
        return set_err(c, KF_ERR_CUDA, "config.device = %d: %s", cfg->device, err);
    for (int i = 0; i < cfg->n_bundles; i++) {
        kf_status st = load_bundle(c, cfg->bundles[i]);
        if (st)
            return st;
    }
    if (cfg->db_path) {
        if (db_open(&c->db, cfg->db_path, DB_CREATE) != DB_OK)
            return set_err(c, KF_ERR_DB, "%s", db_errmsg(c->db));
        struct load_ctx l = {c, 0};
        if (db_winner_each(c->db, c->dev.name, NULL, winner_cb, &l) != DB_OK)
            return set_err(c, KF_ERR_DB, "%s", db_errmsg(c->db));
    }
    if (cfg->jit == KF_JIT_ALLOW) {
        c->jit = rt_jit_new(cfg->template_dir, err, sizeof err);  /* NULL in libkforge_rt */
    }
    return KF_OK;
}

void kf_close(kf_ctx *c)
{
    if (!c)
        return;
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

/* ---- planning ---------------------------------------------------------------- */

static int jit_default(void *arg, const gen_kvset *shape, gen_kvset *vp, char *err, size_t errn)
{
    kf_ctx *c = arg;
    return rt_jit_default(c->jit, shape, &c->dev, vp, err, errn);
}

kf_status kf_attn_supported(kf_ctx *c, const kf_attn_desc *d)
{
    if (!c)
        return KF_ERR_ARG;
    pthread_mutex_lock(&c->mu);
    rt_choice ch;
    char msg[1024];
    kf_status st = KF_ERR_CUDA;
    snprintf(msg, sizeof msg, "the context has no device (kf_open failed)");
    if (c->cu)
        st = rt_select(d, &c->dev, &c->table, c->jit ? jit_default : NULL, c, &ch, msg, sizeof msg);
    if (st)
        set_err(c, st, "%s", msg);
    pthread_mutex_unlock(&c->mu);
    return st;
}

static const rt_module *find_module(kf_ctx *c, const char *key)
{
    for (int i = 0; i < c->n_mods; i++)
        if (!strcmp(c->mods[i].cache_key, key))
            return &c->mods[i].mod;
    return NULL;
}

/* Loads image under key into the context's module cache. */
static kf_status add_module(kf_ctx *c, const char *key, const void *image, const gen_kernel *k, int n,
                            const rt_module **out)
{
    if (c->n_mods == c->cap_mods) {
        int cap = c->cap_mods ? 2 * c->cap_mods : 16;
        rt_loaded *v = realloc(c->mods, (size_t)cap * sizeof *v);
        if (!v)
            return set_err(c, KF_ERR_NOMEM, "out of memory");
        c->mods = v;
        c->cap_mods = cap;
    }
    rt_kernel_desc kd[RT_MODULE_MAX_KERNELS];
    if (n > RT_MODULE_MAX_KERNELS)
        return set_err(c, KF_ERR_ARG, "binary '%s' lists %d kernels (at most %d)", key, n, RT_MODULE_MAX_KERNELS);
    for (int i = 0; i < n; i++) {
        snprintf(kd[i].name, sizeof kd[i].name, "%s", k[i].name);
        kd[i].threads = k[i].threads;
        kd[i].smem = k[i].smem;
    }
    char err[1024];
    rt_loaded *l = &c->mods[c->n_mods];
    memset(l, 0, sizeof *l);
    if (rt_module_context(c->device, err, sizeof err) || rt_module_load(&l->mod, image, kd, n, err, sizeof err))
        return set_err(c, KF_ERR_CUDA, "loading '%s': %s", key, err);
    snprintf(l->cache_key, sizeof l->cache_key, "%s", key);
    c->n_mods++;
    *out = &l->mod;
    return KF_OK;
}

/* The binary of the chosen variant: module cache, database, or a JIT compile. */
static kf_status acquire(kf_ctx *c, const rt_choice *ch, kf_plan *p)
{
    char variant[512], key[600], err[2048];
    if (ch->winner) {
        snprintf(variant, sizeof variant, "%s", ch->winner->variant);
        snprintf(key, sizeof key, "%s", ch->winner->cache_key);
    } else if (!c->jit || rt_jit_keys(c->jit, &ch->vp, &c->dev, variant, sizeof variant, key, sizeof key,
                                      err, sizeof err)) {
        return set_err(c, KF_ERR_NOT_TUNED, "%s", c->jit ? err : "no winner and no generator");
    }
    snprintf(p->variant, sizeof p->variant, "%s", variant);
    if ((p->mod = find_module(c, key))) {
        p->source = "cache";
        return KF_OK;
    }
    for (int i = 0; i < c->n_bundles; i++) {
        const db_bundle_binary *x = db_bundle_find(c->bundles[i], key);
        if (!x)
            continue;
        gen_kernel k[8];
        int n = gen_kernels_parse(x->kernels, k, 8);
        p->source = "bundle";
        if (n < 0)
            return set_err(c, KF_ERR_BUNDLE, "binary '%s' has a malformed kernel list '%s'", key, x->kernels);
        return add_module(c, key, x->image, k, n, &p->mod);
    }
    if (c->db) {
        db_binary b;
        db_rc rc = db_binary_get(c->db, key, &b);
        if (rc == DB_ERROR)
            return set_err(c, KF_ERR_DB, "%s", db_errmsg(c->db));
        if (rc == DB_OK) {
            gen_kernel k[8];
            int n = gen_kernels_parse(b.kernels, k, 8);
            kf_status st = n < 0 ? set_err(c, KF_ERR_DB, "binary '%s' has a malformed kernel list '%s'", key, b.kernels)
                                 : add_module(c, key, b.image, k, n, &p->mod);
            db_binary_free(&b);
            p->source = "database";
            return st;
        }
    }
    if (!c->jit) {
        char shape[512];
        gen_kvset s = ch->shape;
        gen_kv_remove(&s, "family");
        gen_kv_keyform(&s, shape, sizeof shape);
        return set_err(c, KF_ERR_NOT_TUNED, "binary '%s' for shape %s is in no bundle or database and JIT is off",
                       key, shape);
    }
    rt_binary bin;
    if (rt_jit_compile(c->jit, &ch->vp, &c->dev, c->db, &bin, err, sizeof err))
        return set_err(c, strstr(err, "nvrtc") ? KF_ERR_NVRTC : KF_ERR_DB, "%s", err);
    kf_status st = add_module(c, key, bin.image, bin.kernels, bin.n_kernels, &p->mod);
    free(bin.image);
    p->source = "jit";
    return st;
}

kf_status kf_attn_plan(kf_ctx *c, const kf_attn_desc *d, kf_plan **out)
{
    if (!c)
        return KF_ERR_ARG;
    if (!out)
        return set_err(c, KF_ERR_ARG, "out is NULL");
    *out = NULL;
    if (!c->cu)
        return set_err(c, KF_ERR_CUDA, "the context has no device");
    pthread_mutex_lock(&c->mu);
    rt_choice ch;
    char msg[1024];
    kf_status st = rt_select(d, &c->dev, &c->table, c->jit ? jit_default : NULL, c, &ch, msg, sizeof msg);
    kf_plan *p = NULL;
    if (st) {
        set_err(c, st, "%s", msg);
        goto out;
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        st = set_err(c, KF_ERR_NOMEM, "out of memory");
        goto out;
    }
    p->ctx = c;
    p->d = *d;
    p->vp = ch.vp;
    st = acquire(c, &ch, p);
    if (st)
        goto out;
    rt_attn_base_params(d, &p->vp, &p->base);
    const char *family = gen_kv_str(&p->vp, "family");
    p->n_launch = p->mod->n;
    if (family && !strcmp(family, "attn_decode") && p->base.splits <= 1)
        p->n_launch = 1;  /* the combine kernel runs only for split variants */
    p->ws_bytes = ch.workspace;
    if (p->ws_bytes) {
        CUresult r = c->cu->MemAlloc(&p->ws, p->ws_bytes);
        if (r) {
            char e[128];
            rt_cuda_errstr(r, e, sizeof e);
            st = set_err(c, KF_ERR_CUDA, "cuMemAlloc of %zu bytes of workspace: %s", p->ws_bytes, e);
            goto out;
        }
    }
    c->plans++;
out:
    if (st) {
        if (p && p->ws)
            c->cu->MemFree(p->ws);
        free(p);
        p = NULL;
    }
    *out = p;
    pthread_mutex_unlock(&c->mu);
    return st;
}

size_t kf_plan_workspace(const kf_plan *p) { return p ? p->ws_bytes : 0; }
const char *kf_plan_variant(const kf_plan *p) { return p ? p->variant : ""; }
const char *kf_plan_source(const kf_plan *p) { return p ? p->source : ""; }

void kf_plan_free(kf_plan *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->ctx->mu);
    if (p->ws)
        p->ctx->cu->MemFree(p->ws);
    p->ctx->plans--;
    pthread_mutex_unlock(&p->ctx->mu);
    free(p);
}

/* ---- running ------------------------------------------------------------------ */

static kf_status run_err(kf_plan *p, kf_status st, const char *fmt, ...)
{
    kf_ctx *c = p->ctx;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->mu);
    set_err(c, st, "%s", buf);
    pthread_mutex_unlock(&c->mu);
    return st;
}

static int misaligned(const void *ptr) { return ((uintptr_t)ptr & 15u) != 0; }

kf_status kf_attn_run(kf_plan *p, const kf_attn_tensors *t, void *stream)
{
    if (!p)
        return KF_ERR_ARG;
    if (!t)
        return run_err(p, KF_ERR_ARG, "tensors is NULL");
    const kf_attn_desc *d = &p->d;
    static const char *const names[4] = {"q", "k", "v", "o"};
    const void *ptrs[4] = {t->q, t->k, t->v, t->o};
    for (int i = 0; i < 4; i++) {
        if (!ptrs[i])
            return run_err(p, KF_ERR_ARG, "tensors.%s is NULL", names[i]);
        if (misaligned(ptrs[i]))
            return run_err(p, KF_ERR_UNSUPPORTED, "tensors.%s = %p is not 16-byte aligned", names[i], ptrs[i]);
    }
    if (t->lse && ((uintptr_t)t->lse & 3u))
        return run_err(p, KF_ERR_ARG, "tensors.lse = %p is not 4-byte aligned", (void *)t->lse);
    if (t->batch < 0 || t->batch > d->max_batch)
        return run_err(p, KF_ERR_ARG, "tensors.batch = %d is outside 0..%d (the plan's max_batch)", t->batch,
                       d->max_batch);
    if (t->q_len < 1 || t->q_len > d->max_q)
        return run_err(p, KF_ERR_ARG, "tensors.q_len = %d is outside 1..%d (the plan's max_q)", t->q_len, d->max_q);
    if (!t->kv_len && (t->kv_len_all < 0 || t->kv_len_all > d->max_kv))
        return run_err(p, KF_ERR_ARG, "tensors.kv_len_all = %d is outside 0..%d (the plan's max_kv)",
                       t->kv_len_all, d->max_kv);
    if (d->packed_q && !t->cu_seqlens_q)
        return run_err(p, KF_ERR_ARG, "tensors.cu_seqlens_q is NULL but the plan has packed_q");
    if (d->packed_q && (t->total_q < 0 || t->total_q > (long long)d->max_batch * d->max_q))
        return run_err(p, KF_ERR_ARG, "tensors.total_q = %d is outside 0..%lld", t->total_q,
                       (long long)d->max_batch * d->max_q);
    if (t->workspace && misaligned(t->workspace))
        return run_err(p, KF_ERR_UNSUPPORTED, "tensors.workspace = %p is not 16-byte aligned", t->workspace);
    if (t->batch == 0)
        return KF_OK;
    kf_attn_params a = p->base;
    a.q = t->q, a.k = t->k, a.v = t->v, a.o = t->o, a.lse = t->lse;
    a.cu_seqlens_q = d->packed_q ? t->cu_seqlens_q : NULL;
    a.kv_len = t->kv_len;
    a.b = t->batch;
    a.sq = t->q_len;
    a.skv = t->kv_len ? d->max_kv : t->kv_len_all;
    a.ws_rows = d->packed_q ? t->total_q : t->batch * t->q_len;
    /* lse [B, Hq, Sq] for this call's Sq, or [Hq, total] packed */
    a.lse_sh = d->packed_q ? t->total_q : t->q_len;
    a.lse_sb = (long long)d->hq * t->q_len;
    if (p->ws_bytes) {
        char *ws = t->workspace ? t->workspace : (char *)(uintptr_t)p->ws;
        a.ws_o = (float *)ws;
        a.ws_lse = (float *)(ws + (size_t)a.splits * a.ws_rows * a.hq * d->d * sizeof(float));
    }
    void *args[] = {&a};
    for (int i = 0; i < p->n_launch; i++) {
        unsigned grid[3];
        char err[512];
        if (rt_attn_grid(&p->vp, &a, i, grid))
            return run_err(p, KF_ERR_ARG, "no launch grid for kernel %d of '%s' (batch %d, q_len %d)", i,
                           p->variant, t->batch, t->q_len);
        if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
            continue;
        if (rt_module_launch(p->mod, i, grid, args, (CUstream)stream, err, sizeof err))
            return run_err(p, KF_ERR_CUDA, "%s", err);
    }
    return KF_OK;
}
