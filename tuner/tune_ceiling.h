/* tuner/tune_ceiling.h: measured ceilings of a GPU: device copy bandwidth and bf16 GEMM throughput (cuBLAS or kforge's own) */
#ifndef KF_TUNER_TUNE_CEILING_H
#define KF_TUNER_TUNE_CEILING_H

#include <stddef.h>

#include "gen/build.h"

#define TUNE_COPY_BYTES (1ull << 30)   /* the copy ceiling moves 1 GiB (read) + 1 GiB (written) */
#define TUNE_GEMM_SIZE 8192            /* M = N = K of the GEMM ceiling */

typedef struct tune_ceiling {
    double value;                      /* B/s (bytes read + written) or FLOP/s (2 M N K) */
    double median_ms, spread;          /* spread: (p90 - p10) / median */
    int samples;
    double check_err;                  /* GEMM: relative error of sampled outputs vs fp64 (NaN for copy) */
    char variant[256];                 /* GEMM: what gave the figure (a ceil_gemm variant key or cuBLAS) */
    double own_value;                  /* GEMM: the fastest kforge ceil_gemm variant alone */
    char cublas[256];                  /* GEMM: the cuBLAS library timed, or why none was */
} tune_ceiling;

/* cuMemcpyDtoD of `bytes` on GPU ordinal, events around each copy, median of `samples`
 * (>= 20) after 2 warm-ups. 0, or -1 with a message. */
int tune_ceiling_copy(int ordinal, size_t bytes, int samples, tune_ceiling *out, char *err, size_t errn);

/* Times cuBLAS's bf16 GEMM (when a libcublas loads: tuner/ceil_cublas.h) and every built
 * ceil_gemm job (jobs[0..n)) on size^3 random bf16 inputs; checks 256 sampled outputs of each
 * against fp64 (relative error <= 1e-2, else the contender is left out); the fastest passing
 * one gives the figure. 0, or -1 with a message. */
int tune_ceiling_gemm(int ordinal, const gen_job *jobs, int n, int size, int samples, tune_ceiling *out,
                      char *err, size_t errn);

#endif
