/* tuner/check.c: host helpers of the correctness gate: 16-bit floats, random fills, poison, error metrics */
#include "tuner/check.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

size_t check_dtype_size(check_dtype t)
{
    return t == CHECK_FP32 ? 4 : 2;
}

const char *check_dtype_str(check_dtype t)
{
    switch (t) {
    case CHECK_BF16: return "bf16";
    case CHECK_FP16: return "fp16";
    case CHECK_FP32: return "fp32";
    }
    return "?";
}

double check_tol(check_dtype t)
{
    switch (t) {
    case CHECK_BF16: return CHECK_TOL_BF16;
    case CHECK_FP16: return CHECK_TOL_FP16;
    case CHECK_FP32: return CHECK_TOL_FP32;
    }
    return 0.0;
}

/* ---- 16-bit floats ------------------------------------------------------- */

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t check_f32_to_bf16(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)            /* NaN: keep sign and top payload, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);                /* round to nearest even; overflow carries to inf */
    return (uint16_t)(u >> 16);
}

float check_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t check_f32_to_fp16(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)                            /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x03FFu));
    if (a >= 0x477FF000u)                           /* >= 65520 rounds to inf (and inf itself) */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) {                          /* below 2^-14: subnormal or zero */
        float units = fabsf(x) * 16777216.0f;       /* in units of 2^-24, exact */
        return (uint16_t)(sign | (uint16_t)rintf(units)); /* rintf rounds to even; 1024 is 2^-14 */
    }
    a -= (uint32_t)(127 - 15) << 23;                /* rebias the exponent */
    a += 0x0FFFu + ((a >> 13) & 1u);                /* round to nearest even */
    return (uint16_t)(sign | (a >> 13));
}

float check_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x03FFu;
    if (e == 0x1F)
        return bits_f32(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

double check_load(check_dtype t, const void *buf, size_t i)
{
    switch (t) {
    case CHECK_BF16: return check_bf16_to_f32(((const uint16_t *)buf)[i]);
    case CHECK_FP16: return check_fp16_to_f32(((const uint16_t *)buf)[i]);
    case CHECK_FP32: return ((const float *)buf)[i];
    }
    assert(!"bad dtype");
    return 0.0;
}

void check_store(check_dtype t, void *buf, size_t i, double x)
{
    /* double -> float -> 16 bits rounds twice; the fills only store values that
     * are exact in float or whose double rounding is immaterial. */
    switch (t) {
    case CHECK_BF16: ((uint16_t *)buf)[i] = check_f32_to_bf16((float)x); return;
    case CHECK_FP16: ((uint16_t *)buf)[i] = check_f32_to_fp16((float)x); return;
    case CHECK_FP32: ((float *)buf)[i] = (float)x; return;
    }
    assert(!"bad dtype");
}

/* ---- random numbers ------------------------------------------------------ */

void check_rng_seed(check_rng *r, uint64_t seed)
{
    r->s = seed;
}

uint64_t check_rng_next(check_rng *r)  /* splitmix64 */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void check_rng_skip(check_rng *r, uint64_t n)
{
    r->s += n * 0x9E3779B97F4A7C15ull;     /* wraps mod 2^64, as n calls of check_rng_next do */
}

double check_rng_uniform(check_rng *r)
{
    return (double)(check_rng_next(r) >> 11) * 0x1p-52 - 1.0;
}

double check_rng_normal(check_rng *r)
{
    double u1 = (double)((check_rng_next(r) >> 11) + 1) * 0x1p-53;  /* (0, 1] */
    double u2 = (double)(check_rng_next(r) >> 11) * 0x1p-53;        /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

uint64_t check_fresh_seed(void)
{
    static atomic_ullong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    check_rng r;
    check_rng_seed(&r, (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec
                       ^ ((uint64_t)getpid() << 32)
                       ^ (atomic_fetch_add(&counter, 1) * 0xD1B54A32D192ED03ull));
    return check_rng_next(&r);
}

void check_fill_uniform(check_dtype t, void *buf, size_t n, uint64_t seed)
{
    check_rng r;
    check_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        check_store(t, buf, i, check_rng_uniform(&r));
}

void check_fill_normal(check_dtype t, void *buf, size_t n, uint64_t seed, double sigma)
{
    check_rng r;
    check_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        check_store(t, buf, i, sigma * check_rng_normal(&r));
}

void check_fill_nan(check_dtype t, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (t) {
        case CHECK_BF16: ((uint16_t *)buf)[i] = 0x7FC0u; break;
        case CHECK_FP16: ((uint16_t *)buf)[i] = 0x7E00u; break;
        case CHECK_FP32: ((float *)buf)[i] = bits_f32(0x7FC00000u); break;
        }
    }
}

void check_poison(check_dtype t, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t == CHECK_FP32)
            ((float *)buf)[i] = bits_f32(CHECK_POISON32);
        else
            ((uint16_t *)buf)[i] = CHECK_POISON16;
    }
}

bool check_is_poison(check_dtype t, const void *buf, size_t i)
{
    if (t == CHECK_FP32)
        return f32_bits(((const float *)buf)[i]) == CHECK_POISON32;
    return ((const uint16_t *)buf)[i] == CHECK_POISON16;
}

/* ---- comparison ---------------------------------------------------------- */

void check_compare(check_dtype t, const void *out, const double *ref, size_t n, check_stats *st)
{
    double diff2 = 0.0, ref2 = 0.0;
    memset(st, 0, sizeof *st);
    st->n = n;
    for (size_t i = 0; i < n; i++) {
        ref2 += ref[i] * ref[i];
        if (check_is_poison(t, out, i)) {
            st->unwritten++;
            continue;
        }
        double x = check_load(t, out, i);
        if (!isfinite(x)) {
            st->nonfinite++;
            continue;
        }
        double e = fabs(x - ref[i]);
        diff2 += e * e;
        if (e > st->max_abs)
            st->max_abs = e;
    }
    st->ref_norm = sqrt(ref2);
    st->rel_err = ref2 > 0.0 ? sqrt(diff2) / st->ref_norm : sqrt(diff2);
}

bool check_pass(const check_stats *st, double tol)
{
    /* rel_err <= tol is false for a NaN metric, so a NaN never passes */
    return st->unwritten == 0 && st->nonfinite == 0 && st->rel_err <= tol;
}

void check_compare_lse(const float *out, const double *ref, size_t n, check_lse_stats *st)
{
    memset(st, 0, sizeof *st);
    st->n = n;
    for (size_t i = 0; i < n; i++) {
        if (f32_bits(out[i]) == CHECK_POISON32) {
            st->unwritten++;
            continue;
        }
        double x = out[i];
        if (isnan(x) || x == INFINITY) {
            st->bad++;
            continue;
        }
        bool xinf = x == -INFINITY, rinf = ref[i] == -INFINITY;
        if (xinf != rinf) {
            st->inf_mismatch++;
            continue;
        }
        if (!xinf && fabs(x - ref[i]) > st->max_abs)
            st->max_abs = fabs(x - ref[i]);
    }
}

bool check_lse_pass(const check_lse_stats *st, double tol)
{
    return st->unwritten == 0 && st->bad == 0 && st->inf_mismatch == 0 && st->max_abs <= tol;
}

int check_format(char *buf, size_t size, const check_stats *st, double tol)
{
    return snprintf(buf, size, "rel %.1e (tol %.1e) max_abs %.1e nonfinite %zu unwritten %zu of %zu: %s",
                    st->rel_err, tol, st->max_abs, st->nonfinite, st->unwritten, st->n,
                    check_pass(st, tol) ? "pass" : "FAIL");
}

int check_format_lse(char *buf, size_t size, const check_lse_stats *st, double tol)
{
    return snprintf(buf, size, "lse max_abs %.1e (tol %.1e) bad %zu inf_mismatch %zu unwritten %zu of %zu: %s",
                    st->max_abs, tol, st->bad, st->inf_mismatch, st->unwritten, st->n,
                    check_lse_pass(st, tol) ? "pass" : "FAIL");
}

double check_maxdiff(const double *x, const double *y, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] == y[i])
            continue;
        double e = fabs(x[i] - y[i]);
        if (!(e <= m))
            m = isnan(e) ? INFINITY : e;
    }
    return m;
}
