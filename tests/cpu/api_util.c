/* tests/cpu/api_util.c: what the CPU tests of the runtime share: an H200's facts, the JIT's template defaults */
#include "tests/cpu/api_util.h"

#include <stdio.h>
#include <string.h>

#include "runtime/jit.h"

rt_devinfo api_h200(void)
{
    rt_devinfo d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "NVIDIA H200");
    snprintf(d.arch, sizeof d.arch, "sm_90a");
    d.cc_major = 9;
    d.sms = 132;
    d.smem_optin = 232448;
    d.smem_sm = 233472;
    d.regs_sm = 65536;
    d.l2 = 62914560;
    return d;
}

int api_jit_default(void *jit, const gen_kvset *shape, gen_kvset *vp, core_err *e)
{
    rt_devinfo dev = api_h200();
    return rt_jit_default(jit, shape, &dev, vp, e);
}
