/* tuner/kda_run.h: the tuner's KDA runner: a correctness gate against the CPU fp64 recurrence and L2-flushed timing */
#ifndef KF_TUNER_KDA_RUN_H
#define KF_TUNER_KDA_RUN_H

#include <stddef.h>

#include "gen/kv.h"
#include "tuner/attn_run.h"
#include "tuner/tune_work.h"

/*
 * One kda_prefill or kda_decode shape of a sweep (n sequences of t tokens, h q/k heads, hv value
 * heads, dk, dv), with what the sweep needs:
 *  - the gate case: fresh random inputs drawn once per shape and run at its first gate, with the
 *    fp64 reference on them (both kept: every variant of the shape is gated on them, uploaded for
 *    each), packed lengths [min(t, 700), 0, 17] (decode: min(n, 16) sequences of one token), the
 *    shape's heads, gate computed in the kernel with lower_bound -5, l2norm, beta sigmoid, a
 *    non-zero K-first initial state, the final state written V-first; outputs poisoned for each
 *    variant, the workspace when it grows; o within 1e-2 and the final state within 5e-3
 *    (||delta|| / ||ref||) of the fp64 recurrence, nothing left unwritten, no NaN;
 *  - the timing case: the shape itself, padded [n, t], log-space gate, non-zero initial state,
 *    final state written, inputs filled once per shape.
 * Variants come as compiled binaries (tune_compiled: family kda_prefill/kda_decode).
 */
typedef struct tune_kda tune_kda;

/* NULL with *e set when the shape is not a KDA shape (n, t, h, hv, dk, dv >= 1, hv % h == 0: KF_ERR_ARG)
 * or no memory. */
tune_kda *tune_kda_new(const gen_kvset *shape, core_err *e);
/* Frees the shape's host and device buffers (ctx: the session they were made in; may be NULL
 * when none were). */
void tune_kda_free(tune_kda *k, tune_ctx *ctx);

/* Gate: 0 when the variant ran (*pass, *rel_err of o; the verdict in verdict), -1 on an error of
 * the harness or the driver (on ctx: tune_ctx_errmsg; verdict ""). */
int tune_kda_gate(tune_ctx *ctx, tune_kda *k, const tune_compiled *v, int *pass, double *rel_err,
                  char *verdict, size_t verdictn);
/* Timing of every kernel of v on the timing case (tune_ctx_time). -1 on error (on ctx). */
int tune_kda_time(tune_ctx *ctx, tune_kda *k, const tune_compiled *v, int samples, tune_timing *t);

/* The work figure: bytes moved once, q, k, v, o, g, beta of every token and the fp32 state read and
 * written once per (sequence, value head). */
void tune_kda_work(const gen_kvset *shape, tune_work *w);

#endif
