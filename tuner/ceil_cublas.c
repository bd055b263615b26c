/* tuner/ceil_cublas.c: cuBLAS's bf16 GEMM, loaded at run time, as the reference for the GEMM ceiling */
#include "tuner/ceil_cublas.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The few cuBLAS v2 entry points and constants used (cublas_api.h, library_types.h). */
typedef int (*create_fn)(void **handle);
typedef int (*destroy_fn)(void *handle);
typedef int (*version_fn)(void *handle, int *version);
typedef int (*gemm_ex_fn)(void *handle, int transa, int transb, int m, int n, int k, const void *alpha,
                          const void *a, int atype, int lda, const void *b, int btype, int ldb, const void *beta,
                          void *c, int ctype, int ldc, int compute, int algo);
enum { OP_N = 0, OP_T = 1, R_16BF = 14, COMPUTE_32F = 68, GEMM_DEFAULT = -1 };

struct tune_cublas {
    void *lib, *handle;
    destroy_fn destroy;
    gemm_ex_fn gemm;
    char name[96];
};

tune_cublas *tune_cublas_open(core_err *e)
{
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *lib = NULL;
    const char *which = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        if ((lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
            which = names[i];
    if (!lib) {
        core_err_set(e, KF_ERR_UNSUPPORTED, "no cuBLAS library found (libcublas.so.13, .12 or libcublas.so): %s",
                     dlerror());
        return NULL;
    }
    create_fn create = (create_fn)dlsym(lib, "cublasCreate_v2");
    version_fn version = (version_fn)dlsym(lib, "cublasGetVersion_v2");
    tune_cublas *c = calloc(1, sizeof *c);
    if (c) {
        c->destroy = (destroy_fn)dlsym(lib, "cublasDestroy_v2");
        c->gemm = (gemm_ex_fn)dlsym(lib, "cublasGemmEx");
    }
    int st = -1;
    if (!c || !create || !c->destroy || !c->gemm || (st = create(&c->handle))) {
        core_err_set(e, !c ? KF_ERR_NOMEM : st > 0 ? KF_ERR_CUDA : KF_ERR_UNSUPPORTED, "%s: %s", which,
                     !c ? "out of memory" : st > 0 ? "cublasCreate failed" : "missing symbols");
        free(c);
        dlclose(lib);
        return NULL;
    }
    c->lib = lib;
    int v = 0;
    if (version)
        version(c->handle, &v);
    snprintf(c->name, sizeof c->name, "%s (%d)", which, v);
    return c;
}

void tune_cublas_close(tune_cublas *c)
{
    if (!c)
        return;
    c->destroy(c->handle);
    dlclose(c->lib);
    free(c);
}

const char *tune_cublas_name(const tune_cublas *c) { return c ? c->name : ""; }

int tune_cublas_gemm_bf16(tune_cublas *c, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, int n, core_err *e)
{
    /* Column-major view: row-major C is C^T = B A^T, with A, B read as their column-major
     * transposes, so op(B) = T and op(A) = N. */
    const float one = 1.0f, zero = 0.0f;
    int st = c->gemm(c->handle, OP_T, OP_N, n, n, n, &one, (const void *)(uintptr_t)b, R_16BF, n,
                     (const void *)(uintptr_t)a, R_16BF, n, &zero, (void *)(uintptr_t)out, R_16BF, n, COMPUTE_32F,
                     GEMM_DEFAULT);
    if (st)
        return core_err_fail(e, KF_ERR_CUDA, "cublasGemmEx (bf16, %d^3): status %d", n, st);
    return 0;
}
