/* runtime/jit/none.c: libkforge_rt has no generator: every JIT request is refused */
#include "runtime/jit.h"

#include <stdio.h>

rt_jit *rt_jit_new(const char *template_dir, core_err *e)
{
    (void)template_dir;
    core_err_set(e, KF_ERR_NOT_TUNED,
                 "this is libkforge_rt: no templates and no NVRTC, only bundles and database winners");
    return NULL;
}

void rt_jit_free(rt_jit *j) { (void)j; }

int rt_jit_default(rt_jit *j, const gen_kvset *shape, const rt_devinfo *dev, gen_kvset *vp, core_err *e)
{
    return core_err_fail(e, KF_ERR_UNSUPPORTED, "no JIT in libkforge_rt");
}

int rt_jit_keys(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, char *variant, size_t vn,
                char *cache_key, size_t cn, core_err *e)
{
    return core_err_fail(e, KF_ERR_NOT_TUNED, "no JIT in libkforge_rt");
}

kf_status rt_jit_compile(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, db_store *db,
                         rt_binary *out, core_err *e)
{
    return core_err_set(e, KF_ERR_NOT_TUNED, "no JIT in libkforge_rt");
}

long rt_jit_renders(const rt_jit *j)
{
    (void)j;
    return 0;
}
