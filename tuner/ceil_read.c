/* tuner/ceil_read.c: the streaming-read kernel behind the "read" ceiling: its source and its NVRTC compile */
#include "tuner/ceil_read.h"

/* Four independent 16-byte loads in flight per thread per step; the xor fold reaches
 * memory (one store per block), so the compiler must keep every load. */
static const char source[] =
    "// kforge ceiling kernel " TUNE_READ_KERNEL ": streaming device read (tuner/ceil_read.c)\n"
    "extern \"C\" __global__ void __launch_bounds__(512)\n"
    TUNE_READ_KERNEL "(const uint4 *__restrict__ src, unsigned long long n, unsigned int *__restrict__ sink)\n"
    "{\n"
    "    __shared__ unsigned int fold;\n"
    "    if (threadIdx.x == 0)\n"
    "        fold = 0;\n"
    "    __syncthreads();\n"
    "    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    unsigned int acc = 0;\n"
    "    for (; i + 3 * stride < n; i += 4 * stride) {\n"
    "        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];\n"
    "        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;\n"
    "        acc ^= c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;\n"
    "    }\n"
    "    for (; i < n; i += stride) {\n"
    "        uint4 a = src[i];\n"
    "        acc ^= a.x ^ a.y ^ a.z ^ a.w;\n"
    "    }\n"
    "    for (int o = 16; o > 0; o >>= 1)\n"
    "        acc ^= __shfl_xor_sync(0xffffffffu, acc, o);\n"
    "    if ((threadIdx.x & 31) == 0)\n"
    "        atomicXor(&fold, acc);\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0)\n"
    "        sink[blockIdx.x] = fold;\n"
    "}\n";

_Static_assert(TUNE_READ_THREADS == 512, "the source's __launch_bounds__ says 512");

const char *tune_ceil_read_source(void)
{
    return source;
}

int tune_ceil_read_compile(const char *arch, gen_binary_out *out, core_err *e)
{
    char log[sizeof e->msg];          /* gen/ keeps its (buffer, size) convention */
    if (gen_nvrtc_compile(source, TUNE_READ_KERNEL, arch, 0, out, log, sizeof log))
        return core_err_fail(e, KF_ERR_NVRTC, "%s", log);
    return 0;
}
