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

/* d[64] (+)= A (64x16, K-major in shared memory) * B (16x128 via descriptor; tnsp_b 0: K-major, 1: MN-major).
 * scale_d 0 overwrites d. */
template <int TNSP_B>
__device__ __forceinline__ void kf_wgmma_ss_n128(float (&d)[64], unsigned long long da, unsigned long long db,
                                                 int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." KF_WG_T "." KF_WG_T " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TNSP_B));
}

/* d[64] += A (64x16 in registers, m16n8k16 A fragment per warp) * B (16x128 via descriptor). */
template <int TNSP_B>
__device__ __forceinline__ void kf_wgmma_rs_n128(float (&d)[64], const kf_u32 a[4], unsigned long long db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." KF_WG_T "." KF_WG_T " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TNSP_B));
}

/* ---- every shape by the accumulator array's size: d (+)= A (64x16, K-major, shared) * B (16xN, K-major, shared),
 * N = 128 here, 32 and 64 below; and d += A (registers) * B (MN-major), N = 64, 128, 256 below */
__device__ __forceinline__ void kf_wgmma_ss(float (&d)[64], unsigned long long da, unsigned long long db, int scale_d)
{
    kf_wgmma_ss_n128<0>(d, da, db, scale_d);
}

/* ---- the other shapes, chosen by the accumulator array's size
 *
 * d (+)= A (64x16, K-major, shared) * B (16xN, K-major, shared), N = 32 or 64; scale_d 0 overwrites d. */
__device__ __forceinline__ void kf_wgmma_ss(float (&d)[16], unsigned long long da, unsigned long long db, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." KF_WG_T "." KF_WG_T " "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, "
        "%16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void kf_wgmma_ss(float (&d)[32], unsigned long long da, unsigned long long db, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." KF_WG_T "." KF_WG_T " "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

/* O += A (64x16 in registers, the m16n8k16 A fragment per warp) * B (16xN via descriptor, MN-major: N contiguous
 * in 64-column swizzled panels LBO apart), N = 64, 128 or 256. */
__device__ __forceinline__ void kf_wgmma_rs(float (&d)[32], const kf_u32 (&a)[4], unsigned long long db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." KF_WG_T "." KF_WG_T " "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void kf_wgmma_rs(float (&d)[64], const kf_u32 (&a)[4], unsigned long long db)
{
    kf_wgmma_rs_n128<1>(d, a, db);
}

__device__ __forceinline__ void kf_wgmma_rs(float (&d)[128], const kf_u32 (&a)[4], unsigned long long db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." KF_WG_T "." KF_WG_T " "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* ---- online softmax of a 64-row accumulator tile (NC 8-column blocks; after FlashAttention-2/3)
 * Mask (keys at or past kend; with CAUSAL, keys j > i + coff) when the block reaches past kmask, then the
 * online softmax in base 2 with the scale folded: rows qi0 (sc[4c], sc[4c+1]) and qi1 (sc[4c+2], sc[4c+3]) of the
 * thread's quad. sc becomes P; corr is the factor for O; rsum stays a per-thread partial (quad-reduced at the end). */
template <int NC, int CAUSAL>
__device__ __forceinline__ void kf_wg_softmax(float (&sc)[4 * NC], int j0, int kmask, int kend, int coff, int qi0,
                                              int qi1, int lane, float sl2, float &rmax0, float &rmax1,
                                              float &rsum0, float &rsum1, float &corr0, float &corr1)
{
    if (j0 + 8 * NC > kmask) {
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = j0 + c * 8 + 2 * (lane & 3) + (e & 1);
                const int i = (e >> 1) ? qi1 : qi0;
                if (j >= kend || (CAUSAL && j > i + coff))
                    sc[4 * c + e] = KF_NEG_INF;
            }
    }
    float mx0 = rmax0, mx1 = rmax1;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        mx0 = fmaxf(mx0, fmaxf(sc[4 * c], sc[4 * c + 1]));
        mx1 = fmaxf(mx1, fmaxf(sc[4 * c + 2], sc[4 * c + 3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mu0 = (mx0 == KF_NEG_INF) ? 0.f : mx0 * sl2;   /* no -inf - -inf */
    const float mu1 = (mx1 == KF_NEG_INF) ? 0.f : mx1 * sl2;
    corr0 = kf_exp2(rmax0 * sl2 - mu0);
    corr1 = kf_exp2(rmax1 * sl2 - mu1);
    rmax0 = mx0;
    rmax1 = mx1;
    float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        sc[4 * c] = kf_exp2(sc[4 * c] * sl2 - mu0);
        sc[4 * c + 1] = kf_exp2(sc[4 * c + 1] * sl2 - mu0);
        sc[4 * c + 2] = kf_exp2(sc[4 * c + 2] * sl2 - mu1);
        sc[4 * c + 3] = kf_exp2(sc[4 * c + 3] * sl2 - mu1);
        ps0 += sc[4 * c] + sc[4 * c + 1];
        ps1 += sc[4 * c + 2] + sc[4 * c + 3];
    }
    rsum0 = rsum0 * corr0 + ps0;
    rsum1 = rsum1 * corr1 + ps1;
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

/* Orders this thread's generic-proxy view of shared memory (cp.async, st.shared) with the async proxy (wgmma). */
__device__ __forceinline__ void kf_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int R> __device__ __forceinline__ void kf_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R)); }
template <int R> __device__ __forceinline__ void kf_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R)); }

#endif
