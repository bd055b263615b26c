/* runtime/plan.h: the plan behind kf_plan, shared by the families: selection, binary, workspace, run errors */
#ifndef KF_RT_PLAN_H
#define KF_RT_PLAN_H

#include <stddef.h>

#include "gen/kv.h"
#include "runtime/attn_launch.h"
#include "runtime/ctx.h"
#include "runtime/kforge.h"
#include "runtime/module.h"
#include "runtime/parts_plan.h"
#include "runtime/select.h"
#include "templates/common/attn_params.h"
#include "templates/common/kda_params.h"

typedef enum { RT_PLAN_ATTN = 1, RT_PLAN_KDA = 2, RT_PLAN_PARTS = 3 } rt_plan_family;

struct kf_plan {
    kf_ctx *ctx;
    rt_plan_family family;
    union {
        kf_attn_desc attn;
        kf_kda_desc kda;
        rt_parts_info parts;
    } d;                       /* the description the plan was made for */
    gen_kvset vp;
    char variant[512];
    const char *source;        /* "bundle", "database", "jit", "cache" */
    rt_module mod;             /* a copy (plain data): the context's module cache moves as it grows */
    int n_launch;              /* kernels a run launches, in module order */
    rt_attn_geom geo;          /* attention grids, read from vp at plan time */
    size_t ws_bytes;
    CUdeviceptr ws;
    union {
        kf_attn_params attn;
        kf_kda_params kda;
        kf_parts_params parts;
    } base;                    /* strides and constants resolved at plan time */
};

/* What a family adds to the shared plan machinery. */
typedef struct rt_plan_ops {
    rt_plan_family family;
    /* the family's pure selection function (rt_select, rt_kda_select) on its desc */
    kf_status (*select)(const void *desc, const rt_devinfo *dev, const rt_table *t, rt_default_fn dflt,
                        void *arg, rt_choice *out, core_err *e);
    /* copies desc into p->d, resolves p->base and p->n_launch once p->vp and p->mod are set;
     * returns a status with a message in *e */
    kf_status (*finish)(kf_plan *p, const void *desc, const rt_choice *ch, core_err *e);
} rt_plan_ops;

/* kf_*_supported: the selection's answer, never compiles. */
kf_status rt_plan_supported(kf_ctx *c, const rt_plan_ops *ops, const void *desc);
/* kf_*_plan: select, acquire the binary (cache, bundle, database, JIT), finish, allocate the workspace. */
kf_status rt_plan_new(kf_ctx *c, const rt_plan_ops *ops, const void *desc, kf_plan **out);
/* Sets the context's message under its lock (runs hold no lock) and returns st. */
kf_status rt_plan_err(kf_plan *p, kf_status st, const char *fmt, ...);

/* The kernel parameters of one KDA call of plan p (desc d, resolved base, variant vp, workspace
 * ws_bytes of the plan at plan_ws): every argument checked (status KF_ERR_ARG or KF_ERR_UNSUPPORTED
 * with a message naming the tensors field and its value). Pure: no device, no allocation. */
kf_status rt_kda_bind(const kf_kda_desc *d, const kf_kda_params *base, const gen_kvset *vp, size_t ws_bytes,
                      void *plan_ws, const kf_kda_tensors *t, kf_kda_params *out, core_err *e);

#endif
