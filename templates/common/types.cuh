/* common/types.cuh: kforge's own 16-bit float storage types and conversions (inline PTX, no toolkit headers) */
#ifndef KF_TYPES_CUH
#define KF_TYPES_CUH

/* Needs KF_BF16 (1: bf16, 0: fp16) defined by the template before inclusion.
 * Elements are kept as raw 16-bit patterns; pairs as one 32-bit register (low half = first element). */
typedef unsigned short kf_u16;
typedef unsigned int kf_u32;

#define KF_NEG_INF (__int_as_float(0xff800000))

/* Programmatic dependent launch (sm_90+): the first statement of a kernel that its template's kernels() lists with
 * pdl = 1, before any global memory access. griddepcontrol.wait returns once the grid this one was launched behind has
 * completed and its writes are visible (at once when launched without the attribute); launch_dependents then lets the
 * next kernel of the stream place its blocks, which wait at their own KF_PDL_ENTRY, as soon as every block of this one
 * has passed here, so the launch of the next call overlaps this one instead of following it (the idea of FlashMLA's and
 * FlashAttention-3's launches; the PTX ISA, griddepcontrol). Elsewhere (and before sm_90): nothing. */
/* KF_PDL_WAIT: the wait alone, so the next kernel is placed only as this one's blocks exit. The combines and the MLA
 * split kernels start with it: with KF_PDL_ENTRY in both, MLA B1 Hq128 64K took 0.076 ms against 0.062 without
 * dependent launch and 0.059 with KF_PDL_WAIT (H100, bench/NOTES.md session 25; GQA decode the same either way). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KF_PDL_ENTRY() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#define KF_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define KF_PDL_ENTRY() ((void)0)
#define KF_PDL_WAIT() ((void)0)
#endif

/* Two floats -> packed pair, round to nearest even. */
__device__ __forceinline__ kf_u32 kf_pack2(float lo, float hi)
{
    kf_u32 r;
#if KF_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

/* One 16-bit element -> float. */
__device__ __forceinline__ float kf_to_float(kf_u16 x)
{
#if KF_BF16
    return __int_as_float(((int)x) << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
#endif
}

/* 2^x, approximate (ex2.approx, ftz); 2^-inf = +0. */
__device__ __forceinline__ float kf_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#endif
