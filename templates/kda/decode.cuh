/* kda/decode.cuh: KDA decode: state slice held in registers as 16-byte rows, read and written once, tokens applied in order */
#ifndef KF_KDA_DECODE_CUH
#define KF_KDA_DECODE_CUH

/*
 * Needs kda/common.cuh, common/mma.cuh (cp.async), KF_DEC_THREADS (multiple of 32, >= 64 and >= K), KF_DEC_VSPLIT,
 * KF_DEC_WS (1: K-first state in warp slices, shuffle reductions; see below)
 * (value-column slices), KF_DEC_IPC (items per block: 1 = grid (vsplit, hv, nseq); > 1 = a strided
 * loop over the items with the next state slice prefetched into shared memory, see the kernel).
 * Grid (vsplit, hv_heads, nseq): block (x, hv, n) owns value columns [x*VC, (x+1)*VC), VC = V/vsplit,
 * of the state of (n, hv), for every token of sequence n (one token in decode; any length works).
 *
 * The state slice lives in registers in the layout of its memory: K-first [K, VC] (thread = one
 * 4-column quad of RK rows, rows interleaved by row group) or V-first [VC, K] (thread = one 4-wide
 * k quad of RV value rows); every state access is one 16-byte load or store. The layout is the
 * initial state's (ht's when h0 is 0); a final state in the other layout is written element-wise.
 * Per token: s *= exp(g); a = s^T k, b = s^T q (k-reduction: shared memory across row groups for
 * K-first, warp shuffles within a row for V-first); u = beta (v - a); o = b + u (k . q); s += k u^T.
 * State rows must be 16-byte aligned (host check).
 */
#define KF_DEC_VC (KF_KDA_V / KF_DEC_VSPLIT)
#if KF_DEC_THREADS < KF_KDA_K || KF_DEC_THREADS < 64
#error "kforge kda decode: a block needs a thread per key element (gates) and at least two warps"
#endif
#ifndef KF_DEC_WS
#define KF_DEC_WS 0
#endif
#if KF_DEC_WS
/* K-first, warp slices (ws 1): warp w owns value columns [w*VCW, (w+1)*VCW) of the block's slice over
 * all K rows: VCW/4 lanes per row, RG_K = 32/(VCW/4) row groups per warp, RK rows per lane. The
 * reduction over k (a = S^T k, b = S^T q) is a butterfly of shuffles among the lanes of one column
 * quad (xor TPR_K, 2 TPR_K, .. 16): no shared-memory reduction and one barrier per token. */
#define KF_DEC_VCW (KF_DEC_VC / (KF_DEC_THREADS / 32))
#define KF_DEC_TPR_K (KF_DEC_VCW / 4)
#define KF_DEC_RG_K (32 / KF_DEC_TPR_K)
#else
/* K-first: VC/4 threads per row, RG_K row groups, RK rows per thread */
#define KF_DEC_TPR_K (KF_DEC_VC / 4)
#define KF_DEC_RG_K (KF_DEC_THREADS / KF_DEC_TPR_K)
#endif
#define KF_DEC_RK (KF_KDA_K / KF_DEC_RG_K)
/* V-first: K/4 threads per row, RG_V row groups, RV rows per thread */
#define KF_DEC_TPR_V (KF_KDA_K / 4)
#define KF_DEC_RG_V (KF_DEC_THREADS / KF_DEC_TPR_V)
#define KF_DEC_RV (KF_DEC_VC / KF_DEC_RG_V)
#define KF_DEC_R (KF_DEC_RK > KF_DEC_RV ? KF_DEC_RK : KF_DEC_RV)

#ifndef KF_DEC_IPC
#define KF_DEC_IPC 1
#endif
/* blocks per SM the register allocation must allow (the template's estimate: 4 R + 32 registers a thread) */
#ifndef KF_DEC_MINB
#define KF_DEC_MINB 1
#endif

/* K-first layout: the thread's first key row (row r is row0 + RG_K r) and its 4-column quad, from c0 */
__device__ __forceinline__ int kf_dec_krow0()
{
#if KF_DEC_WS
    return (threadIdx.x & 31) / KF_DEC_TPR_K;
#else
    return threadIdx.x / KF_DEC_TPR_K;
#endif
}

__device__ __forceinline__ int kf_dec_kcol()
{
#if KF_DEC_WS
    return (threadIdx.x >> 5) * KF_DEC_VCW + ((threadIdx.x & 31) % KF_DEC_TPR_K) * 4;
#else
    return (threadIdx.x % KF_DEC_TPR_K) * 4;
#endif
}

/* 16-byte state loads and stores marked streaming (evict first): each state byte is touched once. */
__device__ __forceinline__ float4 kf_dec_ld4(const float *a)
{
    float4 v;
    asm("ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(a));
    return v;
}

__device__ __forceinline__ void kf_dec_st4(float *a, float x, float y, float z, float w)
{
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "l"(a), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}

/* Address of the thread's state row r (16 bytes) of (n, hv), value columns from c0, in h0. */
__device__ __forceinline__ const float *kf_dec_h0_row(const kf_kda_params &p, bool vfirst, int n, int hv, int c0, int r)
{
    const int tid = threadIdx.x;
    if (!vfirst)
        return p.h0 + kf_kda_h0_off(p, n, hv, kf_dec_krow0() + KF_DEC_RG_K * r, c0 + kf_dec_kcol());
    return p.h0 + kf_kda_h0_off(p, n, hv, (tid % KF_DEC_TPR_V) * 4, c0 + tid / KF_DEC_TPR_V + KF_DEC_RG_V * r);
}

/* The thread's state rows in h0 as row 0's address and the step between rows (row r = row 0 + r step): computed
 * once, not per row (per-row offsets cost ~70 instructions a load, the loads spread over ~1000 instructions). */
__device__ __forceinline__ const float *kf_dec_h0_rows(const kf_kda_params &p, bool vfirst, int n, int hv, int c0, long long &step)
{
    const float *r0 = kf_dec_h0_row(p, vfirst, n, hv, c0, 0);
    step = kf_dec_h0_row(p, vfirst, n, hv, c0, 1) - r0;
    return r0;
}

/* Every token of sequence n for value columns [c0, c0 + VC) of head hv, from the state slice s
 * (registers, layout of vfirst); writes o and the final state. */
__device__ __forceinline__ void kf_dec_run(const kf_kda_params &p, bool vfirst, int c0, int hv, int n, float (&s)[KF_DEC_R][4])
{
    __shared__ float qs[KF_KDA_K], ks[KF_KDA_K], eg[KF_KDA_K], vsm[KF_DEC_VC], us[KF_DEC_VC];
#if !KF_DEC_WS
    __shared__ __align__(16) float red[2][KF_DEC_RG_K][KF_DEC_VC];
#endif
    __shared__ float beta_s[1], qk_s[1];

    const int tid = threadIdx.x;
    const int h = hv / (p.hv_heads / p.h_heads);
    long long bos, len;
    kf_kda_seq(p, n, bos, len);
    /* thread coordinates of both layouts */
    const int kc = kf_dec_kcol(), rgk = kf_dec_krow0();             /* K-first */
    (void)kc;
    const int kq = tid % KF_DEC_TPR_V, rgv = tid / KF_DEC_TPR_V;    /* V-first */

    for (long long i0 = 0; i0 < len; ++i0) {
        const long long tok = bos + i0;
        /* Every global load of the token is issued before any of them is used (gate inputs: thread d < K takes
         * element d; beta; v; then q and k in warp 0), so the token costs one memory latency, not a chain of them
         * (warp 1's loop of dependent gate loads, then the v loads after it; with the hoisted state addresses:
         * vsplit 2 at N 128 H 32, sigmoid gates, 0.1659 -> 0.1458 ms in the harness, H200, session 11). */
        const bool gt = tid < KF_KDA_K;
        const float gx = gt ? p.g[(p.cu_seqlens ? 0 : (long long)n * p.g_sb) + tok * p.g_st + (long long)hv * p.g_sh + tid] : 0.f;
        const float gb = gt && p.gate && p.dt_bias ? p.dt_bias[(long long)hv * p.dt_sh + tid] : 0.f;
        const float ea = p.gate ? expf(p.a_log[hv]) : 0.f;   /* exp(a_log) */
        const float braw = tid == 0 ? kf_kda_beta_raw(p, n, tok, hv) : 0.f;
        const kf_u16 *vrow = (const kf_u16 *)p.v + (p.cu_seqlens ? 0 : (long long)n * p.v_sb) + tok * p.v_st
                             + (long long)hv * p.v_sh + c0;
#if KF_DEC_WS
        float vsmr[4] = { 0.f, 0.f, 0.f, 0.f };     /* this lane's 4 value columns (K-first; no shared copy) */
        if (!vfirst) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                vsmr[j] = kf_to_float(vrow[kc + j]);
        } else
#endif
        {
            for (int c = tid; c < KF_DEC_VC; c += KF_DEC_THREADS)
                vsm[c] = kf_to_float(vrow[c]);
        }
        if (tid < 32) {
            const float qk = kf_kda_load_qk_warp(p, n, tok, h, qs, ks, 1);
            if (tid == 0)
                qk_s[0] = qk;
        }
        if (gt)
            eg[tid] = expf(kf_kda_gate_of(p, gx, gb, ea));
        if (tid == 0)
            beta_s[0] = kf_kda_beta_of(p, braw);
        __syncthreads();
        {
            const float beta = beta_s[0], qk = qk_s[0];
            kf_u16 *o = (kf_u16 *)p.o + (p.cu_seqlens ? 0 : (long long)n * p.o_sb) + tok * p.o_st + (long long)hv * p.o_sh + c0;
#define KF_DEC_TOKROW(kk, e_, kv_, qv_) (e_ = eg[kk], kv_ = ks[kk], qv_ = qs[kk])
#define KF_DEC_TOKK(kk) ks[kk]
            const float *vsmj = vsm;

            if (!vfirst) {
                /* a[j] = sum_k (exp(g_k) S[k, c+j]) k_k, b[j] = sum_k (exp(g_k) S[k, c+j]) q_k over this thread's
                 * rows, then over the row groups: ws 1 the RG_K lanes of the column quad (lane bits TPR_K..16), ws 0
                 * through shared memory */
                float a[4] = { 0.f, 0.f, 0.f, 0.f }, b[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
                for (int r = 0; r < KF_DEC_RK; ++r) {
                    const int kk = rgk + KF_DEC_RG_K * r;
                    float e, kv, qv;
                    KF_DEC_TOKROW(kk, e, kv, qv);
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float s0 = s[r][j], x = s0 * e;  /* KF_MUTANT_NO_DECAY */
                        s[r][j] = x;
                        a[j] += (KF_KDA_DECAY_FIRST ? x : s0) * kv;
                        b[j] += x * qv;
                    }
                }
#if KF_DEC_WS
#pragma unroll
                for (int off = KF_DEC_TPR_K; off < 32; off <<= 1) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        a[j] += __shfl_xor_sync(0xffffffffu, a[j], off);
                        b[j] += __shfl_xor_sync(0xffffffffu, b[j], off);
                    }
                }
                /* u = beta (v - S^T k); o = S^T q + u (k . q) (the k_t u^T update seen by q_t); S += k u^T */
                float u[4];
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    u[j] = beta * (vsmr[j] - a[j]);  /* KF_MUTANT_BETA_TWICE */
                if (rgk == 0) {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        o[kc + j] = kf_kda_bf16(b[j] + u[j] * qk);
                }
#pragma unroll
                for (int r = 0; r < KF_DEC_RK; ++r) {
                    const float kv = KF_DEC_TOKK(rgk + KF_DEC_RG_K * r);
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        s[r][j] += kv * u[j];
                }
#else
                *(float4 *)&red[0][rgk][kc] = make_float4(a[0], a[1], a[2], a[3]);
                *(float4 *)&red[1][rgk][kc] = make_float4(b[0], b[1], b[2], b[3]);
                __syncthreads();
                for (int c = tid; c < KF_DEC_VC; c += KF_DEC_THREADS) {
                    float A = 0.f, B = 0.f;
                    for (int g = 0; g < KF_DEC_RG_K; ++g) {
                        A += red[0][g][c];
                        B += red[1][g][c];
                    }
                    const float u = beta * (vsmj[c] - A);  /* KF_MUTANT_BETA_TWICE */
                    us[c] = u;
                    o[c] = kf_kda_bf16(B + u * qk);
                }
                __syncthreads();
#pragma unroll
                for (int r = 0; r < KF_DEC_RK; ++r) {
                    const float kv = ks[rgk + KF_DEC_RG_K * r];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        s[r][j] += kv * us[kc + j];
                }
#endif
            } else {
                float e[4], kv[4], qv[4];
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    KF_DEC_TOKROW(kq * 4 + j, e[j], kv[j], qv[j]);
#pragma unroll
                for (int r = 0; r < KF_DEC_RV; ++r) {
                    const int vv = rgv + KF_DEC_RG_V * r;
                    float a = 0.f, b = 0.f;
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float s0 = s[r][j], x = s0 * e[j];  /* KF_MUTANT_NO_DECAY */
                        s[r][j] = x;
                        a += (KF_KDA_DECAY_FIRST ? x : s0) * kv[j];
                        b += x * qv[j];
                    }
#pragma unroll
                    for (int off = KF_DEC_TPR_V / 2; off > 0; off >>= 1) {
                        a += __shfl_xor_sync(0xffffffffu, a, off);
                        b += __shfl_xor_sync(0xffffffffu, b, off);
                    }
                    const float u = beta * (vsmj[vv] - a);  /* KF_MUTANT_BETA_TWICE */
                    if (kq == 0)
                        o[vv] = kf_kda_bf16(b + u * qk);
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        s[r][j] += kv[j] * u;
                }
            }
            __syncthreads();                   /* qs/ks/eg/vsm are rewritten by the next token */
#undef KF_DEC_TOKROW
#undef KF_DEC_TOKK
        }
    }

    if (!p.ht)
        return;
    if (!vfirst) {
        float *hr = p.ht + kf_kda_ht_off(p, n, hv, rgk, c0 + kc);
        const long long hs = p.ht + kf_kda_ht_off(p, n, hv, rgk + KF_DEC_RG_K, c0 + kc) - hr;
#pragma unroll
        for (int r = 0; r < KF_DEC_RK; ++r) {
            const int kk = rgk + KF_DEC_RG_K * r, c = c0 + kc;
            if (!p.ht_vfirst) {
                kf_dec_st4(hr + r * hs, s[r][0], s[r][1], s[r][2], s[r][3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    p.ht[kf_kda_ht_off(p, n, hv, kk, c + j)] = s[r][j];
            }
        }
    } else {
        float *hr = p.ht + kf_kda_ht_off(p, n, hv, kq * 4, c0 + rgv);
        const long long hs = p.ht + kf_kda_ht_off(p, n, hv, kq * 4, c0 + rgv + KF_DEC_RG_V) - hr;
#pragma unroll
        for (int r = 0; r < KF_DEC_RV; ++r) {
            const int vv = c0 + rgv + KF_DEC_RG_V * r;
            if (p.ht_vfirst) {
                kf_dec_st4(hr + r * hs, s[r][0], s[r][1], s[r][2], s[r][3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    p.ht[kf_kda_ht_off(p, n, hv, kq * 4 + j, vv)] = s[r][j];
            }
        }
    }
}

#if KF_DEC_IPC == 1
/* Grid (vsplit, hv_heads, nseq): one item per block; the state rows are loaded straight into registers. */
extern "C" __global__ void __launch_bounds__(KF_DEC_THREADS, KF_DEC_MINB)
kf_kda_decode(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    const int hv = blockIdx.y, n = blockIdx.z, c0 = blockIdx.x * KF_DEC_VC;
    const bool vfirst = p.h0 ? p.h0_vfirst != 0 : p.ht_vfirst != 0;
    const int nr = vfirst ? KF_DEC_RV : KF_DEC_RK;
    float s[KF_DEC_R][4];
    long long hs = 0;
    const float *hr = p.h0 ? kf_dec_h0_rows(p, vfirst, n, hv, c0, hs) : 0;
#pragma unroll
    for (int r = 0; r < KF_DEC_R; ++r) {
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (p.h0 && r < nr)
            x = kf_dec_ld4(hr + r * hs);
        s[r][0] = x.x; s[r][1] = x.y; s[r][2] = x.z; s[r][3] = x.w;
    }
    kf_dec_run(p, vfirst, c0, hv, n, s);
}
#else
/* Grid (ceil(items / IPC)): block b takes items b, b + grid, ... (item = (x, hv, n), x fastest).
 * The next item's state rows are copied (cp.async) into this thread's own shared slots while the
 * current item computes, so every block keeps a state slice in flight. */
__device__ __forceinline__ void kf_dec_prefetch(const kf_kda_params &p, bool vfirst, long long it, float4 *pre)
{
    const int x = (int)(it % KF_DEC_VSPLIT), hv = (int)((it / KF_DEC_VSPLIT) % p.hv_heads);
    const int n = (int)(it / ((long long)KF_DEC_VSPLIT * p.hv_heads));
    const int nr = vfirst ? KF_DEC_RV : KF_DEC_RK;
    long long hs;
    const float *hr = kf_dec_h0_rows(p, vfirst, n, hv, x * KF_DEC_VC, hs);
#pragma unroll
    for (int r = 0; r < KF_DEC_R; ++r)
        if (r < nr) {
            kf_cp_async16(kf_smem_u32(pre + r * KF_DEC_THREADS + threadIdx.x), hr + r * hs, true);
        }
    kf_cp_async_commit();
}

extern "C" __global__ void __launch_bounds__(KF_DEC_THREADS, KF_DEC_MINB)
kf_kda_decode(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __align__(16) float4 dec_pre[];     /* [R][THREADS]: the next item's rows */
    const long long items = (long long)KF_DEC_VSPLIT * p.hv_heads * p.nseq;
    const bool vfirst = p.h0 ? p.h0_vfirst != 0 : p.ht_vfirst != 0;
    const int nr = vfirst ? KF_DEC_RV : KF_DEC_RK;
    long long it = blockIdx.x;
    if (p.h0 && it < items)
        kf_dec_prefetch(p, vfirst, it, dec_pre);
    for (; it < items; it += gridDim.x) {
        const int x = (int)(it % KF_DEC_VSPLIT), hv = (int)((it / KF_DEC_VSPLIT) % p.hv_heads);
        const int n = (int)(it / ((long long)KF_DEC_VSPLIT * p.hv_heads));
        float s[KF_DEC_R][4];
        if (p.h0)
            kf_cp_async_wait<0>();
#pragma unroll
        for (int r = 0; r < KF_DEC_R; ++r) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (p.h0 && r < nr)
                v = dec_pre[r * KF_DEC_THREADS + threadIdx.x];
            s[r][0] = v.x; s[r][1] = v.y; s[r][2] = v.z; s[r][3] = v.w;
        }
        __syncthreads();                   /* the slots are read before the next copy overwrites them */
        if (p.h0 && it + gridDim.x < items)
            kf_dec_prefetch(p, vfirst, it + gridDim.x, dec_pre);
        kf_dec_run(p, vfirst, x * KF_DEC_VC, hv, n, s);
    }
}
#endif

#endif
