/* common/wgmma.cuh: Hopper (sm_90a) warpgroup MMA, shared-memory matrix descriptors, mbarriers and register reallocation in inline PTX */
#ifndef KF_WGMMA_CUH
#define KF_WGMMA_CUH

/* Needs KF_BF16 and common/types.cuh, common/mma.cuh; compile target sm_90a (wgmma, setmaxnreg).
 *
 * Accumulator layout of wgmma m64nNk16 (fp32): warp w of the warpgroup owns rows 16w .. 16w+15; for
 * column block c (8 columns), d[4c + e] is row 16w + lane/4 + 8 (e/2), column 8c + 2 (lane%4) + (e%2),
 * the layout of mma.m16n8k16's C per n8 block. A from registers: per warp the m16n8k16 A fragment.
 *
 * Shared-memory operands use the 128-byte swizzle: a tile is stored as panels of 64 16-bit elements
 * (128 bytes) per row, 8-row atoms of 1024 bytes, 16-byte chunk c of row r at chunk c ^ (r & 7);
 * every panel starts 1024-byte aligned. */

#if KF_BF16
#define KF_WG_T "bf16"
#else
#define KF_WG_T "f16"
#endif

/* Byte offset of (row r, 16-byte chunk c) in a panel-major 128-byte-swizzled tile of `rows` rows (the layout above). */
__device__ __forceinline__ kf_u32 kf_wg_swz(int rows, int r, int c)
{
    return (kf_u32)((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* Matrix descriptor: start address, leading / stride byte offsets, 128-byte swizzle (mode 1, bits 62-63). */
__device__ __forceinline__ unsigned long long kf_gmma_desc(kf_u32 saddr, kf_u32 lbo, kf_u32 sbo)
{
    unsigned long long d = 0;
    d |= (unsigned long long)((saddr & 0x3FFFF) >> 4);
    d |= (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16;
    d |= (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32;
    d |= 1ull << 62;
    return d;
}

__device__ __forceinline__ void kf_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void kf_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void kf_wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator reads or writes across wgmma issue / wait. */
template <int R> __device__ __forceinline__ void kf_wg_fence_regs(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; ++i)
        asm volatile("" : "+f"(d[i]) :: "memory");
}

/* The operands of a wgmma's accumulator: "+f" d[0] .. d[R-1] (KF_WG_D<R>) and their placeholders %0 .. %R-1 in
 * the instruction (KF_WG_R<R>); the operands after them are numbered from R on. */
#define KF_WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define KF_WG_D32_AT(i) KF_WG_D8(i), KF_WG_D8(i + 8), KF_WG_D8(i + 16), KF_WG_D8(i + 24)
#define KF_WG_D16 KF_WG_D8(0), KF_WG_D8(8)
#define KF_WG_D40 KF_WG_D32_AT(0), KF_WG_D8(32)
#define KF_WG_D32 KF_WG_D32_AT(0)
#define KF_WG_D64 KF_WG_D32_AT(0), KF_WG_D32_AT(32)
#define KF_WG_D128 KF_WG_D64, KF_WG_D32_AT(64), KF_WG_D32_AT(96)
#define KF_WG_R16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KF_WG_R32 KF_WG_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KF_WG_R40 KF_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define KF_WG_R64 KF_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "      \
                  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KF_WG_R128 KF_WG_R64 ", "                                                                                     \
                   "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                 \
                   "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                 \
                   "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "     \
                   "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

/* d[64] (+)= A (64x16, K-major in shared memory) * B (16x128 via descriptor; tnsp_b 0: K-major, 1: MN-major).
 * scale_d 0 overwrites d. */
template <int TNSP_B>
__device__ __forceinline__ void kf_wgmma_ss_n128(float (&d)[64], unsigned long long da, unsigned long long db,
                                                 int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R64 "}, "
                 "%64, %65, p, 1, 1, 0, %67;\n}\n"
                 : KF_WG_D64 : "l"(da), "l"(db), "r"(scale_d), "n"(TNSP_B));
}

/* d[64] += A (64x16 in registers, m16n8k16 A fragment per warp) * B (16x128 via descriptor). */
template <int TNSP_B>
__device__ __forceinline__ void kf_wgmma_rs_n128(float (&d)[64], const kf_u32 a[4], unsigned long long db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R64 "}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : KF_WG_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TNSP_B));
}

/* ---- every shape by the accumulator array's size: d (+)= A (64x16, K-major, shared) * B (16xN, K-major, shared),
 * N = 128 here, 32 and 64 below; d += A (K-major, shared) * B (MN-major), N = 128, 256 below; and d += A (registers)
 * * B (MN-major), N = 64, 128, 256 below */
__device__ __forceinline__ void kf_wgmma_ss(float (&d)[64], unsigned long long da, unsigned long long db, int scale_d)
{
    kf_wgmma_ss_n128<0>(d, da, db, scale_d);
}

/* ---- the other shapes, chosen by the accumulator array's size
 *
 * d (+)= A (64x16, K-major, shared) * B (16xN, K-major, shared), N = 32, 64 or 80; scale_d 0 overwrites d. */
__device__ __forceinline__ void kf_wgmma_ss(float (&d)[16], unsigned long long da, unsigned long long db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R16 "}, "
                 "%16, %17, p, 1, 1, 0, 0;\n}\n"
                 : KF_WG_D16 : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void kf_wgmma_ss(float (&d)[32], unsigned long long da, unsigned long long db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R32 "}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : KF_WG_D32 : "l"(da), "l"(db), "r"(scale_d));
}

/* N = 80 (the prefill's 80-key blocks at head dim 256, FlashAttention-3's tile there) */
__device__ __forceinline__ void kf_wgmma_ss(float (&d)[40], unsigned long long da, unsigned long long db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n80k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R40 "}, "
                 "%40, %41, p, 1, 1, 0, 0;\n}\n"
                 : KF_WG_D40 : "l"(da), "l"(db), "r"(scale_d));
}

/* d += A (64x16, K-major, shared) * B (16xN, MN-major, shared), N = 128 or 256 (O += P V with P in shared memory) */
__device__ __forceinline__ void kf_wgmma_ss_mn(float (&d)[64], unsigned long long da, unsigned long long db)
{
    kf_wgmma_ss_n128<1>(d, da, db, 1);
}

__device__ __forceinline__ void kf_wgmma_ss_mn(float (&d)[128], unsigned long long da, unsigned long long db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R128 "}, "
                 "%128, %129, p, 1, 1, 0, 1;\n}\n"
                 : KF_WG_D128 : "l"(da), "l"(db), "r"(1));
}

/* O += A (64x16 in registers, the m16n8k16 A fragment per warp) * B (16xN via descriptor, MN-major: N contiguous
 * in 64-column swizzled panels LBO apart), N = 64, 128 or 256. */
__device__ __forceinline__ void kf_wgmma_rs(float (&d)[32], const kf_u32 (&a)[4], unsigned long long db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R32 "}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : KF_WG_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void kf_wgmma_rs(float (&d)[64], const kf_u32 (&a)[4], unsigned long long db)
{
    kf_wgmma_rs_n128<1>(d, a, db);
}

__device__ __forceinline__ void kf_wgmma_rs(float (&d)[128], const kf_u32 (&a)[4], unsigned long long db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R128 "}, "
                 "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 : KF_WG_D128 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* ---- online softmax of a 64-row accumulator tile (NC 8-column blocks; after FlashAttention-2/3), in base 2 with the
 * scale folded: rows qi0 (sc[4c], sc[4c+1]) and qi1 (sc[4c+2], sc[4c+3]) of the thread's quad.
 * The steps that update the row max m and sum l are statement macros: a kernel that keeps m and l as plain locals
 * compiles to other code (other cubins) once a function takes them by reference. kf_wg_softmax is the function. */

/* m (rmax) -> the row maxima mx: mu = mx sl2 (0 for a row that has seen no key: no -inf - -inf) and corr =
 * 2^(m sl2 - mu), the factor that brings what was accumulated at m to mx; mu and corr are the caller's variables. */
#define KF_WG_REBASE(sl2, mx0, mx1, rmax0, rmax1, mu0, mu1, corr0, corr1)                                           \
    {                                                                                                               \
        mu0 = ((mx0) == KF_NEG_INF) ? 0.f : (mx0) * (sl2);                                                          \
        mu1 = ((mx1) == KF_NEG_INF) ? 0.f : (mx1) * (sl2);                                                          \
        corr0 = kf_exp2((rmax0) * (sl2) - (mu0));                                                                   \
        corr1 = kf_exp2((rmax1) * (sl2) - (mu1));                                                                   \
        rmax0 = (mx0);                                                                                              \
        rmax1 = (mx1);                                                                                              \
    }

/* The online-softmax step at the row maxima mx (max(m, the block's)): sc (S) becomes P, m moves to mx, l (rsum: a
 * per-thread partial, quad-reduced at the end) is brought to mx and adds P's sums; corr (the caller's) is O's factor. */
#define KF_WG_ONLINE(NC, sc, sl2, mx0, mx1, rmax0, rmax1, rsum0, rsum1, corr0, corr1)                               \
    {                                                                                                               \
        float kf_mu0, kf_mu1;                                                                                       \
        KF_WG_REBASE(sl2, mx0, mx1, rmax0, rmax1, kf_mu0, kf_mu1, corr0, corr1);                                    \
        float kf_ps0 = 0.f, kf_ps1 = 0.f;                                                                           \
        _Pragma("unroll") for (int kf_c = 0; kf_c < (NC); ++kf_c) {                                                 \
            sc[4 * kf_c] = kf_exp2(sc[4 * kf_c] * (sl2) - kf_mu0);                                                  \
            sc[4 * kf_c + 1] = kf_exp2(sc[4 * kf_c + 1] * (sl2) - kf_mu0);                                          \
            sc[4 * kf_c + 2] = kf_exp2(sc[4 * kf_c + 2] * (sl2) - kf_mu1);                                          \
            sc[4 * kf_c + 3] = kf_exp2(sc[4 * kf_c + 3] * (sl2) - kf_mu1);                                          \
            kf_ps0 += sc[4 * kf_c] + sc[4 * kf_c + 1];                                                              \
            kf_ps1 += sc[4 * kf_c + 2] + sc[4 * kf_c + 3];                                                          \
        }                                                                                                           \
        rsum0 = (rsum0) * (corr0) + kf_ps0;                                                                         \
        rsum1 = (rsum1) * (corr1) + kf_ps1;                                                                         \
    }

/* Mask (keys at or past kend; with CAUSAL, keys j > i + coff) when the block at key j0 reaches past kmask, the row
 * maxima over the quad (and m), then KF_WG_ONLINE. */
#define KF_WG_SOFTMAX(NC, CAUSAL, sc, j0, kmask, kend, coff, qi0, qi1, lane, sl2, rmax0, rmax1, rsum0, rsum1, corr0,  \
                      corr1)                                                                                        \
    {                                                                                                               \
        if ((j0) + 8 * (NC) > (kmask)) {                                                                            \
            _Pragma("unroll") for (int kf_c = 0; kf_c < (NC); ++kf_c)                                               \
            _Pragma("unroll") for (int kf_e = 0; kf_e < 4; ++kf_e) {                                                \
                const int kf_j = (j0) + kf_c * 8 + 2 * ((lane) & 3) + (kf_e & 1);                                   \
                const int kf_i = (kf_e >> 1) ? (qi1) : (qi0);                                                       \
                if (kf_j >= (kend) || ((CAUSAL) && kf_j > kf_i + (coff)))                                           \
                    sc[4 * kf_c + kf_e] = KF_NEG_INF;                                                               \
            }                                                                                                       \
        }                                                                                                           \
        float kf_mx0 = (rmax0), kf_mx1 = (rmax1);                                                                   \
        _Pragma("unroll") for (int kf_c = 0; kf_c < (NC); ++kf_c) {                                                 \
            kf_mx0 = fmaxf(kf_mx0, fmaxf(sc[4 * kf_c], sc[4 * kf_c + 1]));                                          \
            kf_mx1 = fmaxf(kf_mx1, fmaxf(sc[4 * kf_c + 2], sc[4 * kf_c + 3]));                                      \
        }                                                                                                           \
        kf_mx0 = fmaxf(kf_mx0, __shfl_xor_sync(0xffffffffu, kf_mx0, 1));                                            \
        kf_mx1 = fmaxf(kf_mx1, __shfl_xor_sync(0xffffffffu, kf_mx1, 1));                                            \
        kf_mx0 = fmaxf(kf_mx0, __shfl_xor_sync(0xffffffffu, kf_mx0, 2));                                            \
        kf_mx1 = fmaxf(kf_mx1, __shfl_xor_sync(0xffffffffu, kf_mx1, 2));                                            \
        KF_WG_ONLINE(NC, sc, sl2, kf_mx0, kf_mx1, rmax0, rmax1, rsum0, rsum1, corr0, corr1);                        \
    }

/* KF_WG_SOFTMAX as a function (m, l and corr by reference) */
template <int NC, int CAUSAL>
__device__ __forceinline__ void kf_wg_softmax(float (&sc)[4 * NC], int j0, int kmask, int kend, int coff, int qi0,
                                              int qi1, int lane, float sl2, float &rmax0, float &rmax1,
                                              float &rsum0, float &rsum1, float &corr0, float &corr1)
{
    KF_WG_SOFTMAX(NC, CAUSAL, sc, j0, kmask, kend, coff, qi0, qi1, lane, sl2, rmax0, rmax1, rsum0, rsum1, corr0, corr1);
}

/* Scales the accumulator's rows: qi0 (d[4c], d[4c+1]) by f0, qi1 (d[4c+2], d[4c+3]) by f1 (O by corr) */
template <int R>
__device__ __forceinline__ void kf_wg_scale_rows(float (&d)[R], float f0, float f1)
{
#pragma unroll
    for (int c = 0; c < R / 4; ++c) {
        d[4 * c] *= f0;
        d[4 * c + 1] *= f0;
        d[4 * c + 2] *= f1;
        d[4 * c + 3] *= f1;
    }
}

/* P (accumulator layout, 8K keys) -> the A fragments of the K k16 steps: step kk is 8-column blocks 2kk and 2kk+1,
 * {row qi0 keys 16kk + 2 (lane % 4) .., row qi1 the same, row qi0 keys + 8, row qi1 keys + 8} */
template <int K>
__device__ __forceinline__ void kf_wg_pack_p(kf_u32 (&pa)[K][4], const float (&sc)[8 * K])
{
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
        pa[kk][0] = kf_pack2(sc[8 * kk + 0], sc[8 * kk + 1]);
        pa[kk][1] = kf_pack2(sc[8 * kk + 2], sc[8 * kk + 3]);
        pa[kk][2] = kf_pack2(sc[8 * kk + 4], sc[8 * kk + 5]);
        pa[kk][3] = kf_pack2(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
}

/* Keeps the compiler from reusing the registers of A fragments before the wgmma that reads them has completed */
template <int K>
__device__ __forceinline__ void kf_wg_fence_frags(kf_u32 (&pa)[K][4])
{
#pragma unroll
    for (int kk = 0; kk < K; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            asm volatile("" : "+r"(pa[kk][e]) :: "memory");
}

/* ---- mbarriers (CTA scope) */
__device__ __forceinline__ void kf_mbar_init(kf_u32 bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void kf_mbar_arrive(kf_u32 bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(bar) : "memory");
}

/* Arrives on bar once every cp.async this thread issued before has landed (counts against the init count). */
__device__ __forceinline__ void kf_mbar_arrive_cp_async(kf_u32 bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}

/* Blocks until the phase with the given parity has completed. A phase that never completes (a pipeline
 * bug) traps after 2^28 polls (seconds) instead of hanging the GPU: the launch then fails visibly. */
__device__ __forceinline__ void kf_mbar_wait(kf_u32 bar, int parity)
{
    asm volatile(
        "{\n.reg .pred P1;\n.reg .u32 n;\nmov.u32 n, 0;\nKF_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra KF_DONE;\n"
        "add.u32 n, n, 1;\nsetp.gt.u32 P1, n, 268435456;\n@P1 trap;\n"
        "bra KF_WAIT;\nKF_DONE:\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

/* ---- the copy engine (TMA): a box of a tensor map (a CUtensorMap the host encoded, in parameter space:
 * __grid_constant__) into shared memory, completing transactions on an mbarrier */
/* arrive (count 1) and expect `bytes` of copy-engine transactions on bar */
__device__ __forceinline__ void kf_mbar_expect_tx(kf_u32 bar, kf_u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}

/* one box of a 4D tensor map at coordinates (c0 column, c1 row, c2 head, c3 batch) into shared dst, completing on bar */
__device__ __forceinline__ void kf_tma_load4(kf_u32 dst, const void *map, int c0, int c1, int c2, int c3, kf_u32 bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 :: "r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
}

__device__ __forceinline__ void kf_tma_prefetch(const void *map)
{
    asm volatile("prefetch.tensormap [%0];\n" :: "l"((unsigned long long)map) : "memory");
}

/* ---- the copy engine without a tensor map: 1-D bulk copies of bytes in order (sizes and both addresses multiples
 * of 16). A load completes its bytes on an mbarrier (kf_mbar_expect_tx first); a store joins this thread's bulk
 * async-group, committed by kf_bulk_commit and waited for by kf_bulk_wait_read (its shared source read, so the
 * buffer may be refilled) or kf_bulk_wait (written to global memory). */
__device__ __forceinline__ void kf_bulk_load(kf_u32 dst, const void *src, kf_u32 bytes, kf_u32 bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(dst), "l"((unsigned long long)src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void kf_bulk_store(void *dst, kf_u32 src, kf_u32 bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                 :: "l"((unsigned long long)dst), "r"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void kf_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void kf_bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void kf_bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory"); }

/* Orders this thread's generic-proxy view of shared memory (cp.async, st.shared) with the async proxy (wgmma, bulk
 * copies). */
__device__ __forceinline__ void kf_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int R> __device__ __forceinline__ void kf_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R)); }
template <int R> __device__ __forceinline__ void kf_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R)); }

#endif
