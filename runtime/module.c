/* runtime/module.c: a loaded cubin (or PTX) image and the kernels of one variant resolved in it */
#include "runtime/module.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMEM_DEFAULT_MAX (48 * 1024)

static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_ctx[64];

/* KF_ERR_CUDA naming the driver call, its subject and the result; returns -1. */
static int fail(core_err *e, const char *what, const char *subject, CUresult r)
{
    char es[128];
    rt_cuda_errstr(r, es, sizeof es);
    return core_err_fail(e, KF_ERR_CUDA, "%s%s%s%s: %s", what, subject ? " '" : "", subject ? subject : "",
                         subject ? "'" : "", es);
}

int rt_module_context(int ordinal, core_err *e)
{
    const rt_cu *cu = rt_cuda(e);
    if (!cu)
        return -1;
    if (ordinal < 0 || ordinal >= 64)
        return core_err_fail(e, KF_ERR_CUDA, "no CUDA device %d", ordinal);
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
    if (r)
        return fail(e, "cuDevicePrimaryCtxRetain", NULL, r);
    r = cu->CtxSetCurrent(c);
    if (r)
        return fail(e, "cuCtxSetCurrent", NULL, r);
    return 0;
}

/* Programmatic dependent launch unless KFORGE_NO_PDL is set to something other than 0 (read once). */
static pthread_once_t g_pdl_once = PTHREAD_ONCE_INIT;
static int g_pdl_allowed;

static void pdl_read_env(void)
{
    const char *v = getenv("KFORGE_NO_PDL");
    g_pdl_allowed = !(v && *v && strcmp(v, "0"));
}

static int pdl_allowed(void)
{
    pthread_once(&g_pdl_once, pdl_read_env);
    return g_pdl_allowed;
}

int rt_module_load(rt_module *m, const void *image, const rt_kernel_desc *kernels, int n, core_err *e)
{
    memset(m, 0, sizeof *m);
    const rt_cu *cu = rt_cuda(e);
    if (!cu)
        return -1;
    if (!image || n < 1 || n > RT_MODULE_MAX_KERNELS)
        return core_err_fail(e, KF_ERR_CUDA, "rt_module_load: %s", !image ? "no image" : "kernel count out of range");
    CUresult r = cu->ModuleLoadData(&m->mod, image);
    if (r) {
        m->mod = NULL;
        return fail(e, "cuModuleLoadData", NULL, r);
    }
    m->n = n;
    for (int i = 0; i < n; i++) {
        m->k[i] = kernels[i];
        m->k[i].name[RT_MODULE_NAME - 1] = 0;
        m->k[i].pdl = kernels[i].pdl && cu->LaunchKernelEx && pdl_allowed();   /* decided once, not per launch */
        r = cu->ModuleGetFunction(&m->fn[i], m->mod, m->k[i].name);
        if (r) {
            fail(e, "cuModuleGetFunction", m->k[i].name, r);
            rt_module_unload(m);
            return -1;
        }
        if (m->k[i].smem > SMEM_DEFAULT_MAX) {
            r = cu->FuncSetAttribute(m->fn[i], RT_CU_FUNC_MAX_DYN_SMEM, m->k[i].smem);
            if (r) {
                char what[96];
                snprintf(what, sizeof what, "cuFuncSetAttribute(max dynamic smem %d)", m->k[i].smem);
                fail(e, what, m->k[i].name, r);
                rt_module_unload(m);
                return -1;
            }
        }
    }
    return 0;
}

int rt_module_launch(const rt_module *m, int i, const unsigned grid[3], void **args, CUstream s, core_err *e)
{
    const rt_cu *cu = rt_cuda(e);
    if (!cu)
        return -1;
    if (!m || !m->mod || i < 0 || i >= m->n)
        return core_err_fail(e, KF_ERR_CUDA, "rt_module_launch: no kernel %d in the module", i);
    const int pdl = m->k[i].pdl;
    CUresult r;
    if (pdl) {
        rt_cu_launch_attr a = {.id = RT_CU_LAUNCH_ATTR_PROGRAMMATIC_SERIALIZATION, .value.allowed = 1};
        rt_cu_launch_config c = {grid[0], grid[1], grid[2], (unsigned)m->k[i].threads, 1, 1,
                                 (unsigned)m->k[i].smem, s, &a, 1};
        r = cu->LaunchKernelEx(&c, m->fn[i], args, NULL);
    } else {
        r = cu->LaunchKernel(m->fn[i], grid[0], grid[1], grid[2], (unsigned)m->k[i].threads, 1, 1,
                             (unsigned)m->k[i].smem, s, args, NULL);
    }
    if (r) {
        char what[160];
        snprintf(what, sizeof what, "%s(grid %u,%u,%u block %d smem %d)", pdl ? "cuLaunchKernelEx" : "cuLaunchKernel",
                 grid[0], grid[1], grid[2], m->k[i].threads, m->k[i].smem);
        return fail(e, what, m->k[i].name, r);
    }
    return 0;
}

void rt_module_unload(rt_module *m)
{
    if (!m || !m->mod)
        return;
    const rt_cu *cu = rt_cuda(NULL);
    if (cu)
        cu->ModuleUnload(m->mod);
    memset(m, 0, sizeof *m);
}
