/* common/mma.cuh: warp-level tensor-core and async-copy primitives (mma.sync m16n8k16, ldmatrix, cp.async) in inline PTX */
#ifndef KF_MMA_CUH
#define KF_MMA_CUH

/* Needs KF_BF16 and common/types.cuh. All shared-memory addresses are 32-bit shared-window addresses. */

__device__ __forceinline__ kf_u32 kf_smem_u32(const void *ptr)
{
    kf_u32 r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(ptr));
    return r;
}

/* 16-byte global -> shared copy; when pred is false nothing is read and the 16 bytes are zero-filled. */
__device__ __forceinline__ void kf_cp_async16(kf_u32 dst, const void *src, bool pred)
{
    const int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(n) : "memory");
}

/* 4-byte global -> shared copy (a token's scale: parts/decode.cuh, parts/decode_wg8.cuh); pred false: nothing read, zero-filled */
__device__ __forceinline__ void kf_cp_async4(kf_u32 dst, const void *src, bool pred)
{
    const int n = pred ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst), "l"(src), "r"(n) : "memory");
}

/* Paged K/V: the row of one copy in its page, without a block-table load between copies. A cp.async is a memory
 * clobber, so a lookup written between two copies waits for the copies before it, and a runtime page size costs a
 * division a copy. Here, per block, lane L of a warp looks up one row of the warp's share (one division, all
 * lookups in flight at once) and each copy takes its row's page and offset by shuffle. The loaders map thread
 * t = 32 w + lane to chunk t % CH of rows t / CH + it * STEP (it < IT, STEP = THREADS / CH): warp w's rows at step
 * it are w RW + sub + it STEP, sub = lane / CH < RW = 32 / CH, so lane L looks up step L / RW, sub L % RW
 * (IT * RW <= 32: the loaders assert it). */
struct kf_pagerow {
    int pg, in;    /* the row's page (block-table entry) and row inside it; 0, 0 from kend on */
};
__device__ __forceinline__ kf_pagerow kf_page_lookup(const int *bt, int ps, int j0, int kend, int lane, int w, int rw,
                                                     int step)
{
    const int j = j0 + w * rw + lane % rw + (lane / rw) * step;
    kf_pagerow x = {0, 0};
    if (j < kend) {
        const int q = j / ps;
        x.pg = bt[q];
        x.in = j - q * ps;
    }
    return x;
}
/* The row offset (elements) of the copy at step it, sub-row sub, from the warp's lookups x. */
__device__ __forceinline__ long long kf_page_off(kf_pagerow x, int it, int sub, int rw, long long sb, long long ss)
{
    const int from = it * rw + sub;
    return (long long)__shfl_sync(0xffffffffu, x.pg, from) * sb + (long long)__shfl_sync(0xffffffffu, x.in, from) * ss;
}

__device__ __forceinline__ void kf_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Wait until at most N of this thread's most recent commit groups are pending. */
template <int N> __device__ __forceinline__ void kf_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

/* Four 8x8 b16 matrices; lane l gives the row address of matrix l/8, row l%8. */
__device__ __forceinline__ void kf_ldsm_x4(kf_u32 r[4], kf_u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void kf_ldsm_x4_t(kf_u32 r[4], kf_u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

/* d += a(16x16, row) * b(16x8, col); fp32 accumulators. */
__device__ __forceinline__ void kf_mma16816(float d[4], const kf_u32 a[4], kf_u32 b0, kf_u32 b1)
{
#if KF_BF16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#endif
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif
