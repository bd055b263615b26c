/* runtime/cuda.c: the CUDA driver API, loaded with dlopen on first use so nothing needs a GPU to start */
#include "runtime/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static rt_cu g_cu;
static int g_state;            /* 0 not tried, 1 ok, -1 failed */
static char g_err[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Each entry: the table slot and the exported names to try (versioned first). */
#define SYM(field, ...) {(void **)&g_cu.field, {__VA_ARGS__, NULL}}
struct sym {
    void **slot;
    const char *names[3];
};

static void load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(g_err, sizeof g_err, "no CUDA driver/device found: cannot load libcuda.so.1 (%s)",
                 dlerror());
        g_state = -1;
        return;
    }
    struct sym syms[] = {
        SYM(Init, "cuInit"),
        SYM(DriverGetVersion, "cuDriverGetVersion"),
        SYM(DeviceGetCount, "cuDeviceGetCount"),
        SYM(DeviceGet, "cuDeviceGet"),
        SYM(DeviceGetName, "cuDeviceGetName"),
        SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
        SYM(DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
        SYM(DeviceTotalMem, "cuDeviceTotalMem_v2"),
        SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
        SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
        SYM(CtxSetCurrent, "cuCtxSetCurrent"),
        SYM(CtxGetCurrent, "cuCtxGetCurrent"),
        SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
        SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
        SYM(CtxSynchronize, "cuCtxSynchronize"),
        SYM(ModuleLoadData, "cuModuleLoadData"),
        SYM(ModuleUnload, "cuModuleUnload"),
        SYM(ModuleGetFunction, "cuModuleGetFunction"),
        SYM(FuncSetAttribute, "cuFuncSetAttribute"),
        SYM(FuncGetAttribute, "cuFuncGetAttribute"),
        SYM(LaunchKernel, "cuLaunchKernel"),
        SYM(MemAlloc, "cuMemAlloc_v2"),
        SYM(MemFree, "cuMemFree_v2"),
        SYM(MemGetInfo, "cuMemGetInfo_v2"),
        SYM(MemcpyHtoD, "cuMemcpyHtoD_v2"),
        SYM(MemcpyDtoH, "cuMemcpyDtoH_v2"),
        SYM(MemcpyDtoD, "cuMemcpyDtoD_v2"),
        SYM(MemsetD8, "cuMemsetD8_v2"),
        SYM(MemsetD32, "cuMemsetD32_v2"),
        SYM(MemsetD8Async, "cuMemsetD8Async"),
        SYM(StreamCreate, "cuStreamCreate"),
        SYM(StreamDestroy, "cuStreamDestroy_v2"),
        SYM(StreamSynchronize, "cuStreamSynchronize"),
        SYM(StreamBeginCapture, "cuStreamBeginCapture_v2"),
        SYM(StreamEndCapture, "cuStreamEndCapture"),
        SYM(GraphInstantiate, "cuGraphInstantiateWithFlags"),
        SYM(GraphLaunch, "cuGraphLaunch"),
        SYM(GraphExecDestroy, "cuGraphExecDestroy"),
        SYM(GraphDestroy, "cuGraphDestroy"),
        SYM(EventCreate, "cuEventCreate"),
        SYM(EventRecord, "cuEventRecord"),
        SYM(EventSynchronize, "cuEventSynchronize"),
        SYM(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
        SYM(EventDestroy, "cuEventDestroy_v2"),
        SYM(GetErrorName, "cuGetErrorName"),
        SYM(GetErrorString, "cuGetErrorString"),
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = NULL;
        for (int k = 0; !f && syms[i].names[k]; k++)
            f = dlsym(lib, syms[i].names[k]);
        if (!f) {
            snprintf(g_err, sizeof g_err, "no CUDA driver/device found: libcuda.so.1 lacks %s",
                     syms[i].names[0]);
            g_state = -1;
            return;
        }
        *syms[i].slot = f;
    }
    /* optional entries: NULL when absent, and what needs them says so */
    *(void **)&g_cu.TensorMapEncodeTiled = dlsym(lib, "cuTensorMapEncodeTiled");
    *(void **)&g_cu.LaunchKernelEx = dlsym(lib, "cuLaunchKernelEx");
    CUresult r = g_cu.Init(0);
    int count = 0;
    if (r == 0)
        r = g_cu.DeviceGetCount(&count);
    if (r != 0 || count == 0) {
        char e[128];
        rt_cuda_errstr(r, e, sizeof e);
        snprintf(g_err, sizeof g_err, "no CUDA driver/device found: %s",
                 r ? e : "the driver reports 0 devices");
        g_state = -1;
        return;
    }
    g_state = 1;
}

const rt_cu *rt_cuda(core_err *e)
{
    pthread_once(&g_once, load);
    if (g_state != 1) {
        core_err_set(e, KF_ERR_CUDA, "%s", g_err);
        return NULL;
    }
    return &g_cu;
}

void rt_cuda_errstr(CUresult r, char *buf, size_t n)
{
    const char *name = NULL;
    if (g_cu.GetErrorName)
        g_cu.GetErrorName(r, &name);
    snprintf(buf, n, "%s (%d)", name ? name : "CUDA error", r);
}

int rt_device_info(int ordinal, rt_devinfo *info, core_err *e)
{
    const rt_cu *cu = rt_cuda(e);
    if (!cu)
        return -1;
    memset(info, 0, sizeof *info);
    CUdevice dev;
    CUresult r = cu->DeviceGet(&dev, ordinal);
    if (r) {
        char es[128];
        rt_cuda_errstr(r, es, sizeof es);
        return core_err_fail(e, KF_ERR_CUDA, "no CUDA device %d: %s", ordinal, es);
    }
    cu->DeviceGetName(info->name, sizeof info->name, dev);
    int v = 0;
#define ATTR(a, dst) (cu->DeviceGetAttribute(&v, a, dev), (dst) = v)
    ATTR(RT_CU_ATTR_CC_MAJOR, info->cc_major);
    ATTR(RT_CU_ATTR_CC_MINOR, info->cc_minor);
    ATTR(RT_CU_ATTR_SMS, info->sms);
    ATTR(RT_CU_ATTR_SMEM_OPTIN, info->smem_optin);
    ATTR(RT_CU_ATTR_SMEM_SM, info->smem_sm);
    ATTR(RT_CU_ATTR_REGS_SM, info->regs_sm);
    ATTR(RT_CU_ATTR_L2, info->l2);
    ATTR(RT_CU_ATTR_CLOCK_RATE, info->clock_mhz);
    ATTR(RT_CU_ATTR_MEM_CLOCK_RATE, info->mem_clock_mhz);
#undef ATTR
    info->clock_mhz /= 1000;
    info->mem_clock_mhz /= 1000;
    /* sm_90a unlocks wgmma/setmaxnreg on Hopper; other archs use their plain target. */
    snprintf(info->arch, sizeof info->arch, "sm_%d%d%s", info->cc_major, info->cc_minor,
             info->cc_major == 9 && info->cc_minor == 0 ? "a" : "");
    CUuuid u;
    if (cu->DeviceGetUuid(&u, dev) == 0) {
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(info->uuid, sizeof info->uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    int dv = 0;
    cu->DriverGetVersion(&dv);
    snprintf(info->driver, sizeof info->driver, "%d.%d", dv / 1000, (dv % 1000) / 10);
    cu->DeviceTotalMem(&info->total_mem, dev);
    return 0;
}
