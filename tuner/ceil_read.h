/* tuner/ceil_read.h: the streaming-read kernel behind the "read" ceiling: its source and its NVRTC compile */
#ifndef KF_TUNER_CEIL_READ_H
#define KF_TUNER_CEIL_READ_H

#include <stddef.h>

#include "core/err.h"
#include "gen/nvrtc.h"

#define TUNE_READ_KERNEL "kf_ceil_read"
#define TUNE_READ_THREADS 512   /* threads per block (the kernel's __launch_bounds__) */

/* CUDA source of kf_ceil_read(const uint4 *src, unsigned long long n, unsigned *sink):
 * a grid-stride loop of 16-byte loads over src[0..n), folded (xor) per block and
 * written once per block to sink[blockIdx.x]. Static text, never NULL. */
const char *tune_ceil_read_source(void);

/* Compiles the source for arch (cubin) with gen_nvrtc_compile. 0, or -1 with *e set (KF_ERR_NVRTC:
 * gen_nvrtc_compile's message). */
int tune_ceil_read_compile(const char *arch, gen_binary_out *out, core_err *e);

#endif
