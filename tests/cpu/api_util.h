/* tests/cpu/api_util.h: what the CPU tests of the runtime share: an H200's facts, the JIT's template defaults */
#ifndef KF_TESTS_CPU_API_UTIL_H
#define KF_TESTS_CPU_API_UTIL_H

#include <stddef.h>

#include "gen/kv.h"
#include "runtime/cuda.h"

/* An NVIDIA H200 as rt_device_info describes one (sm_90a, 132 SMs, 227 KiB opt-in shared memory per block). */
rt_devinfo api_h200(void);

/* An rt_default_fn: the template default of shape on api_h200(), through the runtime's JIT (jit: an rt_jit). */
int api_jit_default(void *jit, const gen_kvset *shape, gen_kvset *vp, core_err *e);

#endif
