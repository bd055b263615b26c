/* ceil/gemm.cuh: kforge's own bf16 GEMM C = A B^T for the measured compute ceiling: 128x128x32 CTA tile, 8 warps, mma.sync m16n8k16, cp.async pipeline, swizzled ldmatrix */
#ifndef KF_CEIL_GEMM_CUH
#define KF_CEIL_GEMM_CUH

/* Needs KF_BF16, KF_WM (warps along M: 2 or 4), KF_STAGES (2..4), common/types.cuh, common/mma.cuh.
 * A [M, K], B [N, K] (both K-contiguous), C [M, N]: bf16, fp32 accumulation.
 * M and N multiples of 128, K a multiple of 32 (the template's valid() says so). */
#define KF_GBM 128
#define KF_GBN 128
#define KF_GBK 32
#define KF_GWN (8 / KF_WM)
#define KF_GMT (KF_GBM / (16 * KF_WM))
#define KF_GNT (KF_GBN / (8 * KF_GWN))
#define KF_GSTAGE ((KF_GBM + KF_GBN) * KF_GBK * 2)

/* A row of the tile is 32 elements = 64 bytes = four 16-byte chunks; XOR with (row/2)%4
 * puts the 8 rows one ldmatrix reads into 8 distinct 16-byte bank groups. */
__device__ __forceinline__ kf_u32 kf_gemm_swz(int row, int chunk)
{
    return (kf_u32)(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
}

/* One stage: the A and B tiles of k-block k0, 2 + 2 chunks of 16 bytes per thread. */
__device__ __forceinline__ void kf_gemm_load(kf_u32 s, const kf_u16 *A, const kf_u16 *B, int m0, int n0,
                                             int k0, int K, int tid)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int q = tid + i * 256, row = q >> 2, ch = q & 3;
        kf_cp_async16(s + kf_gemm_swz(row, ch), A + (size_t)(m0 + row) * K + k0 + ch * 8, true);
        kf_cp_async16(s + KF_GBM * KF_GBK * 2 + kf_gemm_swz(row, ch), B + (size_t)(n0 + row) * K + k0 + ch * 8,
                      true);
    }
}

extern "C" __global__ void __launch_bounds__(256, 1)
kf_ceil_gemm(const kf_u16 *__restrict__ A, const kf_u16 *__restrict__ B, kf_u16 *__restrict__ C, int M, int N,
             int K)
{
    extern __shared__ __align__(128) unsigned char kf_gemm_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / KF_GWN, wn = warp % KF_GWN;
    const int m0 = blockIdx.y * KF_GBM, n0 = blockIdx.x * KF_GBN;
    const kf_u32 sbase = kf_smem_u32(kf_gemm_smem);
    const int KT = K / KF_GBK;
    float acc[KF_GMT][KF_GNT][4];
#pragma unroll
    for (int i = 0; i < KF_GMT; i++)
#pragma unroll
        for (int j = 0; j < KF_GNT; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

#pragma unroll
    for (int s = 0; s < KF_STAGES - 1; s++) {
        if (s < KT)
            kf_gemm_load(sbase + s * KF_GSTAGE, A, B, m0, n0, s * KF_GBK, K, tid);
        kf_cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        kf_cp_async_wait<KF_STAGES - 2>();   /* k-block kt has landed (this thread's copies) */
        __syncthreads();                     /* everyone's, and the slot refilled below is free */
        const int pre = kt + KF_STAGES - 1;
        if (pre < KT)
            kf_gemm_load(sbase + (pre % KF_STAGES) * KF_GSTAGE, A, B, m0, n0, pre * KF_GBK, K, tid);
        kf_cp_async_commit();
        const kf_u32 sa = sbase + (kt % KF_STAGES) * KF_GSTAGE, sb = sa + KF_GBM * KF_GBK * 2;
#pragma unroll
        for (int kk = 0; kk < KF_GBK / 16; kk++) {
            kf_u32 af[KF_GMT][4], bf[KF_GNT / 2][4];
#pragma unroll
            for (int mt = 0; mt < KF_GMT; mt++)
                kf_ldsm_x4(af[mt], sa + kf_gemm_swz(wm * KF_GMT * 16 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
            for (int np = 0; np < KF_GNT / 2; np++)
                kf_ldsm_x4(bf[np], sb + kf_gemm_swz(wn * KF_GNT * 8 + np * 16 + ((lane >> 4) << 3) + (lane & 7),
                                                    kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
            for (int mt = 0; mt < KF_GMT; mt++)
#pragma unroll
                for (int nt = 0; nt < KF_GNT; nt++)
                    kf_mma16816(acc[mt][nt], af[mt], bf[nt >> 1][(nt & 1) * 2], bf[nt >> 1][(nt & 1) * 2 + 1]);
        }
    }
    kf_cp_async_wait<0>();
#pragma unroll
    for (int mt = 0; mt < KF_GMT; mt++)
#pragma unroll
        for (int nt = 0; nt < KF_GNT; nt++) {
            const int r = m0 + wm * KF_GMT * 16 + mt * 16 + (lane >> 2);
            const int c = n0 + wn * KF_GNT * 8 + nt * 8 + (lane & 3) * 2;
            *(kf_u32 *)(C + (size_t)r * N + c) = kf_pack2(acc[mt][nt][0], acc[mt][nt][1]);
            *(kf_u32 *)(C + (size_t)(r + 8) * N + c) = kf_pack2(acc[mt][nt][2], acc[mt][nt][3]);
        }
}

#endif
