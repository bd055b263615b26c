/* common/wgmma_fp8.cuh: Hopper (sm_90a) warpgroup MMA on e4m3 operands (m64nNk32, fp32 accumulators), N = 8, 16, 32, in inline PTX */
#ifndef KF_WGMMA_FP8_CUH
#define KF_WGMMA_FP8_CUH

/* Needs common/wgmma.cuh (descriptors, KF_WG_D / KF_WG_R operand lists). On sm_90a these are the native FP8
 * tensor-core instructions (QGMMA.64xNx32.F32.E4M3.E4M3 in the cubin): unlike mma.sync m16n8k32 e4m3, which sm_90a
 * emulates by unpacking every byte to fp16 (bench/NOTES.md, session 22).
 *
 * Operands. e4m3 wgmma takes both shared-memory operands K-major only (each row of A and each column of B
 * contiguous in k; no transposed form for 8-bit types): descriptors as common/wgmma.cuh's (128-byte swizzle, rows
 * of 128 bytes = 128 k values, 8-row atoms 1024 bytes apart), one k32 step = 32 bytes along the row. A from
 * registers: per warp, rows 16w + lane/4 (+8), four registers a0..a3 of four k each: a0 (row, k 4(lane%4) + 0..3),
 * a1 (row + 8, the same k), a2 (row, k 16 + 4(lane%4) + 0..3), a3 (row + 8, those k), byte i of a register its
 * k + i (CUTLASS's ALayout_64x32). Accumulators: common/wgmma.cuh's layout (d[4c + e]: row 16w + lane/4 + 8 (e/2),
 * column 8c + 2 (lane%4) + (e%2)).
 *
 * The FP8 accumulation inside the tensor core keeps fewer bits than fp32 over long k (DeepSeek-V3's report: ~14
 * bits on Hopper), so callers keep each product's k short (<= 128) and add the partial products in fp32. */

#define KF_WG8_SS(N, R, DOPS, DREGS, IA, IB, IS)                                                                     \
    __device__ __forceinline__ void kf_wgmma_e4m3_ss(float (&d)[R], unsigned long long da, unsigned long long db,   \
                                                     int scale_d)                                                   \
    {                                                                                                               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " IS ", 0;\n"                                                \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" DREGS "}, " IA ", " IB            \
                     ", p, 1, 1;\n}\n"                                                                              \
                     : DOPS : "l"(da), "l"(db), "r"(scale_d));                                                      \
    }
#define KF_WG8_RS(N, R, DOPS, DREGS, IA, IB, IS)                                                                     \
    __device__ __forceinline__ void kf_wgmma_e4m3_rs(float (&d)[R], const kf_u32 (&a)[4], unsigned long long db,    \
                                                     int scale_d)                                                   \
    {                                                                                                               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " IS ", 0;\n"                                                \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" DREGS "}, " IA ", " IB            \
                     ", p, 1, 1;\n}\n"                                                                              \
                     : DOPS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));                  \
    }

#define KF_WG8_D4 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define KF_WG8_D8 KF_WG_D8(0)
#define KF_WG8_R4 "%0, %1, %2, %3"
#define KF_WG8_R8 KF_WG8_R4 ", %4, %5, %6, %7"

/* d (+)= A (64 x 32, shared, K-major) * B (32 x N, shared, K-major); scale_d 0 overwrites d */
KF_WG8_SS(8, 4, KF_WG8_D4, KF_WG8_R4, "%4", "%5", "%6")
KF_WG8_SS(16, 8, KF_WG8_D8, KF_WG8_R8, "%8", "%9", "%10")
KF_WG8_SS(32, 16, KF_WG_D16, KF_WG_R16, "%16", "%17", "%18")
/* d (+)= A (64 x 32, registers) * B (32 x N, shared, K-major); scale_d 0 overwrites d */
KF_WG8_RS(8, 4, KF_WG8_D4, KF_WG8_R4, "{%4, %5, %6, %7}", "%8", "%9")
KF_WG8_RS(16, 8, KF_WG8_D8, KF_WG8_R8, "{%8, %9, %10, %11}", "%12", "%13")
KF_WG8_RS(32, 16, KF_WG_D16, KF_WG_R16, "{%16, %17, %18, %19}", "%20", "%21")

/* Shared-memory words and bytes of the FP8 kernels (attn/decode_wg8.cuh, parts/decode_wg8.cuh) */
__device__ __forceinline__ kf_u32 kf_w8_lds(kf_u32 addr)
{
    kf_u32 r;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(r) : "r"(addr) : "memory");
    return r;
}
__device__ __forceinline__ void kf_w8_sts8(kf_u32 addr, kf_u32 v)
{
    asm volatile("st.shared.b8 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void kf_w8_sts32(kf_u32 addr, kf_u32 v)
{
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}

/* Byte address of k slot `slot` of row n of a 128-byte-swizzled tile of 128-byte rows (Q^T, P^T) */
__device__ __forceinline__ kf_u32 kf_w8_at(kf_u32 base, int n, int slot)
{
    return base + (kf_u32)(n * 128 + ((((slot >> 4) ^ n) & 7) << 4) + (slot & 15));
}

/* The FP8 kernels' two-term e4m3 operands and their warpgroup reductions (attn/decode_wg8.cuh, parts/decode_wg8.cuh;
 * needs common/fp8.cuh, common/wgmma.cuh). Q is scaled by 2^e so the tile's largest finite |q| lies in [128, 256) and split into two
 * terms, the second what the first leaves (exact for bf16 q >= 2^-2 of the largest, the rest below 2^-10 of it:
 * attn/decode_direct.cuh's rule); P (at most 448) the same through fp16. */
__device__ __forceinline__ void kf_w8_qscale(float m, float &qsc, float &qinv)
{
    const int qe = min(126, 7 - max(-126, (int)(__float_as_uint(m) >> 23) - 127));   /* m * 2^e in [128, 256) */
    qsc = __uint_as_float((kf_u32)(qe + 127) << 23);
    qinv = __uint_as_float((kf_u32)(127 - qe) << 23);
}
/* The same for the warpgroup's tile: m this thread's largest finite |q|, reduced over the warp and through red[0..3]
 * (one barrier) */
__device__ __forceinline__ void kf_w8_qscale_wg(float m, float *red, int warp, int lane, float &qsc, float &qinv)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    kf_w8_qscale(fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])), qsc, qinv);
}
/* Four scaled q values -> terms t0, t1 (byte e of each: x[e]); x is left holding what t0 leaves */
__device__ __forceinline__ void kf_w8_qterms(float (&x)[4], kf_u32 &t0, kf_u32 &t1)
{
    t0 = kf_f32x4_e4m3(x[0], x[1], x[2], x[3]);
#pragma unroll
    for (int e = 0; e < 4; ++e)                           /* what the first term leaves (exact in fp32) */
        x[e] -= 256.f * kf_e4m3_f32((t0 >> (8 * e)) & 0xffu);
    t1 = kf_f32x4_e4m3(x[0], x[1], x[2], x[3]);
}
/* Two P values -> terms hi, lo (bytes 0 and 1 of each: a and b), through fp16 */
__device__ __forceinline__ void kf_w8_pterms(float a, float b, kf_u32 &hi, kf_u32 &lo)
{
    const kf_u32 ph = kf_pack2_h(a, b);
    hi = kf_f16x2_e4m3x2(ph);
    lo = kf_f16x2_e4m3x2(kf_hsub2(ph, kf_e4m3x2_f16x2(hi)));
}
/* The maximum of x over a warp's eight row groups (lanes of equal lane % 4: the keys as wgmma's rows) */
__device__ __forceinline__ float kf_w8_gmax(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
}
/* The row sums of a warpgroup's packed rows 4 jg + t into red[warp][TM] (their sum over the four warps is the row's),
 * between two barriers (the first: the last block's reads of red are done) */
template <int NG, int TM>
__device__ __forceinline__ void kf_w8_row_sums(const float (&rsum)[NG], float *red, int warp, int g, int t)
{
    __syncthreads();
#pragma unroll
    for (int jg = 0; jg < NG; ++jg) {
        float x = rsum[jg];
        x += __shfl_xor_sync(0xffffffffu, x, 4);
        x += __shfl_xor_sync(0xffffffffu, x, 8);
        x += __shfl_xor_sync(0xffffffffu, x, 16);
        if (g == 0)
            red[warp * TM + 4 * jg + t] = x;
    }
    __syncthreads();
}

/* V^T's A fragments of one k32 step from tr[hh][c], byte i the d d0 + c of the step's key 8 i + 2 t + hh (key slot
 * 16 hh + 4 t + i: P^T's order; kf_tr4x4 of the thread's words): a[jd], tile jd's rows g, g + 8 being d d0 + 2 jd, + 1 */
__device__ __forceinline__ void kf_w8_vfrag(const kf_u32 (&tr)[2][4], kf_u32 (&a)[2][4])
{
#pragma unroll
    for (int jd = 0; jd < 2; ++jd) {
        a[jd][0] = tr[0][2 * jd], a[jd][1] = tr[0][2 * jd + 1];
        a[jd][2] = tr[1][2 * jd], a[jd][3] = tr[1][2 * jd + 1];
    }
}
/* oc[jd] = sum over KS k32 steps of V^T's fragments va[ks][jd] times P^T's step at sP (from zero), waited for; va's
 * registers held until the products are done */
template <int KS, int R>
__device__ __forceinline__ void kf_w8_pv(float (&oc)[2][R], kf_u32 (&va)[KS][2][4], kf_u32 sP)
{
    kf_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int jd = 0; jd < 2; ++jd)
            kf_wgmma_e4m3_rs(oc[jd], va[ks][jd], kf_gmma_desc(sP + ks * 32, 16, 1024), ks > 0);
    kf_wgmma_commit();
    kf_wgmma_wait<0>();
    kf_wg_fence_regs(oc[0]);
    kf_wg_fence_regs(oc[1]);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int jd = 0; jd < 2; ++jd)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                asm volatile("" : "+r"(va[ks][jd][e]) :: "memory");
}

#endif
