/* tuner/tune_ceiling.c: measured ceilings of a GPU: device copy and read bandwidth, bf16 GEMM throughput (cuBLAS or kforge's own) */
#include "tuner/tune_ceiling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda.h"
#include "runtime/module.h"
#include "tuner/ceil_cublas.h"
#include "tuner/ceil_read.h"
#include "tuner/check.h"

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median and (p90 - p10) / median of ms[0..n) (sorted in place). */
static void stats(double *ms, int n, double *median, double *spread)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_dbl);
    *median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    double p10 = ms[(n - 1) / 10], p90 = ms[(n - 1) - (n - 1) / 10];
    *spread = *median > 0 ? (p90 - p10) / *median : NAN;
}

/* A failed driver call in *e (KF_ERR_CUDA, "what: the driver's error"); returns -1. */
static int cu_err(CUresult r, const char *what, core_err *e)
{
    char why[128];
    rt_cuda_errstr(r, why, sizeof why);
    return core_err_fail(e, KF_ERR_CUDA, "%s: %s", what, why);
}

typedef int (*launch_fn)(void *arg, core_err *e);

/* Events around each of `samples` launches after two warm-ups; ms[] gets the times. */
static int time_events(const rt_cu *cu, launch_fn fn, void *arg, int samples, double *ms, core_err *e)
{
    CUevent a, b;
    CUresult r;
    if ((r = cu->EventCreate(&a, 0)) || (r = cu->EventCreate(&b, 0)))
        return cu_err(r, "cuEventCreate", e);
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        rc = fn(arg, e);
    for (int i = 0; i < samples && !rc; i++) {
        float f = 0;
        cu->EventRecord(a, NULL);
        rc = fn(arg, e);
        cu->EventRecord(b, NULL);
        if (!rc && ((r = cu->EventSynchronize(b)) || (r = cu->EventElapsedTime(&f, a, b))))
            rc = cu_err(r, "timing", e);
        ms[i] = f;
    }
    cu->EventDestroy(a);
    cu->EventDestroy(b);
    return rc;
}

/* Clears out, raises samples to 20 and makes GPU ordinal's primary context current:
 * the driver table, or NULL with a message (no driver, no such device). */
static const rt_cu *ceiling_begin(int ordinal, int *samples, tune_ceiling *out, core_err *e)
{
    memset(out, 0, sizeof *out);
    out->check_err = NAN;
    if (*samples < 20)
        *samples = 20;
    const rt_cu *cu = rt_cuda(e);
    if (!cu || rt_module_context(ordinal, e))
        return NULL;
    return cu;
}

/* Times fn (time_events) and fills out's median, spread and samples, and value = bytes per
 * call / median (B/s). 0, or -1 with a message. */
static int time_bandwidth(const rt_cu *cu, launch_fn fn, void *arg, int samples, double *ms, double bytes,
                          tune_ceiling *out, core_err *e)
{
    if (time_events(cu, fn, arg, samples, ms, e))
        return -1;
    stats(ms, samples, &out->median_ms, &out->spread);
    out->samples = samples;
    out->value = bytes / (out->median_ms * 1e-3);
    return 0;
}

struct copy_arg {
    const rt_cu *cu;
    CUdeviceptr src, dst;
    size_t bytes;
};

static int copy_once(void *p, core_err *e)
{
    struct copy_arg *c = p;
    CUresult r = c->cu->MemcpyDtoD(c->dst, c->src, c->bytes);
    return r ? cu_err(r, "cuMemcpyDtoD", e) : 0;
}

int tune_ceiling_copy(int ordinal, size_t bytes, int samples, tune_ceiling *out, core_err *e)
{
    const rt_cu *cu = ceiling_begin(ordinal, &samples, out, e);
    if (!cu)
        return -1;
    struct copy_arg c = {cu, 0, 0, bytes};
    double *ms = calloc((size_t)samples, sizeof *ms);
    CUresult r;
    int rc = -1;
    if ((r = cu->MemAlloc(&c.src, bytes)) || (r = cu->MemAlloc(&c.dst, bytes)) ||
        (r = cu->MemsetD8(c.src, 0x5A, bytes))) {
        cu_err(r, "allocating the copy buffers", e);
        goto out;
    }
    if (time_bandwidth(cu, copy_once, &c, samples, ms, 2.0 * (double)bytes, out, e))
        goto out;
    snprintf(out->variant, sizeof out->variant, "cuMemcpyDtoD %zu bytes", bytes);
    rc = 0;
out:
    if (c.src)
        cu->MemFree(c.src);
    if (c.dst)
        cu->MemFree(c.dst);
    free(ms);
    return rc;
}

struct read_arg {
    rt_module m;
    CUdeviceptr src, sink;
    unsigned long long n;                 /* 16-byte vectors */
    unsigned blocks;
};

static int read_once(void *p, core_err *e)
{
    struct read_arg *a = p;
    void *args[] = {&a->src, &a->n, &a->sink};
    unsigned grid[3] = {a->blocks, 1, 1};
    return rt_module_launch(&a->m, 0, grid, args, NULL, e) ? -1 : 0;
}

int tune_ceiling_read(int ordinal, const char *arch, size_t bytes, int samples, tune_ceiling *out, core_err *e)
{
    const rt_cu *cu = ceiling_begin(ordinal, &samples, out, e);
    rt_devinfo info;
    if (!cu || rt_device_info(ordinal, &info, e))
        return -1;
    CUdevice dev;
    int per_sm = 0;
    CUresult r;
    if ((r = cu->DeviceGet(&dev, ordinal)) || (r = cu->DeviceGetAttribute(&per_sm, RT_CU_ATTR_THREADS_SM, dev)))
        return cu_err(r, "reading the threads per SM", e);
    struct read_arg a = {{0}, 0, 0, bytes / 16, 0};
    a.blocks = (unsigned)(info.sms * (per_sm / TUNE_READ_THREADS > 0 ? per_sm / TUNE_READ_THREADS : 1));
    gen_binary_out bin = {0};
    double *ms = calloc((size_t)samples, sizeof *ms);
    int rc = -1;
    if (!ms) {
        core_err_set(e, KF_ERR_NOMEM, "out of host memory for the read timings");
        goto out;
    }
    rt_kernel_desc k = {TUNE_READ_KERNEL, TUNE_READ_THREADS, 0};
    if (tune_ceil_read_compile(arch ? arch : info.arch, &bin, e) || rt_module_load(&a.m, bin.image, &k, 1, e))
        goto out;
    if ((r = cu->MemAlloc(&a.src, bytes)) || (r = cu->MemAlloc(&a.sink, a.blocks * sizeof(unsigned))) ||
        (r = cu->MemsetD8(a.src, 0x5A, bytes))) {
        cu_err(r, "allocating the read buffer", e);
        goto out;
    }
    if (time_bandwidth(cu, read_once, &a, samples, ms, (double)(a.n * 16), out, e))
        goto out;
    snprintf(out->variant, sizeof out->variant, "%s, %u blocks x %d threads, 16-byte loads over %llu bytes",
             TUNE_READ_KERNEL, a.blocks, TUNE_READ_THREADS, a.n * 16);
    rc = 0;
out:
    if (a.src)
        cu->MemFree(a.src);
    if (a.sink)
        cu->MemFree(a.sink);
    rt_module_unload(&a.m);
    gen_binary_out_free(&bin);
    free(ms);
    return rc;
}

const char *tune_ceiling_lookup(db_store *db, const char *gpu, const char *kind, double *value)
{
    static const char *const fallback[][2] = {{"read", "copy"}};
    double v;
    if (db_ceiling_get(db, gpu, kind, &v) == DB_OK && v > 0) {
        *value = v;
        return kind;
    }
    for (size_t i = 0; i < sizeof fallback / sizeof fallback[0]; i++)
        if (!strcmp(kind, fallback[i][0]))
            return tune_ceiling_lookup(db, gpu, fallback[i][1], value);
    return NULL;
}

struct gemm_arg {
    rt_module *m;
    CUdeviceptr a, b, c;
    int size;
    tune_cublas *blas;
};

static int gemm_once(void *p, core_err *e)
{
    struct gemm_arg *g = p;
    if (g->blas)
        return tune_cublas_gemm_bf16(g->blas, g->a, g->b, g->c, g->size, e);
    void *args[] = {&g->a, &g->b, &g->c, &g->size, &g->size, &g->size};
    unsigned grid[3] = {(unsigned)(g->size / 128), (unsigned)(g->size / 128), 1};
    return rt_module_launch(g->m, 0, grid, args, NULL, e) ? -1 : 0;
}

/* Relative error (2-norm) of 256 sampled C entries against fp64 dot products. */
static double gemm_check(const rt_cu *cu, const struct gemm_arg *g, const uint16_t *ha, const uint16_t *hb)
{
    size_t n = (size_t)g->size, rowb = n * 2;
    uint16_t *row = malloc(rowb);
    check_rng rng;
    check_rng_seed(&rng, check_fresh_seed());
    double num = 0, den = 0;
    for (int s = 0; s < 256 && row; s++) {
        size_t i = check_rng_next(&rng) % n, j = check_rng_next(&rng) % n;
        if (cu->MemcpyDtoH(row, g->c + i * rowb, rowb)) {
            free(row);
            return NAN;
        }
        double ref = 0;
        for (size_t k = 0; k < n; k++)
            ref += (double)check_bf16_to_f32(ha[i * n + k]) * check_bf16_to_f32(hb[j * n + k]);
        double got = check_bf16_to_f32(row[j]);
        num += (got - ref) * (got - ref);
        den += ref * ref;
    }
    free(row);
    return den > 0 ? sqrt(num / den) : NAN;
}

int tune_ceiling_gemm(int ordinal, const gen_job *jobs, int n, int size, int samples, tune_ceiling *out,
                      core_err *e)
{
    const rt_cu *cu = ceiling_begin(ordinal, &samples, out, e);
    if (!cu)
        return -1;
    size_t elems = (size_t)size * size, bytes = elems * 2;
    uint16_t *ha = malloc(bytes), *hb = malloc(bytes);
    double *ms = calloc((size_t)samples, sizeof *ms);
    struct gemm_arg g = {NULL, 0, 0, 0, size, NULL};
    tune_cublas *blas = NULL;
    int rc = -1, passed = 0;
    CUresult r;
    core_err last = {KF_ERR_UNSUPPORTED, "no ceil_gemm variant built"};   /* why the last contender was left out */
    if (!ha || !hb || !ms) {
        core_err_set(e, KF_ERR_NOMEM, "out of host memory for the GEMM inputs");
        goto out;
    }
    uint64_t seed = check_fresh_seed();
    check_fill_uniform(CHECK_BF16, ha, elems, seed);
    check_fill_uniform(CHECK_BF16, hb, elems, seed + 1);
    if ((r = cu->MemAlloc(&g.a, bytes)) || (r = cu->MemAlloc(&g.b, bytes)) || (r = cu->MemAlloc(&g.c, bytes)) ||
        (r = cu->MemcpyHtoD(g.a, ha, bytes)) || (r = cu->MemcpyHtoD(g.b, hb, bytes))) {
        cu_err(r, "allocating the GEMM buffers", e);
        goto out;
    }
    core_err no_blas = CORE_ERR_INIT;
    blas = g.blas = tune_cublas_open(&no_blas);
    snprintf(out->cublas, sizeof out->cublas, "%s", blas ? tune_cublas_name(blas) : no_blas.msg);
    /* v == -1: cuBLAS (when it loaded), then every kforge ceil_gemm variant */
    for (int v = g.blas ? -1 : 0; v < n; v++) {
        const gen_job *j = v >= 0 ? &jobs[v] : NULL;
        char name[256];
        snprintf(name, sizeof name, "%s", j ? j->variant_key : "cuBLAS cublasGemmEx");
        if (j && (j->failed || !j->bin.image)) {
            core_err_set(&last, KF_ERR_NVRTC, "%s: %.400s", j->variant_key, j->err);
            continue;
        }
        rt_module m = {0};
        if (j) {
            rt_kernel_desc k = {"", j->kernels[0].threads, j->kernels[0].smem};
            snprintf(k.name, sizeof k.name, "%s", j->kernels[0].name);
            if (rt_module_load(&m, j->bin.image, &k, 1, &last)) {
                core_err_set(&last, last.st, "%.500s", last.msg);
                continue;
            }
            g.m = &m;
        }
        cu->MemsetD8(g.c, 0xFF, bytes);                   /* poison: NaN in bf16 */
        double rel = NAN, med, spread;
        int t = time_events(cu, gemm_once, &g, samples, ms, &last);
        if (!t)
            rel = gemm_check(cu, &g, ha, hb);
        if (j)
            rt_module_unload(&m);
        else
            g.blas = NULL;                                /* the kforge variants next */
        if (t)
            continue;
        if (!(rel <= 1e-2)) {
            core_err_set(&last, KF_ERR_UNSUPPORTED, "%s: sampled outputs off by %.3g (relative)", name, rel);
            continue;
        }
        stats(ms, samples, &med, &spread);
        double flops = 2.0 * size * (double)size * size / (med * 1e-3);
        if (flops > out->value) {
            out->value = flops;
            out->median_ms = med;
            out->spread = spread;
            out->samples = samples;
            out->check_err = rel;
            snprintf(out->variant, sizeof out->variant, "%s", name);
        }
        if (j && flops > out->own_value)
            out->own_value = flops;
        passed++;
    }
    if (passed)
        rc = 0;
    else
        core_err_set(e, last.st, "no ceil_gemm variant ran correctly (last: %.511s)", last.msg);
out:
    tune_cublas_close(blas);
    if (g.a)
        cu->MemFree(g.a);
    if (g.b)
        cu->MemFree(g.b);
    if (g.c)
        cu->MemFree(g.c);
    free(ha);
    free(hb);
    free(ms);
    return rc;
}
