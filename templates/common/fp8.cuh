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
 * per-head scale into its own factors: value = scale[kv head] * 256 * decoded. attn/decode_direct.cuh does not
 * decode: its bytes are the e4m3 MMA's operands (kf_mma16832_e4m3 below), where 0x7f / 0xff is NaN.
 */

/* Two e4m3 bytes at bits 8..15 and 24..31 of t (the rest zero) -> fp16x2, each value / 256 (exact): the fp16 rule,
 * sign to bit 15, exponent and mantissa to bits 13..7 */
__device__ __forceinline__ kf_u32 kf_e4m3x2_h(kf_u32 t) { return (t & 0x80008000u) | ((t >> 1) & 0x3f803f80u); }

/* 4 e4m3 bytes -> 4 fp16 values / 256 whatever the dtype (the fp16 rule; the bf16 decode's K16 path) */
__device__ __forceinline__ void kf_e4m3x4_h(kf_u32 w, kf_u32 &lo, kf_u32 &hi)
{
    kf_u32 t0, t1;
    asm("prmt.b32 %0, %1, 0, 0x1404;" : "=r"(t0) : "r"(w));
    asm("prmt.b32 %0, %1, 0, 0x3424;" : "=r"(t1) : "r"(w));
    lo = kf_e4m3x2_h(t0);
    hi = kf_e4m3x2_h(t1);
}

/* 4 e4m3 bytes -> 4 16-bit values of the dtype, each e4m3 value / 256 (exact, subnormals included).
 * fp16: the byte's sign to bit 15, its exponent and mantissa to bits 13..7 (bias 15 against e4m3's 7).
 * bf16: the byte's exponent and mantissa to bits 26..20 of an fp32 and its sign to bit 31 make the value *
 * 2^-120 exactly (an fp32 subnormal for e4m3's subnormals); one fp32 multiply by 2^112 (mul.rn.f32: no flush,
 * whatever the compile flags) gives value / 256, a normal fp32 with at most 3 mantissa bits, so its high half is
 * the bf16, taken by one byte permute per pair. No conversion instruction: the earlier route (fp16 bits, then
 * cvt.f32.f16 and cvt.rn.bf16x2.f32, 6 conversions a word) ran on the quarter-rate conversion pipe, the FP8
 * decode's bottleneck (bench/NOTES.md, session 6). Checked here for every byte in every lane (not on a GPU yet). */
__device__ __forceinline__ void kf_e4m3x4(kf_u32 w, kf_u32 &lo, kf_u32 &hi)
{
#if KF_BF16
    const float two112 = 0x1p112f;
    const kf_u32 f0 = ((w & 0x7Fu) << 20) | ((w & 0x80u) << 24), f1 = ((w & 0x7F00u) << 12) | ((w & 0x8000u) << 16);
    const kf_u32 f2 = ((w & 0x7F0000u) << 4) | ((w & 0x800000u) << 8), f3 = ((w & 0x7F000000u) >> 4) | (w & 0x80000000u);
    float v0, v1, v2, v3;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(v0) : "f"(__uint_as_float(f0)), "f"(two112));
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(v1) : "f"(__uint_as_float(f1)), "f"(two112));
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(v2) : "f"(__uint_as_float(f2)), "f"(two112));
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(v3) : "f"(__uint_as_float(f3)), "f"(two112));
    const kf_u32 r0 = __float_as_uint(v0), r1 = __float_as_uint(v1), r2 = __float_as_uint(v2), r3 = __float_as_uint(v3);
    asm("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(lo) : "r"(r0), "r"(r1));   /* the high halves: element 0 low */
    asm("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(hi) : "r"(r2), "r"(r3));
#else
    kf_e4m3x4_h(w, lo, hi);
#endif
}


/* 16 e4m3 bytes at shared address src -> 16 16-bit values (kf_e4m3x4): the first 8 to the 16 bytes at dst_lo, the
 * last 8 to dst_hi (the converted tiles of attn/fwd.cuh and parts/decode.cuh) */
__device__ __forceinline__ void kf_e4m3x16_smem(kf_u32 src, kf_u32 dst_lo, kf_u32 dst_hi)
{
    kf_u32 w0, w1, w2, w3;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3) : "r"(src));
    kf_u32 o[8];
    kf_e4m3x4(w0, o[0], o[1]);
    kf_e4m3x4(w1, o[2], o[3]);
    kf_e4m3x4(w2, o[4], o[5]);
    kf_e4m3x4(w3, o[6], o[7]);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(dst_lo), "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3])
                 : "memory");
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(dst_hi), "r"(o[4]), "r"(o[5]), "r"(o[6]), "r"(o[7])
                 : "memory");
}

/* Two floats -> fp16x2 (round to nearest even), whatever KF_BF16: P of the FP8 products (attn/fwd.cuh,
 * attn/decode_direct.cuh) */
__device__ __forceinline__ kf_u32 kf_pack2_h(float lo, float hi)
{
    kf_u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
/* d += a * b on the fp16 MMA (fp32 accumulators), whatever KF_BF16 */
__device__ __forceinline__ void kf_mma16816_h(float d[4], const kf_u32 a[4], kf_u32 b0, kf_u32 b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

/* 4 x 4 byte transpose (V^T's fragments of the FP8 wgmma kernels: attn/decode_direct.cuh, attn/decode_wg8.cuh, parts/decode_wg8.cuh): byte i of t[j] = byte j of w[i], 8 permutes */
__device__ __forceinline__ void kf_tr4x4(const kf_u32 (&w)[4], kf_u32 (&t)[4])
{
    kf_u32 x0, x1, y0, y1;
    asm("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(x0) : "r"(w[0]), "r"(w[1]));
    asm("prmt.b32 %0, %1, %2, 0x7362;" : "=r"(x1) : "r"(w[0]), "r"(w[1]));
    asm("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(y0) : "r"(w[2]), "r"(w[3]));
    asm("prmt.b32 %0, %1, %2, 0x7362;" : "=r"(y1) : "r"(w[2]), "r"(w[3]));
    asm("prmt.b32 %0, %1, %2, 0x5410;" : "=r"(t[0]) : "r"(x0), "r"(y0));
    asm("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(t[1]) : "r"(x0), "r"(y0));
    asm("prmt.b32 %0, %1, %2, 0x5410;" : "=r"(t[2]) : "r"(x1), "r"(y1));
    asm("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(t[3]) : "r"(x1), "r"(y1));
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
/* The e4m3 operands of the FP8 MMA (sm_89+; attn/decode_direct.cuh) */
/* d += a * b on the e4m3 MMA m16n8k32 (fp32 accumulators) */
__device__ __forceinline__ void kf_mma16832_e4m3(float d[4], const kf_u32 a[4], kf_u32 b0, kf_u32 b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 4 floats -> 4 e4m3 bytes, x0 the lowest (nearest, ties to even; saturating at +-448, NaN kept) */
__device__ __forceinline__ kf_u32 kf_f32x4_e4m3(float x0, float x1, float x2, float x3)
{
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(x1), "f"(x0));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(x3), "f"(x2));
    return (kf_u32)lo | ((kf_u32)hi << 16);
}
/* fp16x2 -> two e4m3 bytes in the low 16 bits (the low half to the low byte; nearest, saturating) */
__device__ __forceinline__ kf_u32 kf_f16x2_e4m3x2(kf_u32 v)
{
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(v));
    return r;
}
/* Two e4m3 bytes (the low 16 bits of v) -> fp16x2, exactly */
__device__ __forceinline__ kf_u32 kf_e4m3x2_f16x2(kf_u32 v)
{
    kf_u32 r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"((unsigned short)v));
    return r;
}
/* a - b in fp16x2 (nearest) */
__device__ __forceinline__ kf_u32 kf_hsub2(kf_u32 a, kf_u32 b)
{
    kf_u32 r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
#endif

#endif
