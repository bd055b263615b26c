/* runtime/plan.c: plans of every family: selection, the binary (cache, bundle, database, JIT), workspace, free */
#include "runtime/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/binkey.h"

/* The binary of the chosen variant: module cache, bundle, database, or a JIT compile. */
static kf_status acquire_module(kf_ctx *c, const rt_choice *ch, kf_plan *p, const rt_module **mod)
{
    char variant[512], key[600];
    if (rt_binary_keys(c->jit, ch, &c->dev, variant, sizeof variant, key, sizeof key, &c->err) < 0)
        return rt_ctx_err(c, KF_ERR_NOT_TUNED, "%s", c->err.msg);   /* whatever the generator's reason */
    snprintf(p->variant, sizeof p->variant, "%s", variant);
    if ((*mod = rt_ctx_find_module(c, key))) {
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
            return rt_ctx_err(c, KF_ERR_BUNDLE, "binary '%s' has a malformed kernel list '%s'", key, x->kernels);
        return rt_ctx_add_module(c, key, x->image, k, n, mod);
    }
    if (c->db) {
        db_binary b;
        db_rc rc = db_binary_get(c->db, key, &b);
        if (rc == DB_ERROR)
            return rt_ctx_err(c, KF_ERR_DB, "%s", db_errmsg(c->db));
        if (rc == DB_OK) {
            gen_kernel k[8];
            int n = gen_kernels_parse(b.kernels, k, 8);
            kf_status st = n < 0 ? rt_ctx_err(c, KF_ERR_DB, "binary '%s' has a malformed kernel list '%s'", key, b.kernels)
                                 : rt_ctx_add_module(c, key, b.image, k, n, mod);
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
        return rt_ctx_err(c, KF_ERR_NOT_TUNED, "binary '%s' for shape %s is in no bundle or database and JIT is off",
                          key, shape);
    }
    rt_binary bin;
    kf_status jst = rt_jit_compile(c->jit, &ch->vp, &c->dev, c->db, &bin, &c->err);
    if (jst)
        return jst;
    kf_status st = rt_ctx_add_module(c, key, bin.image, bin.kernels, bin.n_kernels, mod);
    free(bin.image);
    p->source = "jit";
    return st;
}

/* The plan keeps a copy of the module (plain data): the cache's array moves when it grows. */
static kf_status acquire(kf_ctx *c, const rt_choice *ch, kf_plan *p)
{
    const rt_module *m = NULL;
    kf_status st = acquire_module(c, ch, p, &m);
    if (st == KF_OK)
        p->mod = *m;
    return st;
}

kf_status rt_plan_supported(kf_ctx *c, const rt_plan_ops *ops, const void *desc)
{
    if (!c)
        return KF_ERR_ARG;
    pthread_mutex_lock(&c->mu);
    rt_choice ch;
    kf_status st = c->cu ? ops->select(desc, &c->dev, &c->table, c->jit ? rt_ctx_default : NULL, c, &ch, &c->err)
                         : rt_ctx_err(c, KF_ERR_CUDA, "the context has no device (kf_open failed)");
    pthread_mutex_unlock(&c->mu);
    return st;
}

kf_status rt_plan_new(kf_ctx *c, const rt_plan_ops *ops, const void *desc, kf_plan **out)
{
    if (!c)
        return KF_ERR_ARG;
    if (!out)
        return rt_ctx_err(c, KF_ERR_ARG, "out is NULL");
    *out = NULL;
    if (!c->cu)
        return rt_ctx_err(c, KF_ERR_CUDA, "the context has no device");
    pthread_mutex_lock(&c->mu);
    rt_choice ch;
    kf_status st = ops->select(desc, &c->dev, &c->table, c->jit ? rt_ctx_default : NULL, c, &ch, &c->err);
    kf_plan *p = NULL;
    if (st)
        goto out;
    p = calloc(1, sizeof *p);
    if (!p) {
        st = rt_ctx_err(c, KF_ERR_NOMEM, "out of memory");
        goto out;
    }
    p->ctx = c;
    p->family = ops->family;
    p->vp = ch.vp;
    st = acquire(c, &ch, p);
    if (st)
        goto out;
    st = ops->finish(p, desc, &ch, &c->err);
    if (st)
        goto out;
    p->ws_bytes = ch.workspace;
    if (p->ws_bytes) {
        CUresult r = c->cu->MemAlloc(&p->ws, p->ws_bytes);
        if (r) {
            char e[128];
            rt_cuda_errstr(r, e, sizeof e);
            st = rt_ctx_err(c, KF_ERR_CUDA, "cuMemAlloc of %zu bytes of workspace: %s", p->ws_bytes, e);
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
    kf_ctx *c = p->ctx;
    pthread_mutex_lock(&c->mu);
    if (p->ws)
        c->cu->MemFree(p->ws);
    pthread_mutex_unlock(&c->mu);
    free(p);
    rt_ctx_plan_freed(c);
}

kf_status rt_plan_err(kf_plan *p, kf_status st, const char *fmt, ...)
{
    kf_ctx *c = p->ctx;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->mu);
    rt_ctx_err(c, st, "%s", buf);
    pthread_mutex_unlock(&c->mu);
    return st;
}
