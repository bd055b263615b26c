/* runtime/module.h: a loaded cubin (or PTX) image and the kernels of one variant resolved in it */
#ifndef KF_RT_MODULE_H
#define KF_RT_MODULE_H

#include <stddef.h>

#include "core/err.h"
#include "runtime/cuda.h"

#define RT_MODULE_MAX_KERNELS 8
#define RT_MODULE_NAME 64

/* One kernel of a variant as the template's kernels() lists it (mirrors gen_kernel
 * without depending on gen/): name, threads per block, dynamic shared memory bytes, and
 * whether it is launched with programmatic dependent launch (it waits on its predecessor
 * with griddepcontrol.wait before any global access, KF_PDL_ENTRY or KF_PDL_WAIT, templates/common/types.cuh). */
typedef struct rt_kernel_desc {
    char name[RT_MODULE_NAME];
    int threads;
    int smem;
    int pdl;
} rt_kernel_desc;

/* A module with its kernels in launch order. Plain data: copy the struct to share
 * it, unload once. */
typedef struct rt_module {
    CUmodule mod;                              /* NULL when not loaded */
    int n;
    rt_kernel_desc k[RT_MODULE_MAX_KERNELS];
    CUfunction fn[RT_MODULE_MAX_KERNELS];
} rt_module;

/* Makes the primary context of device `ordinal` current on the calling thread
 * (retained once per process and never released: the process owns it).
 * Returns 0, or -1 with KF_ERR_CUDA and a message in *e (no driver, no such device). */
int rt_module_context(int ordinal, core_err *e);

/* Loads image (a cubin, or NUL-terminated PTX) into the current context and resolves
 * the n kernels (n <= RT_MODULE_MAX_KERNELS); kernels asking for more than 48 KiB of
 * dynamic shared memory get CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES set.
 * Returns 0, or -1 with KF_ERR_CUDA and *e naming the failing call, kernel and CUDA error; on
 * failure nothing stays loaded. A context must be current (rt_module_context). */
int rt_module_load(rt_module *m, const void *image, const rt_kernel_desc *kernels, int n, core_err *e);

/* Launches kernel i of m with grid, its own block size and dynamic shared memory,
 * on stream s (NULL: the default stream); args as cuLaunchKernel takes them. A kernel
 * listed with pdl is launched by cuLaunchKernelEx with programmatic stream serialization
 * (its blocks may start while the previous kernel in the stream finishes; in a captured
 * graph, a programmatic edge), unless the driver lacks cuLaunchKernelEx or the environment
 * set KFORGE_NO_PDL=1 when the module was loaded (then a plain launch: the kernel's wait
 * returns at once).
 * Returns 0, or -1 with KF_ERR_CUDA and a message in *e (launch errors only; faults surface at
 * the next sync). */
int rt_module_launch(const rt_module *m, int i, const unsigned grid[3], void **args, CUstream s, core_err *e);

/* Unloads the module (m zeroed). NULL or a module never loaded: no-op. */
void rt_module_unload(rt_module *m);

#endif
