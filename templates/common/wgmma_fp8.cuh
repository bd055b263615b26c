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

#endif
