/* tuner/combine_run.h: the tuner's split-KV combine runner (attn_combine): a gate against ref_attn_combine and timing */
#ifndef KF_TUNER_COMBINE_RUN_H
#define KF_TUNER_COMBINE_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "gen/kv.h"
#include "tuner/attn_run.h"
#include "tuner/tune_ctx.h"

/* attn_combine: random partials (some splits empty, lse -inf; some rows with every split
 * empty) of b*sq rows x hq heads x dv, merged by v, against ref_attn_combine. */
typedef struct tune_combine_case {
    check_dtype dtype;
    int b, sq, hq, dv, splits;
    uint64_t seed;
    int sinks;                     /* 1: sink logits tune_attn_sink(h) (the variant built with sinks=1) */
} tune_combine_case;
/* As tune_attn_check: 0 when the variant ran (r->pass, r->msg the verdict), -1 with the error on ctx. */
int tune_attn_check_combine(tune_ctx *ctx, const tune_compiled *v, const tune_combine_case *c,
                            tune_attn_result *r);

/*
 * One attn_combine shape (dtype, b, sq, hq, dv), with the gate (tune_attn_check_combine of 4 splits,
 * fresh partials each call) and the timing case (4 splits of partials filled once). A helper family:
 * `kforge run attn_combine` uses it, `kforge tune` does not time it (attn_decode's combine is timed
 * with it). The same shape of runner as tuner/gqa_run.h, tuner/kda_run.h, tuner/parts_run.h.
 */
typedef struct tune_combine tune_combine;

/* NULL with *e set when the shape is not an attn_combine shape (KF_ERR_ARG) or no memory. */
tune_combine *tune_combine_new(const gen_kvset *shape, core_err *e);
void tune_combine_free(tune_combine *k, tune_ctx *ctx);
/* As tune_runner's gate (tuner/tune_family.h): 0 with the verdict, -1 with the error on ctx. */
int tune_combine_gate(tune_ctx *ctx, tune_combine *k, const tune_compiled *v, int *pass, double *rel_err,
                      char *verdict, size_t verdictn);
int tune_combine_time(tune_ctx *ctx, tune_combine *k, const tune_compiled *v, int samples, tune_timing *t);

#endif
