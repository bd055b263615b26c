/* tuner/parts_run.h: the tuner's split-score decode runner (attn_parts_decode): a correctness gate against tuner/ref_parts and L2-flushed timing */
#ifndef KF_TUNER_PARTS_RUN_H
#define KF_TUNER_PARTS_RUN_H

#include <stddef.h>

#include "gen/kv.h"
#include "tuner/attn_run.h"
#include "tuner/tune_work.h"

/*
 * One attn_parts_decode shape of a sweep (dtype, b, sq, skv, hq, hkv, parts, value, dv, layers,
 * page_size, causal; the softmax scale is 1/sqrt(sum of the key dims)), with:
 *  - the gate case: fresh random inputs drawn once per shape and run at its first gate, with the
 *    fp64 reference on them (both kept: every variant of the shape is gated on them, the inputs
 *    uploaded again before each), 3 sequences of min(skv, 700), 0 and 65 keys, the shape's heads,
 *    layers and paging (pages shuffled, NaN in unused pages, past every length and in unused
 *    block-table slots: -1); outputs and workspace poisoned for each variant; every layer's o within
 *    check_tol(dtype) and lse within CHECK_LSE_TOL of the fp64 reference (tuner/ref_parts), nothing
 *    left unwritten, no NaN;
 *  - the timing case: the shape itself (b sequences of skv keys), inputs filled once on the device
 *    (small constant values), paged caches with a block table of consecutive pages.
 * kv_dtype=e4m3 (the FP8 latent cache): the caches are e4m3 bytes of N(0, 1) * TUNE_KV8_AMP_K (saturated at
 * +-448) with one fp32 scale per token ((0.5 .. 1.25) / TUNE_KV8_AMP_K, neighbours differ), NaN bytes and scales
 * in the gate's unused rows and pages; the reference reads the same dequantised values.
 */
typedef struct tune_parts tune_parts;

/* NULL with *e set when the shape is not an attn_parts_decode shape (KF_ERR_ARG) or no memory. */
tune_parts *tune_parts_new(const gen_kvset *shape, core_err *e);
/* Frees the shape's host and device buffers (ctx: the session they were made in; may be NULL). */
void tune_parts_free(tune_parts *k, tune_ctx *ctx);

/* Gate: 0 when the variant ran (*pass, *rel_err the worst layer's o; the verdict in verdict), -1 on
 * an error of the harness or the driver (on ctx: tune_ctx_errmsg; verdict ""). */
int tune_parts_gate(tune_ctx *ctx, tune_parts *k, const tune_compiled *v, int *pass, double *rel_err,
                    char *verdict, size_t verdictn);
/* Timing of the decode kernel and the per-layer combines of v on the timing case (tune_ctx_time);
 * -1 on error (on ctx). */
int tune_parts_time(tune_ctx *ctx, tune_parts *k, const tune_compiled *v, int samples, tune_timing *t);

/* Bytes of cache a call of the shape reads once (every cache row of every sequence; FP8: the e4m3 bytes and the
 * 4-byte scale of each token) and its FLOPs,
 * 2 * sq * skv * hq * (key dims + dv) per layer. -1 (both 0) when the shape is not a parts shape. */
int tune_parts_work(const gen_kvset *shape, double *bytes, double *flops);

/* The work figure: cache bytes read once, or the FLOPs when they exceed 200 per byte (the MLA Hq 128
 * case: compute-bound). */
void tune_parts_work_of(const gen_kvset *shape, tune_work *w);

#endif
