/* runtime/jit.h: what the runtime asks of the generator: default variants, cache keys, NVRTC compiles (absent in libkforge_rt) */
#ifndef KF_RT_JIT_H
#define KF_RT_JIT_H

#include <stddef.h>

#include "core/err.h"
#include "db/db.h"
#include "gen/kernels.h"
#include "gen/kv.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"

typedef struct rt_jit rt_jit;

typedef struct rt_binary {
    void *image;                 /* malloc'd cubin */
    size_t size;
    gen_kernel kernels[8];
    int n_kernels;
} rt_binary;

/* NULL with a message in *e when this library has no generator (libkforge_rt: KF_ERR_NOT_TUNED) or
 * memory ran out (KF_ERR_NOMEM). */
rt_jit *rt_jit_new(const char *template_dir, core_err *e);
void rt_jit_free(rt_jit *j);
/* The template's default variant for shape (with "family"): vp = fixed values + params + family.
 * 0, or -1 with KF_ERR_UNSUPPORTED (the template's error, or its default is not valid on dev) in *e. */
int rt_jit_default(rt_jit *j, const gen_kvset *shape, const rt_devinfo *dev, gen_kvset *vp, core_err *e);
/* Variant key and binary cache key of vp on dev (no compile). 0, or -1 with KF_ERR_UNSUPPORTED (the
 * template refuses vp, or rendering it failed; libkforge_rt: KF_ERR_NOT_TUNED) in *e. */
int rt_jit_keys(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, char *variant, size_t vn,
                char *cache_key, size_t cn, core_err *e);
/* Templates rendered so far (the answers of rt_jit_default and rt_jit_keys are kept
 * for the last questions, so a warm plan renders nothing): for tests and diagnostics. */
long rt_jit_renders(const rt_jit *j);
/* Compiles vp for dev, stores it in db when db != NULL. The status is decided where the failure
 * happens: KF_ERR_UNSUPPORTED (the template refuses the variant), KF_ERR_NVRTC (rendering or
 * compiling it failed: the message carries the log's first lines), KF_ERR_DB (storing the binary
 * failed), KF_ERR_NOT_TUNED (no generator: libkforge_rt); status and message in *e. */
kf_status rt_jit_compile(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, db_store *db, rt_binary *out,
                         core_err *e);

#endif
