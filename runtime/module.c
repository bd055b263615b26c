/* runtime/module.c: a loaded cubin (or PTX) image and the kernels of one variant resolved in it */
#include "runtime/module.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SMEM_DEFAULT_MAX (48 * 1024)

static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_ctx[64];

static void fail(char *err, size_t errn, const char *what, const char *subject, CUresult r)
{
    char e[128];
    rt_cuda_errstr(r, e, sizeof e);
    if (err)
        snprintf(err, errn, "%s%s%s%s: %s", what, subject ? " '" : "", subject ? subject : "",
                 subject ? "'" : "", e);
}

int rt_module_context(int ordinal, char *err, size_t errn)
{
    const rt_cu *cu = rt_cuda(err, errn);
    if (!cu)
        return -1;
    if (ordinal < 0 || ordinal >= 64) {
        snprintf(err, errn, "no CUDA device %d", ordinal);
        return -1;
    }
    CUresult r = 0;
    pthread_mutex_lock(&g_ctx_mu);
    if (!g_ctx[ordinal]) {
        CUdevice dev;
        r = cu->DeviceGet(&dev, ordinal);
        if (!r)
            r = cu->DevicePrimaryCtxRetain(&g_ctx[ordinal], dev);
        if (r)
            g_ctx[ordinal] = NULL;
    }
    CUcontext c = g_ctx[ordinal];
    pthread_mutex_unlock(&g_ctx_mu);
    if (r) {
        fail(err, errn, "cuDevicePrimaryCtxRetain", NULL, r);
        return -1;
    }
    r = cu->CtxSetCurrent(c);
    if (r) {
        fail(err, errn, "cuCtxSetCurrent", NULL, r);
        return -1;
    }
    return 0;
}

int rt_module_load(rt_module *m, const void *image, const rt_kernel_desc *kernels, int n,
                   char *err, size_t errn)
{
    memset(m, 0, sizeof *m);
    const rt_cu *cu = rt_cuda(err, errn);
    if (!cu)
        return -1;
    if (!image || n < 1 || n > RT_MODULE_MAX_KERNELS) {
        snprintf(err, errn, "rt_module_load: %s", !image ? "no image" : "kernel count out of range");
        return -1;
    }
    CUresult r = cu->ModuleLoadData(&m->mod, image);
    if (r) {
        fail(err, errn, "cuModuleLoadData", NULL, r);
        m->mod = NULL;
        return -1;
    }
    m->n = n;
    for (int i = 0; i < n; i++) {
        m->k[i] = kernels[i];
        m->k[i].name[RT_MODULE_NAME - 1] = 0;
        r = cu->ModuleGetFunction(&m->fn[i], m->mod, m->k[i].name);
        if (r) {
            fail(err, errn, "cuModuleGetFunction", m->k[i].name, r);
            rt_module_unload(m);
            return -1;
        }
        if (m->k[i].smem > SMEM_DEFAULT_MAX) {
            r = cu->FuncSetAttribute(m->fn[i], RT_CU_FUNC_MAX_DYN_SMEM, m->k[i].smem);
            if (r) {
                char what[96];
                snprintf(what, sizeof what, "cuFuncSetAttribute(max dynamic smem %d)", m->k[i].smem);
                fail(err, errn, what, m->k[i].name, r);
                rt_module_unload(m);
                return -1;
            }
        }
    }
    return 0;
}

int rt_module_launch(const rt_module *m, int i, const unsigned grid[3], void **args, CUstream s,
                     char *err, size_t errn)
{
    const rt_cu *cu = rt_cuda(err, errn);
    if (!cu)
        return -1;
    if (!m || !m->mod || i < 0 || i >= m->n) {
        snprintf(err, errn, "rt_module_launch: no kernel %d in the module", i);
        return -1;
    }
    CUresult r = cu->LaunchKernel(m->fn[i], grid[0], grid[1], grid[2], (unsigned)m->k[i].threads, 1, 1,
                                  (unsigned)m->k[i].smem, s, args, NULL);
    if (r) {
        char what[160];
        snprintf(what, sizeof what, "cuLaunchKernel(grid %u,%u,%u block %d smem %d)", grid[0], grid[1],
                 grid[2], m->k[i].threads, m->k[i].smem);
        fail(err, errn, what, m->k[i].name, r);
        return -1;
    }
    return 0;
}

void rt_module_unload(rt_module *m)
{
    if (!m || !m->mod)
        return;
    const rt_cu *cu = rt_cuda(NULL, 0);
    if (cu)
        cu->ModuleUnload(m->mod);
    memset(m, 0, sizeof *m);
}
