/* tests/gpu/gpu_job.h: what the GPU tests do with a built job: plant a mutant in its source, load it, name its values */
#ifndef KF_TESTS_GPU_JOB_H
#define KF_TESTS_GPU_JOB_H

#include <stddef.h>

#include "gen/build.h"
#include "gen/kv.h"
#include "runtime/module.h"

/* Plants a mutation into prepared job j's rendered source: in each line (under 4 KiB) holding marker, the
 * first of the npairs (from[k], to[k]) whose from occurs (from NULL: skipped) has that occurrence
 * replaced; max_lines > 0 caps the lines changed. When any is, j->src is the mutated source and
 * j->cache_key "<binary_key>.<arch>.mutant-<16 hex of its hash>". Returns the lines changed (0: j
 * untouched); aborts when out of memory. */
int gpu_job_mutate(gen_job *j, const char *arch, const char *marker, const char *const *from, const char *const *to,
                   int npairs, int max_lines);

/* Loads built job j's binary, its kernels in launch order, into m. 0, or -1 with KF_ERR_CUDA and the message in *e. */
int gpu_job_load(const gen_job *j, rt_module *m, core_err *e);

/* The variant's values as the launch code reads them: j's fixed values and params, and "family". */
void gpu_job_vp(const gen_job *j, const char *family, gen_kvset *vp);

#endif
