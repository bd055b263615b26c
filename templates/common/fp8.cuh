/* common/fp8.cuh: the e4m3 (FP8) decode rule of every kernel that reads FP8 K/V (the fast kernels, the naive reference) */
#ifndef KF_FP8_CUH
#define KF_FP8_CUH

/*
 * Needs common/types.cuh (KF_BF16, kf_u32, kf_pack2) before it.
 *
 * The rule: an e4m3 byte SEEEEMMM becomes the fp16 S0EEEEMMM0000000 (the sign to bit 15, exponent and mantissa
 * to bits 13..7): an fp16 exponent bias of 15 against e4m3's 7, so the fp16 value is the e4m3 value / 256,
 * exact, subnormals included. Byte 0x7f / 0xff (e4m3's NaN) decodes as +-480 / 256 like any other byte: no
 * kernel reads a byte it must not (the tests put 0x7f wherever one would). A caller folds the 256 and the
 * per-head scale into its own factors: value = scale[kv head] * 256 * decoded.
 */

/* 4 e4m3 bytes -> 4 16-bit values of the dtype, each e4m3 value / 256 (exact, subnormals included): the byte's
 * sign to bit 15, its exponent and mantissa to bits 13..7 of an fp16 (bias 15 against e4m3's 7); bf16 through fp32. */
__device__ __forceinline__ void kf_e4m3x4(kf_u32 w, kf_u32 &lo, kf_u32 &hi)
{
    kf_u32 t0, t1;
    asm("prmt.b32 %0, %1, 0, 0x1404;" : "=r"(t0) : "r"(w));
    asm("prmt.b32 %0, %1, 0, 0x3424;" : "=r"(t1) : "r"(w));
    t0 = (t0 & 0x80008000u) | ((t0 >> 1) & 0x3f803f80u);
    t1 = (t1 & 0x80008000u) | ((t1 >> 1) & 0x3f803f80u);
#if KF_BF16
    float a, b, c, d;
    asm("cvt.f32.f16 %0, %1;" : "=f"(a) : "h"((unsigned short)(t0 & 0xffffu)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(b) : "h"((unsigned short)(t0 >> 16)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(c) : "h"((unsigned short)(t1 & 0xffffu)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(d) : "h"((unsigned short)(t1 >> 16)));
    lo = kf_pack2(a, b);
    hi = kf_pack2(c, d);
#else
    lo = t0;
    hi = t1;
#endif
}

/* One e4m3 byte -> its value / 256 as a float (exact): the same bits as one lane of kf_e4m3x4, for either dtype
 * (the fp16 -> bf16 step of kf_e4m3x4 is exact, so the value is the one the fast kernels' tiles hold). */
__device__ __forceinline__ float kf_e4m3_f32(unsigned int b)
{
    const unsigned short h = (unsigned short)(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

#endif
