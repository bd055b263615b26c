/* kda/decode_bulk.cuh: KDA decode on sm_90: a persistent grid streams each (sequence, value head) state through a shared-memory ring by bulk copies */
#ifndef KF_KDA_DECODE_BULK_CUH
#define KF_KDA_DECODE_BULK_CUH

/*
 * Needs kda/common.cuh, common/wgmma.cuh (kf_mbar_*, kf_fence_proxy_async), KF_DBK_THREADS (32 w) and KF_DBK_NST
 * (ring stages, >= 2); target sm_90 (cp.async.bulk).
 *
 * Items are (n, hv), hv fastest; block b takes items b, b + grid, .. (grid: one block an SM, runtime/kda_launch.c).
 * The state of an item, when it is one contiguous K-first [K][V] block (h0_vfirst 0, h0_sr = V; ht alike), comes
 * in by ONE cp.async.bulk of K V 4 bytes into ring stage k % NST (thread 0 issues it NST items ahead, completing
 * on that stage's mbarrier) and goes out by one bulk store from the same stage (thread 0, bulk group); a stage
 * is refilled only after the store from it has read it (cp.async.bulk.wait_group.read). Any other state layout
 * (V-first, padded rows) takes the per-item slow path in the same kernel: element-wise loads and stores by the
 * kf_kda_h0_off / kf_kda_ht_off offsets; h0 0 starts from zeros, ht 0 stores nothing.
 *
 * Thread t owns value column c = t % V over key rows [rg RPT, (rg + 1) RPT), rg = t / V (RG = T / V row groups,
 * RPT = K / RG rows) and updates it in the stage, two passes a token (read; read and write: the state in registers,
 * 128 or 64 rows a thread, took 248-255 registers and spilled). Per token, from (exp g, k, q) of each key row:
 *   a_c = sum_d (S[d][c] e_d) k_d, b_c = sum_d (S[d][c] e_d) q_d   (over the row groups through shared memory)
 *   u_c = beta (v_c - a_c), o_c = b_c + u_c (k . q), S[d][c] = S[d][c] e_d + k_d u_c.
 * A warp reads 32 consecutive floats of a state row: no bank conflicts. The next token's (or the next item's first
 * token's) small inputs are loaded into registers right after the current ones are staged, so their latency
 * hides behind the token's arithmetic. Sequences of any length are run in order (len 0: the state is copied).
 */
#define KF_DBK_RG (KF_DBK_THREADS / KF_KDA_V)
#define KF_DBK_RPT (KF_KDA_K / KF_DBK_RG)
#define KF_DBK_BYTES (KF_KDA_K * KF_KDA_V * 4)
#if KF_DBK_THREADS % KF_KDA_V || KF_DBK_THREADS < KF_KDA_K || KF_KDA_K % KF_DBK_RG || KF_DBK_NST < 2
#error "kforge kda decode bulk: the block must tile V columns by whole row groups, hold a thread per key element, 2+ stages"
#endif

__device__ __forceinline__ void kf_dbk_load(kf_u32 dst, const float *src, kf_u32 bytes, kf_u32 bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void kf_dbk_store(float *dst, kf_u32 src, kf_u32 bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" :: "l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's bulk groups are still reading their shared-memory source. */
template <int N>
__device__ __forceinline__ void kf_dbk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }

/* The small inputs of one token as loaded (raw): gate element t (t < K) and its bias, a_log of the head, v of the
 * thread's column, beta (thread 0), q and k (warp 0: elements lane + 32 j). */
struct kf_dbk_raw {
    float gx, gb, al, vx, braw;
    float qv[(KF_KDA_K + 31) / 32], kv[(KF_KDA_K + 31) / 32];
};

__device__ __forceinline__ void kf_dbk_load_raw(const kf_kda_params &p, int n, int hv, long long tok, kf_dbk_raw &r)
{
    const int tid = threadIdx.x;
    const bool gt = tid < KF_KDA_K;
    r.gx = gt ? p.g[(p.cu_seqlens ? 0 : (long long)n * p.g_sb) + tok * p.g_st + (long long)hv * p.g_sh + tid] : 0.f;
    r.gb = gt && p.gate && p.dt_bias ? p.dt_bias[(long long)hv * p.dt_sh + tid] : 0.f;
    r.al = p.gate ? p.a_log[hv] : 0.f;
    r.vx = kf_to_float(((const kf_u16 *)p.v)[(p.cu_seqlens ? 0 : (long long)n * p.v_sb) + tok * p.v_st
                                             + (long long)hv * p.v_sh + tid % KF_KDA_V]);
    r.braw = tid == 0 ? kf_kda_beta_raw(p, n, tok, hv) : 0.f;
    if (tid < 32)
        kf_kda_qk_load(p, n, tok, kf_kda_qk_head(p, hv), r.qv, r.kv);
}

/* Slow path (a state that is not one contiguous K-first block): the state of (n, hv) from h0 into the K-first stage
 * st [K][V] (zeros without h0), and from st into ht, element by element in the order of the global layout. */
__device__ __forceinline__ void kf_dbk_fill(const kf_kda_params &p, int n, int hv, float *st)
{
#pragma unroll 4
    for (int e = threadIdx.x; e < KF_KDA_K * KF_KDA_V; e += KF_DBK_THREADS) {
        const int kk = p.h0_vfirst ? e % KF_KDA_K : e / KF_KDA_V, vv = p.h0_vfirst ? e / KF_KDA_K : e % KF_KDA_V;
        st[kk * KF_KDA_V + vv] = p.h0 ? p.h0[kf_kda_h0_off(p, n, hv, kk, vv)] : 0.f;
    }
}

__device__ __forceinline__ void kf_dbk_drain(const kf_kda_params &p, int n, int hv, const float *st)
{
#pragma unroll 4
    for (int e = threadIdx.x; e < KF_KDA_K * KF_KDA_V; e += KF_DBK_THREADS) {
        const int kk = p.ht_vfirst ? e % KF_KDA_K : e / KF_KDA_V, vv = p.ht_vfirst ? e / KF_KDA_K : e % KF_KDA_V;
        p.ht[kf_kda_ht_off(p, n, hv, kk, vv)] = st[kk * KF_KDA_V + vv];
    }
}

/* Item it: its sequence n and value head hv, the sequence's first token row and length. */
__device__ __forceinline__ void kf_dbk_item(const kf_kda_params &p, long long it, int &n, int &hv, long long &bos, long long &len)
{
    n = (int)(it / p.hv_heads);
    hv = (int)(it - (long long)n * p.hv_heads);
    kf_kda_seq(p, n, bos, len);
}

extern "C" __global__ void __launch_bounds__(KF_DBK_THREADS, 1)
kf_kda_decode(const kf_kda_params p)
{
    extern __shared__ __align__(128) unsigned char dbk_smem[];   /* [NST][K][V] fp32 stages, then NST mbarriers */
    __shared__ __align__(16) float4 tks[KF_KDA_K];               /* (exp g, k, q, 0) of each key row */
#if KF_DBK_RG > 1
    __shared__ float red[2][KF_DBK_RG][KF_KDA_V];
#endif
    __shared__ float beta_s, qk_s;

    const int tid = threadIdx.x, c = tid % KF_KDA_V, rg = tid / KF_KDA_V, d0 = rg * KF_DBK_RPT;
    const long long items = (long long)p.hv_heads * p.nseq, G = gridDim.x;
    const kf_u32 stage0 = kf_smem_u32(dbk_smem), bar0 = stage0 + KF_DBK_NST * KF_DBK_BYTES;
    /* the bulk path: whole contiguous K-first states (16-byte aligned: the host checks h0, ht and their strides) */
    const bool bin = p.h0 && !p.h0_vfirst && p.h0_sr == KF_KDA_V;
    const bool bout = p.ht && !p.ht_vfirst && p.ht_sr == KF_KDA_V;

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < KF_DBK_NST; ++s)
            kf_mbar_init(bar0 + 8 * s, 1);
        kf_fence_proxy_async();            /* the initialised barriers, seen by the copy engine */
    }
    __syncthreads();
    if (tid == 0 && bin) {
        for (int s = 0; s < KF_DBK_NST; ++s) {
            const long long it = blockIdx.x + s * G;
            if (it >= items)
                break;
            const int n = (int)(it / p.hv_heads), hv = (int)(it - (long long)n * p.hv_heads);
            kf_mbar_expect_tx(bar0 + 8 * s, KF_DBK_BYTES);
            kf_dbk_load(stage0 + s * KF_DBK_BYTES, p.h0 + (long long)n * p.h0_sn + (long long)hv * p.h0_sh, KF_DBK_BYTES,
                        bar0 + 8 * s);
        }
    }

    kf_dbk_raw raw;
    int n = 0, hv = 0;
    long long bos = 0, len = 0;
    if (blockIdx.x < items) {
        kf_dbk_item(p, blockIdx.x, n, hv, bos, len);
        if (len > 0)
            kf_dbk_load_raw(p, n, hv, bos, raw);
    }
    int k = 0;
    for (long long it = blockIdx.x; it < items; it += G, ++k) {
        const int s = k % KF_DBK_NST;
        float *st = (float *)(dbk_smem + s * KF_DBK_BYTES);
        if (bin) {
            kf_mbar_wait(bar0 + 8 * s, (k / KF_DBK_NST) & 1);
        } else {
            /* slow path: the state element-wise into the stage (zeros without h0), in the order of its memory */
            if (bout)
                __syncthreads();               /* thread 0's wait for store k - NST (end of item k - NST + 1) first */
            kf_dbk_fill(p, n, hv, st);
            __syncthreads();
        }
        /* the item's next item (its first token's inputs are loaded during the last token) */
        int nn = 0, nhv = 0;
        long long nbos = 0, nlen = 0;
        if (it + G < items)
            kf_dbk_item(p, it + G, nn, nhv, nbos, nlen);
        for (long long i = 0; i < len; ++i) {
            /* stage the token's inputs; the previous token's readers passed the barrier at its end */
            if (tid < KF_KDA_K)
                tks[tid].x = expf(kf_kda_gate_of(p, raw.gx, raw.gb, p.gate ? expf(raw.al) : 0.f));
            if (tid < 32) {
                const float qk = kf_kda_qk_finish(p, raw.qv, raw.kv, &tks[0].z, &tks[0].y, 4);
                if (tid == 0)
                    qk_s = qk;
            }
            if (tid == 0)
                beta_s = kf_kda_beta_of(p, raw.braw);
            const float vsmc = raw.vx;           /* v of the thread's column */
            const long long tok = bos + i;
            __syncthreads();
            if (i + 1 < len)
                kf_dbk_load_raw(p, n, hv, tok + 1, raw);
            else if (it + G < items && nlen > 0)
                kf_dbk_load_raw(p, nn, nhv, nbos, raw);
            const float beta = beta_s, qk = qk_s;
            float a = 0.f, b = 0.f;
            float *sc = st + d0 * KF_KDA_V + c;   /* the thread's column, its first row */
#pragma unroll 16
            for (int r = 0; r < KF_DBK_RPT; ++r) {
                const float4 t = tks[d0 + r];
                const float e = t.x, s0 = sc[r * KF_KDA_V], x = s0 * e;  /* KF_MUTANT_NO_DECAY */
                a += (KF_KDA_DECAY_FIRST ? x : s0) * t.y;
                b += x * t.z;
            }
#if KF_DBK_RG > 1
            red[0][rg][c] = a;
            red[1][rg][c] = b;
            __syncthreads();
            a = b = 0.f;
#pragma unroll
            for (int g = 0; g < KF_DBK_RG; ++g) {
                a += red[0][g][c];
                b += red[1][g][c];
            }
#endif
            const float u = beta * (vsmc - a);  /* KF_MUTANT_BETA_TWICE */
            if (rg == 0)
                ((kf_u16 *)p.o)[(p.cu_seqlens ? 0 : (long long)n * p.o_sb) + tok * p.o_st + (long long)hv * p.o_sh + c] =
                    kf_kda_bf16(b + u * qk);
#pragma unroll 16
            for (int r = 0; r < KF_DBK_RPT; ++r) {
                const float4 t = tks[d0 + r];
                const float e = t.x, s0 = sc[r * KF_KDA_V], x = s0 * e;  /* KF_MUTANT_NO_DECAY */
                sc[r * KF_KDA_V] = x + t.y * u;
            }
            __syncthreads();                   /* tks, red and the scalars are rewritten by the next token */
        }
        if (len == 0 && it + G < items && nlen > 0)
            kf_dbk_load_raw(p, nn, nhv, nbos, raw);
        if (bout) {
            kf_fence_proxy_async();            /* these stores, seen by the bulk store */
            __syncthreads();
            if (tid == 0)
                kf_dbk_store(p.ht + (long long)n * p.ht_sn + (long long)hv * p.ht_sh, stage0 + s * KF_DBK_BYTES, KF_DBK_BYTES);
        } else {
            if (bin)
                kf_fence_proxy_async();        /* this item's state writes, before the copy engine refills the stage */
            __syncthreads();                   /* the stage is written (slow store), or read (its refill below) */
            if (p.ht)
                kf_dbk_drain(p, n, hv, st);
        }
        /* refill the stage of item k - 1 with item k - 1 + NST, once the store from it has read it */
        if (tid == 0 && k > 0) {
            if (bout)
                kf_dbk_wait_read<1>();
            const long long nx = it + (KF_DBK_NST - 1) * G;
            if (bin && nx < items) {
                const int ps = (k - 1) % KF_DBK_NST, xn = (int)(nx / p.hv_heads), xh = (int)(nx - (long long)xn * p.hv_heads);
                kf_mbar_expect_tx(bar0 + 8 * ps, KF_DBK_BYTES);
                kf_dbk_load(stage0 + ps * KF_DBK_BYTES, p.h0 + (long long)xn * p.h0_sn + (long long)xh * p.h0_sh,
                            KF_DBK_BYTES, bar0 + 8 * ps);
            }
        }
        n = nn, hv = nhv, bos = nbos, len = nlen;
    }
    if (tid == 0 && bout)
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");   /* the stores are done before the block's exit */
}

#endif
