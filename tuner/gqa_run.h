/* tuner/gqa_run.h: the tuner's GQA attention runner (attn_prefill, attn_decode): a gate against the CPU fp64 reference or the GPU naive kernel, and timing */
#ifndef KF_TUNER_GQA_RUN_H
#define KF_TUNER_GQA_RUN_H

#include <stddef.h>

#include "gen/build.h"
#include "gen/kv.h"
#include "tuner/attn_run.h"
#include "tuner/tune_work.h"

/*
 * One attn_prefill or attn_decode shape of a sweep (dtype, b, sq, skv, hq, hkv, d, causal), with:
 *  - the gate case (tune_gate_case): the shape bounded in size, ragged decode lengths, fresh inputs
 *    drawn once per shape and run (every variant gated on them: tune_attn_check keeps the host inputs
 *    and the reference), against the CPU fp64 reference, or past TUNE_GATE_CPU_REF_MAX of its work
 *    against the GPU naive kernel (tune_gqa_ref_job), itself first checked against the CPU reference
 *    on a small case of the shape (a naive kernel that disagrees gates nothing: the shape falls back
 *    to the CPU reference, with a warning);
 *  - the timing case (tune_time_case): exactly the shape, inputs from a seed of the shape's key.
 * The same shape of runner as tuner/kda_run.h and tuner/parts_run.h (tune_runner, tuner/tune_family.h).
 */
typedef struct tune_gqa tune_gqa;

/* NULL with *e set (KF_ERR_ARG) when the shape is not a GQA attention shape. */
tune_gqa *tune_gqa_new(const gen_kvset *shape, core_err *e);
void tune_gqa_free(tune_gqa *g, tune_ctx *ctx);
/* The GPU naive reference the gates need: 1 with j prepared, 0 when the CPU reference serves, -1
 * with the host's message. */
int tune_gqa_ref_job(tune_gqa *g, gen_host *h, const gen_target *tg, gen_job *j);
/* Gate against ref (the built naive job; NULL: the CPU reference). 0 when the variant ran (*pass,
 * *rel_err of o; verdict "<case>: <verdict>"), -1 on an error of the harness or the driver (on ctx,
 * "<case>: <error>"; verdict ""). */
int tune_gqa_gate(tune_ctx *ctx, tune_gqa *g, const tune_compiled *v, const tune_compiled *ref, int *pass,
                  double *rel_err, char *verdict, size_t verdictn);
/* Timing of v on the timing case (tune_attn_time). -1 on error (on ctx). */
int tune_gqa_time(tune_ctx *ctx, tune_gqa *g, const tune_compiled *v, int samples, tune_timing *t);

/* The work figures (tuner/tune_work.h): attn_decode bytes of K and V read once,
 * 2 * b * skv * hkv * d * element size; attn_prefill 4 * b * hq * sq * skv * d FLOPs, halved when causal. */
void tune_gqa_work_decode(const gen_kvset *shape, tune_work *w);
void tune_gqa_work_prefill(const gen_kvset *shape, tune_work *w);

#endif
