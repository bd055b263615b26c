/* tuner/tune_work.h: the work of one shape: bytes or FLOPs per call, unit, ceiling kind (pure) */
#ifndef KF_TUNER_TUNE_WORK_H
#define KF_TUNER_TUNE_WORK_H

#include "gen/kv.h"

typedef struct tune_work {
    double amount;          /* bytes (decode: K+V read) or FLOPs (prefill); NaN when unknown */
    const char *unit;       /* "B/s" or "FLOP/s" (throughput = amount / seconds) */
    const char *ceiling;    /* ceilings kind to compare with: tune_work_ceiling(family, unit) */
} tune_work;

/* The work of one call of a shape of family: the family table's work figure (tuner/tune_family.h;
 * each family's own in its runner's file: tuner/gqa_run.h, tuner/kda_run.h, tuner/parts_run.h).
 * Families without one: amount NaN. */
void tune_work_of(const char *family, const gen_kvset *shape, tune_work *w);
/* The ceilings kind a family's figure in unit is compared with: "gemm_bf16" for FLOP/s; for B/s the
 * family table's bytes_ceiling: "copy" (bytes read + written) where the figure counts written bytes
 * too (kda_*), else "read" (bytes read: decode's K+V). tune_ceiling_lookup falls back from "read" to "copy". */
const char *tune_work_ceiling(const char *family, const char *unit);
/* Throughput of one call of median_ms, or NaN. */
double tune_throughput(const tune_work *w, double median_ms);
/* A rough cost of tuning the shape (seconds per timed call at plausible H200
 * figures), to balance shards and workers. */
double tune_cost_estimate(const char *family, const gen_kvset *shape);

#endif
