/* runtime/cuda.h: the CUDA driver API, loaded with dlopen on first use so nothing needs a GPU to start */
#ifndef KF_RT_CUDA_H
#define KF_RT_CUDA_H

#include <stddef.h>

#include "core/err.h"

/* The few driver types kforge uses, declared here so no CUDA header is needed. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct { char bytes[16]; } CUuuid;
/* cuTensorMapEncodeTiled's arguments (values as in cuda.h); the map itself is kf_tmap (templates/common/attn_params.h) */
enum {
    RT_CU_TMAP_UINT8 = 0,         /* CU_TENSOR_MAP_DATA_TYPE_UINT8: e4m3 bytes */
    RT_CU_TMAP_UINT16 = 1,        /* CU_TENSOR_MAP_DATA_TYPE_UINT16: bf16 and fp16 move as bits; zero fill is +0 */
    RT_CU_TMAP_INTERLEAVE_NONE = 0,
    RT_CU_TMAP_SWIZZLE_128B = 3,
    RT_CU_TMAP_L2_128B = 2,       /* CU_TENSOR_MAP_L2_PROMOTION_L2_128B */
    RT_CU_TMAP_OOB_ZERO = 0,      /* CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as zero */
};

enum {
    RT_CU_ATTR_CLOCK_RATE = 13,
    RT_CU_ATTR_SMS = 16,
    RT_CU_ATTR_MEM_CLOCK_RATE = 36,
    RT_CU_ATTR_L2 = 38,
    RT_CU_ATTR_THREADS_SM = 39,
    RT_CU_ATTR_CC_MAJOR = 75,
    RT_CU_ATTR_CC_MINOR = 76,
    RT_CU_ATTR_SMEM_SM = 81,
    RT_CU_ATTR_REGS_SM = 82,
    RT_CU_ATTR_SMEM_OPTIN = 97,
    RT_CU_FUNC_MAX_DYN_SMEM = 8,
    RT_CU_FUNC_NUM_REGS = 4,
};

/* cuLaunchKernelEx's configuration with one attribute (layouts as in cuda.h 12.0+): programmatic dependent launch */
enum { RT_CU_LAUNCH_ATTR_PROGRAMMATIC_SERIALIZATION = 6 };   /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
typedef struct rt_cu_launch_attr {
    int id;
    char pad[4];
    union { char bytes[64]; int allowed; } value;   /* CUlaunchAttributeValue: programmaticStreamSerializationAllowed */
} rt_cu_launch_attr;
typedef struct rt_cu_launch_config {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, smem;
    CUstream stream;
    rt_cu_launch_attr *attrs;
    unsigned n_attrs;
} rt_cu_launch_config;

typedef struct rt_cu {
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, int, int);
    CUresult (*FuncGetAttribute)(int *, int, CUfunction);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*MemsetD32)(CUdeviceptr, unsigned, size_t);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamBeginCapture)(CUstream, int);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    /* optional (driver 12.0+): NULL when libcuda lacks it; kernels listed with pdl launch without it */
    CUresult (*LaunchKernelEx)(const rt_cu_launch_config *, CUfunction, void **, void **);
    /* optional (driver 12.0+): NULL when libcuda lacks it; only attn_prefill impl=wgmma_tma needs it */
    CUresult (*TensorMapEncodeTiled)(void *map, int dtype, unsigned rank, void *addr, const unsigned long long *dims,
                                     const unsigned long long *strides, const unsigned *box, const unsigned *estrides,
                                     int interleave, int swizzle, int l2, int oob);
} rt_cu;

/* Loads libcuda.so.1 and calls cuInit once (thread-safe). Returns the table, or
 * NULL with KF_ERR_CUDA and a message ("no CUDA driver/device found: ...") in *e (e may be NULL). */
const rt_cu *rt_cuda(core_err *e);
/* "CUDA_ERROR_X (code)" for a result. */
void rt_cuda_errstr(CUresult r, char *buf, size_t n);

/* Facts of device ordinal dev (for templates, the database and the tuner). */
typedef struct rt_devinfo {
    char name[256];
    char uuid[64];        /* "GPU-xxxxxxxx-xxxx-..." */
    char arch[16];        /* "sm_90a" for cc 9.0, "sm_80", ... */
    int cc_major, cc_minor, sms, smem_optin, smem_sm, regs_sm;
    long long l2;
    int clock_mhz, mem_clock_mhz;
    char driver[32];      /* driver API version "13.0" */
    size_t total_mem;
} rt_devinfo;
/* 0, or -1 with KF_ERR_CUDA and a message in *e (no driver, no such device). */
int rt_device_info(int ordinal, rt_devinfo *info, core_err *e);

#endif
