/* tuner/tune_family.h: the family table, tuner side: work figure, tuner runner and CPU reference of each family */
#ifndef KF_TUNER_TUNE_FAMILY_H
#define KF_TUNER_TUNE_FAMILY_H

#include <stddef.h>

#include "gen/build.h"
#include "gen/kv.h"
#include "runtime/family.h"
#include "tuner/attn_run.h"
#include "tuner/tune_work.h"

/*
 * The tuner's extension of the family table (runtime/family.h says why there are two tables):
 * tune_families[i] is the entry of rt_families[i], in the same order; tune_family_check() says
 * whether the names agree (the sweep calls it before it plans; tests/cpu/test_tune asserts it).
 */

/* A family's tuner runner: one shape's inputs, its correctness gate and its timing, behind one
 * set of calls (tuner/gqa_run.c, tuner/kda_run.c, tuner/parts_run.c). The calls that have the
 * session leave what failed on it (tune_ctx_errmsg, tune_ctx_status). */
typedef struct tune_runner {
    /* The per-shape state (inputs are made on first use, on the session's device; no session yet):
     * NULL with *e set when shape is not one of the family's (KF_ERR_ARG) or no memory. */
    void *(*make)(const gen_kvset *shape, core_err *e);
    /* Frees the state's host and device buffers (ctx: the session they were made in, or NULL). */
    void (*release)(void *st, tune_ctx *ctx);
    /* A reference binary the gate needs besides the CPU one (GQA's GPU naive kernel on large
     * cases): 1 with j prepared (gen_build_prepare; the sweep builds it with the shape's
     * variants), 0 when none, -1 with the host's message. NULL: never. */
    int (*ref_job)(void *st, gen_host *h, const gen_target *tg, gen_job *j);
    /* Gate: 0 when the variant ran (*pass, *rel_err; the verdict, a result, in verdict: why it failed
     * the check, or its figures), -1 on an error of the harness or the driver (on ctx; verdict "").
     * ref: the built ref_job, or NULL. verdictn >= 1. */
    int (*gate)(tune_ctx *ctx, void *st, const tune_compiled *v, const tune_compiled *ref, int *pass,
                double *rel_err, char *verdict, size_t verdictn);
    /* One timing of v on the shape's timing case (tune_ctx_time). -1 on error (on ctx). */
    int (*time)(tune_ctx *ctx, void *st, const tune_compiled *v, int samples, tune_timing *t);
} tune_runner;

typedef struct tune_family {
    rt_family_id id;
    const char *name;                /* rt_families[id].name */
    /* The work of one call of shape (bytes or FLOPs, tuner/tune_work.h); NULL: unknown (NaN). */
    void (*work)(const gen_kvset *shape, tune_work *w);
    /* The ceilings kind of a bytes figure: "copy" when it counts written bytes too, else "read". */
    const char *bytes_ceiling;
    const tune_runner *runner;       /* NULL: none (`kforge tune` times the families the runtime's table
                                      * marks tuned, each with a runner; a helper may have one for
                                      * `kforge run`) */
    /* `kforge run` checks it on tune_attn_case, the GQA harness (tuner/attn_run.h), with its full
     * report (o, lse, stray writes); else through the runner's gate. */
    int attn_case;
    const char *reference;           /* the CPU fp64 reference the gate compares with, for `kforge list` */
} tune_family;

extern const tune_family tune_families[RT_FAM_COUNT];

/* The entry named name (NULL: a family the table does not list). */
const tune_family *tune_family_find(const char *name);
/* The entry of an entry of the runtime's table. */
static inline const tune_family *tune_family_of(const rt_family *f) { return f ? &tune_families[f->id] : NULL; }
/* 0 when every entry names the family of the same index of rt_families, else -1 with the first that
 * does not in *e (KF_ERR_ARG). */
int tune_family_check(core_err *e);

#endif
