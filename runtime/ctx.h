/* runtime/ctx.h: the context behind kf_ctx: device, tuned table, bundles, database, module cache, message */
#ifndef KF_RT_CTX_H
#define KF_RT_CTX_H

#include <pthread.h>
#include <stddef.h>

#include "core/err.h"
#include "db/bundle.h"
#include "db/db.h"
#include "gen/kernels.h"
#include "runtime/cuda.h"
#include "runtime/jit.h"
#include "runtime/kforge.h"
#include "runtime/module.h"
#include "runtime/select.h"

typedef struct rt_loaded {
    char cache_key[600];
    rt_module mod;
} rt_loaded;

struct kf_ctx {
    int device;
    rt_devinfo dev;
    const rt_cu *cu;           /* NULL when kf_open found no driver/device */
    db_store *db;
    rt_jit *jit;               /* NULL: JIT off (or libkforge_rt) */
    rt_table table;
    db_bundle **bundles;
    int n_bundles;
    rt_loaded *mods;
    int n_mods, cap_mods;
    int plans;                 /* live plans */
    int closed;                /* kf_close was called: the last kf_plan_free frees the context */
    pthread_mutex_t mu;        /* plans, the module cache, the JIT host and the message */
    core_err err;              /* the last failure's status and message (kf_errmsg) */
};

/* Sets the context's status and message (printf-style) and returns st. The caller holds c->mu, or
 * owns c alone (kf_open). */
kf_status rt_ctx_err(kf_ctx *c, kf_status st, const char *fmt, ...);

/* A plan of c was freed (its workspace already released): the last one of a closed context frees it. */
void rt_ctx_plan_freed(kf_ctx *c);

/* The template default of shape through the context's JIT host (an rt_default_fn; arg is the
 * kf_ctx). Caller holds c->mu. */
int rt_ctx_default(void *arg, const gen_kvset *shape, gen_kvset *vp, core_err *e);

/* The module loaded under cache key, or NULL. Caller holds c->mu. */
const rt_module *rt_ctx_find_module(kf_ctx *c, const char *key);

/* Loads image under key into the module cache (n kernels in launch order). Caller holds c->mu. */
kf_status rt_ctx_add_module(kf_ctx *c, const char *key, const void *image, const gen_kernel *k, int n,
                            const rt_module **out);

#endif
