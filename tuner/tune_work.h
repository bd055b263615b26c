/* tuner/tune_work.h: the work of one shape: bytes or FLOPs per call, unit, ceiling kind (pure) */
#ifndef KF_TUNER_TUNE_WORK_H
#define KF_TUNER_TUNE_WORK_H

#include "gen/kv.h"

typedef struct tune_work {
    double amount;          /* bytes (decode: K+V read) or FLOPs (prefill); NaN when unknown */
    const char *unit;       /* "B/s" or "FLOP/s" (throughput = amount / seconds) */
    const char *ceiling;    /* ceilings kind to compare with: tune_work_ceiling(family, unit) */
} tune_work;

/*
 * attn_decode: bytes of K and V read once: 2 * b * skv * hkv * d * element size
 *   (the memory-bound figure; q and o are negligible).
 * attn_prefill: 4 * b * hq * sq * skv * d FLOPs (QK^T and PV, 2 per multiply-add),
 *   halved when causal (the convention of FlashAttention's papers).
 * attn_parts_decode: cache bytes read once, or its FLOPs (both from tune_parts_work) with
 *   the gemm ceiling when they exceed 200 per byte (the MLA Hq 128 case).
 * kda_prefill, kda_decode: bytes moved once: q, k, v, o, g, beta of every token and the fp32
 *   state read and written once per (sequence, value head).
 * Other families: amount NaN.
 */
void tune_work_of(const char *family, const gen_kvset *shape, tune_work *w);
/* The ceilings kind a family's figure in unit is compared with: "gemm_bf16" for FLOP/s; for B/s
 * "copy" (bytes read + written) where the figure counts written bytes too (kda_*), else "read"
 * (bytes read: decode's K+V). tune_ceiling_lookup falls back from "read" to "copy". */
const char *tune_work_ceiling(const char *family, const char *unit);
/* Throughput of one call of median_ms, or NaN. */
double tune_throughput(const tune_work *w, double median_ms);
/* A rough cost of tuning the shape (seconds per timed call at plausible H200
 * figures), to balance shards and workers. */
double tune_cost_estimate(const char *family, const gen_kvset *shape);

#endif
