/* tuner/tune_ceiling.h: measured ceilings of a GPU: device copy and read bandwidth, bf16 GEMM throughput (cuBLAS or kforge's own) */
#ifndef KF_TUNER_TUNE_CEILING_H
#define KF_TUNER_TUNE_CEILING_H

#include <stddef.h>

#include "core/err.h"
#include "gen/build.h"

#define TUNE_COPY_BYTES (1ull << 30)   /* the copy ceiling moves 1 GiB (read) + 1 GiB (written) */
#define TUNE_READ_BYTES (1ull << 30)   /* the read ceiling streams 1 GiB (far beyond any L2) */
#define TUNE_GEMM_SIZE 8192            /* M = N = K of the GEMM ceiling */

typedef struct tune_ceiling {
    double value;                      /* B/s (copy: read + written; read: read) or FLOP/s (2 M N K) */
    double median_ms, spread;          /* spread: (p90 - p10) / median */
    int samples;
    double check_err;                  /* GEMM: relative error of sampled outputs vs fp64 (else NaN) */
    char variant[256];                 /* what gave the figure (copy, read kernel, ceil_gemm variant, cuBLAS) */
    double own_value;                  /* GEMM: the fastest kforge ceil_gemm variant alone */
    char cublas[256];                  /* GEMM: the cuBLAS library timed, or why none was */
} tune_ceiling;

/* cuMemcpyDtoD of `bytes` on GPU ordinal, events around each copy, median of `samples`
 * (>= 20) after 2 warm-ups. 0, or -1 with *e set (KF_ERR_CUDA: no driver or device, a driver call). */
int tune_ceiling_copy(int ordinal, size_t bytes, int samples, tune_ceiling *out, core_err *e);

/* The "read" ceiling: tuner/ceil_read.h's kernel, compiled for arch (NULL: the device's), streams
 * `bytes` on GPU ordinal with enough 512-thread blocks to fill every SM; events around each
 * launch, median of `samples` (>= 20) after 2 warm-ups; value is bytes read per second.
 * 0, or -1 with *e set (no driver or device, compile, load, allocation, launch). */
int tune_ceiling_read(int ordinal, const char *arch, size_t bytes, int samples, tune_ceiling *out, core_err *e);

/* The stored ceiling of `kind` for gpu, falling back from "read" to "copy" for a database
 * measured before the read ceiling existed. Returns the kind whose value *value got (kind
 * itself, or the fallback's static name), or NULL when neither is stored (or positive). */
const char *tune_ceiling_lookup(db_store *db, const char *gpu, const char *kind, double *value);

/* Times cuBLAS's bf16 GEMM (when a libcublas loads: tuner/ceil_cublas.h) and every built
 * ceil_gemm job (jobs[0..n)) on size^3 random bf16 inputs; checks 256 sampled outputs of each
 * against fp64 (relative error <= 1e-2, else the contender is left out); the fastest passing
 * one gives the figure. 0, or -1 with *e set (none passed: the last one's reason). */
int tune_ceiling_gemm(int ordinal, const gen_job *jobs, int n, int size, int samples, tune_ceiling *out,
                      core_err *e);

#endif
