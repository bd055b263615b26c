/* tuner/tune_ctx_int.h: inside the tuner session (tune_ctx.c) and its GQA harness (attn_run.c): the struct, driver-call helpers */
#ifndef KF_TUNER_TUNE_CTX_INT_H
#define KF_TUNER_TUNE_CTX_INT_H

#include <stdlib.h>

#include "core/err.h"
#include "runtime/cuda.h"
#include "runtime/module.h"
#include "runtime/nvml.h"
#include "tuner/attn_run.h"
#include "tuner/tune_clock.h"
#include "tuner/tune_ilv.h"
#include "tuner/tune_phase.h"

/* Not for the runners: they use the session through tuner/tune_ctx.h alone. The GQA harness
 * (attn_run.c) keeps its upload caches (the last timing case's inputs on the device, the last gate
 * case's host inputs and reference) in the session, which frees them on close. */

typedef struct host_in {
    void *q, *k, *v;           /* storage, NaN outside the logical elements */
    size_t esz;
    size_t kv_esz;             /* of k and v: esz, or 1 (FP8) */
} host_in;

struct tune_ctx {
    core_err err;              /* the last failure's status and message (tune_ctx_errmsg) */
    const rt_cu *cu;
    int ordinal;
    rt_devinfo info;
    CUdeviceptr flush;         /* L2 flush buffer */
    size_t flush_bytes;
    unsigned char flush_val;
    int broken;                /* a sticky CUDA error happened */
    /* tune_attn_time keeps the inputs of the last case on the device, so timing the
     * variants of one shape fills and uploads them once (not once per variant) */
    int tc_valid;
    tune_attn_case tc;         /* with its seed resolved; kv_len/q_lens point at tc_kv/tc_q */
    int *tc_kv, *tc_q;
    CUdeviceptr tc_in[6];      /* q, k, v, cu_q, cu_k, kv_len */
    CUdeviceptr tc_set[TUNE_ROTATE_MAX_SETS][3];   /* sustained timing: q, k, v of sets 1.. (0: tc_in) */
    int tc_sets;               /* input sets made (1: tc_in alone) */
    size_t tc_bytes[3];        /* bytes of q, k, v */
    uint64_t time_seed;        /* timing inputs when the case has no seed */
    /* tune_attn_check with a given seed (the tuner: one fresh seed per shape) keeps the host inputs
     * and the reference of the last case, so the gates of a shape's variants fill the inputs and
     * compute the reference once; each gate still uploads the inputs into fresh buffers and
     * poisons fresh outputs */
    int gc_valid;
    tune_attn_case gc;         /* kv_len/q_lens point at gc_kv/gc_q */
    int *gc_kv, *gc_q;
    const void *gc_naive;      /* the GPU naive reference's image, NULL: the CPU fp64 one */
    host_in gc_in;
    double *gc_ref_o, *gc_ref_lse;
    /* tune_hold: modules kept loaded between calls, keyed by image address; slot 0 the
     * variant's, slot 1 the naive reference's */
    int hold;
    struct held { const void *image; rt_module m; } held[2];
    tune_phases *ph;           /* tune_set_phases, or NULL */
    int timing;                /* TUNE_TIMING_* */
    rt_nvml_dev *nvml;         /* NULL: clocks and power unknown */
    double last_busy;          /* host time the last timing's GPU work ended (0: never) */
    int extra_every;           /* tune_set_extra */
    double rewarm_ms;          /* tune_set_rewarm */
    int rewarm_calls;          /* its call cap (0: none) */
    CUstream stream;           /* where the runners launch (tune_ctx_stream): NULL, or a capturing stream */
};

/* The phase counter f of ctx, NULL when nobody counts (tune_lap takes NULL). */
#define PH(f) (ctx->ph ? &ctx->ph->f : NULL)

static inline void host_in_free(host_in *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    h->q = h->k = h->v = NULL;
}

/* Records a failed driver call on the session (marking the context broken on a sticky error); returns -1. */
#define cu_fail(c, r, what) tune_ctx_fail((c), (int)(r), (what))

/* A driver call of a function that has the session as `ctx`: its failure set there, -1 returned. */
#define CU_TRY(call, what)                                                                         \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_)                                                                                    \
            return cu_fail(ctx, r_, what);                                                         \
    } while (0)

/* Loads v's binary into *m (the caller unloads it); -1 on error (on ctx). */
int tune_ctx_load(tune_ctx *ctx, const tune_compiled *v, rt_module *m);
/* Drops the GQA harness's upload caches: the timing case's device inputs, the gate case's host inputs
 * and reference. */
void tune_ctx_time_cache_drop(tune_ctx *c);
void tune_ctx_gate_cache_drop(tune_ctx *c);
/* cuMemAlloc of bytes (16 when 0) into *p; -1 on error (on ctx). */
int tune_ctx_alloc(tune_ctx *ctx, CUdeviceptr *p, size_t bytes);

#endif
