/* tuner/check.h: host helpers of the correctness gate: 16-bit floats, random fills, poison, error metrics */
#ifndef KF_TUNER_CHECK_H
#define KF_TUNER_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element type of a host buffer. Append only: never renumber. */
typedef enum {
    CHECK_BF16 = 0,
    CHECK_FP16 = 1,
    CHECK_FP32 = 2,
} check_dtype;

/* Poison: the bit pattern written into outputs before a run. Both are quiet NaNs
 * that no conversion produces (bf16/fp16 NaNs from the device are 0x7FFF/0x7FC0/
 * 0x7E00, fp32 ones 0x7FC00000/0xFFC00000), so an element still equal to it was
 * never written. */
#define CHECK_POISON16 ((uint16_t)0xFFFFu)
#define CHECK_POISON32 ((uint32_t)0x7FFFFFFFu)

/* Tolerances on ||out - ref|| / ||ref||, by output dtype (design.md, Correctness). */
#define CHECK_TOL_BF16 1e-2
#define CHECK_TOL_FP16 2e-3
#define CHECK_TOL_FP32 1e-4
/* Max-abs tolerance on the fp32 LSE (natural log) of a kernel fed the same inputs. */
#define CHECK_LSE_TOL 1e-3

size_t check_dtype_size(check_dtype t);     /* 2, 2 or 4 */
const char *check_dtype_str(check_dtype t); /* "bf16", "fp16", "fp32"; static text */
double check_tol(check_dtype t);            /* CHECK_TOL_* of t */

/* ---- 16-bit floats: round to nearest even, NaN preserved (stays a NaN, sign kept) */
uint16_t check_f32_to_bf16(float x);
float check_bf16_to_f32(uint16_t h);
uint16_t check_f32_to_fp16(float x);        /* overflow gives +-inf, tiny values fp16 subnormals */
float check_fp16_to_f32(uint16_t h);

/* Element i of buf (of type t) as a double, and the reverse (rounded to t). */
double check_load(check_dtype t, const void *buf, size_t i);
void check_store(check_dtype t, void *buf, size_t i, double x);

/* ---- random numbers: splitmix64 state, deterministic for a seed */
typedef struct check_rng { uint64_t s; } check_rng;
void check_rng_seed(check_rng *r, uint64_t seed);
uint64_t check_rng_next(check_rng *r);
/* Skips n draws of check_rng_next (n draws in O(1): splitmix64 steps its state by a constant);
 * check_rng_uniform takes 1 draw, check_rng_normal 2. Parallel fills seed each part with it. */
void check_rng_skip(check_rng *r, uint64_t n);
double check_rng_uniform(check_rng *r);     /* [-1, 1), 53-bit resolution */
double check_rng_normal(check_rng *r);      /* N(0, 1), Box-Muller */
/* A seed that differs on every call (clock, process id and a counter mixed): fresh random
 * inputs for a check (the tuner's gates draw one per shape and run). Thread-safe. */
uint64_t check_fresh_seed(void);

/* Fill n elements of buf (type t) from seed: uniform in [-1, 1) or N(0, sigma^2),
 * each rounded to t. buf may be NULL only when n == 0. */
void check_fill_uniform(check_dtype t, void *buf, size_t n, uint64_t seed);
void check_fill_normal(check_dtype t, void *buf, size_t n, uint64_t seed, double sigma);
/* Fill with a quiet NaN that is not the poison pattern (0x7FC0, 0x7E00, 0x7FC00000):
 * for inputs a kernel must never read (KV tails past kv_len). */
void check_fill_nan(check_dtype t, void *buf, size_t n);
/* Fill with CHECK_POISON16 / CHECK_POISON32: outputs, before a run. */
void check_poison(check_dtype t, void *buf, size_t n);
bool check_is_poison(check_dtype t, const void *buf, size_t i);

/* ---- comparison of an output against the fp64 reference */
typedef struct check_stats {
    size_t n;          /* elements compared */
    size_t unwritten;  /* still equal to the poison pattern */
    size_t nonfinite;  /* NaN or Inf, the unwritten ones not counted again */
    double rel_err;    /* ||out - ref||_2 / ||ref||_2 over written finite elements;
                          ||out - ref||_2 itself when ||ref|| = 0 */
    double max_abs;    /* max |out - ref| over written finite elements */
    double ref_norm;   /* ||ref||_2 */
} check_stats;

/* Compare dense out[0..n) (type t) with ref[0..n). out and ref may be NULL when n == 0. */
void check_compare(check_dtype t, const void *out, const double *ref, size_t n, check_stats *st);
/* Verdict: unwritten == 0, nonfinite == 0 and rel_err <= tol. */
bool check_pass(const check_stats *st, double tol);
/* max |x - y| of two fp64 arrays (reference against reference), with -inf == -inf and any other
 * non-finite disagreement infinite. */
double check_maxdiff(const double *x, const double *y, size_t n);

typedef struct check_lse_stats {
    size_t n;            /* entries compared */
    size_t unwritten;    /* bits still CHECK_POISON32 */
    size_t bad;          /* NaN or +inf (never valid for an LSE) */
    size_t inf_mismatch; /* -inf in exactly one of out and ref */
    double max_abs;      /* max |out - ref| where both are finite */
} check_lse_stats;

/* Compare an fp32 LSE out[0..n) with ref[0..n); -inf must agree exactly. */
void check_compare_lse(const float *out, const double *ref, size_t n, check_lse_stats *st);
/* Verdict: no unwritten, bad or mismatched entry and max_abs <= tol. */
bool check_lse_pass(const check_lse_stats *st, double tol);

/* One-line summaries for logs and `kforge run`, e.g.
 * "rel 3.1e-03 (tol 1.0e-02) max_abs 2.0e-02 nonfinite 0 unwritten 0: pass".
 * Return what snprintf returns. */
int check_format(char *buf, size_t size, const check_stats *st, double tol);
int check_format_lse(char *buf, size_t size, const check_lse_stats *st, double tol);

#endif
