/* attn/naive.cuh: plain GQA attention forward, one block per (query row, head, sequence), fp32 math: the tuner's fast reference */
#ifndef KF_ATTN_NAIVE_CUH
#define KF_ATTN_NAIVE_CUH

/*
 * Needs KF_BF16 (common/types.cuh), KF_NAIVE_D (head dim of q, k and v: dv = d),
 * KF_NAIVE_CAUSAL (0/1), KF_NAIVE_THREADS (a multiple of 32); common/fp8.cuh before it with KF_KV8.
 *
 * Grid: x = sq (max query rows per sequence when packed), y = hq, z = b.
 *   Block (i, h, b) computes query row i of sequence b, head h; a block with
 *   i >= n_q (a short packed sequence) exits. dynamic smem = 0.
 * Every index convention of common/attn_params.h: strides in elements, packed
 * cu_seqlens_q/k, kv_len, paged block_table, kv head = h / (hq / hkv), causal
 * bottom-right aligned (key j visible when j <= i + n_kv - n_q), lse natural log,
 * a row with no visible key gives o = 0 and lse = -inf. Keys at or past n_kv are
 * never read. splits and ws_* are ignored: o and lse are written directly.
 *
 * Math in fp32, two passes with the scores recomputed: (1) m = max_j s_j;
 * (2) keys in chunks of KF_NAIVE_THREADS: p_j = exp(s_j - m) into shared memory,
 * then every thread accumulates its columns c = tid + k*THREADS over the chunk;
 * l = sum_j p_j; o = acc / l; lse = m + log(l). s_j = scale * (q . k_j).
 *
 * Model features (each 0 unless the template defines it: common/attn_features.cuh; common/attn_params.h has the
 * definitions), the same values as the fast kernels (attn/fwd.cuh) by the plain definitions, in fp32:
 *   KF_WIN  sliding window: keys from max(0, i + n_kv - n_q - window_left) on (causal: up to i + n_kv - n_q);
 *   KF_CAP  softcap: s_j = softcap * tanhf(s_j / softcap), before the max;
 *   KF_SINK sink logit: m = max(m, sinks[h]) before pass 2, l += e^(sinks[h] - m) after it (the denominator
 *           only); a row with no visible key gives o = 0 and lse = sinks[h];
 *   KF_KV8  FP8 (e4m3) K/V: bytes decoded by common/fp8.cuh's rule (value / 256), the 256 and k_scale[kv head]
 *           folded into the score scale, 256 * v_scale[kv head] into o, as the fast kernels do.
 */
#define KF_NAIVE_NACC ((KF_NAIVE_D + KF_NAIVE_THREADS - 1) / KF_NAIVE_THREADS)
#define KF_NAIVE_WARPS (KF_NAIVE_THREADS / 32)

/* Element offset of key (or value) j, kv head kh, for the strides (sb, ss, sh). */
__device__ __forceinline__ long long kf_naive_kv_off(const kf_attn_params &p, int b, long long k0,
                                                     long long j, int kh,
                                                     long long sb, long long ss, long long sh)
{
    if (p.block_table) {
        const long long page = p.block_table[(long long)b * p.bt_sb + j / p.page_size];
        return page * sb + (j % p.page_size) * ss + (long long)kh * sh;
    }
    return (p.cu_seqlens_k ? 0 : (long long)b * sb) + (k0 + j) * ss + (long long)kh * sh;
}

/* scale * (q . k), q already in shared memory as floats. */
__device__ __forceinline__ float kf_naive_score(const float *qs, const kf_u16 *k, float scale)
{
    float acc = 0.f;
    for (int c = 0; c < KF_NAIVE_D; ++c)
        acc += qs[c] * kf_to_float(k[c]);
    return acc * scale;
}

#if KF_KV8
/* FP8: sc * (q . k), k e4m3 bytes decoded to value / 256 (sc holds the 256 and the head's scale). */
__device__ __forceinline__ float kf_naive_score8(const float *qs, const unsigned char *k, float sc)
{
    float acc = 0.f;
    for (int c = 0; c < KF_NAIVE_D; ++c)
        acc += qs[c] * kf_e4m3_f32(k[c]);
    return acc * sc;
}
#endif

/* The score of key j (offset ko): scale * (q . k_j), then (KF_CAP) capped. */
#if KF_KV8
#define KF_NAIVE_RAW(ko) kf_naive_score8(qs, (const unsigned char *)p.k + (ko), sc)
#else
#define KF_NAIVE_RAW(ko) kf_naive_score(qs, (const kf_u16 *)p.k + (ko), sc)
#endif
#if KF_CAP
#define KF_NAIVE_S(ko) (p.softcap * tanhf(KF_NAIVE_RAW(ko) / p.softcap))
#else
#define KF_NAIVE_S(ko) KF_NAIVE_RAW(ko)
#endif

/* Block-wide reduction (max or sum) of one float per thread; every thread gets the result. */
__device__ __forceinline__ float kf_naive_reduce(float x, bool is_max, float *red)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = is_max ? fmaxf(x, y) : x + y;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();                       /* red may still be read by a previous reduction */
    if (lane == 0)
        red[warp] = x;
    __syncthreads();
    x = red[0];
    for (int w = 1; w < KF_NAIVE_WARPS; ++w)
        x = is_max ? fmaxf(x, red[w]) : x + red[w];
    return x;
}

/* One float -> one 16-bit element, round to nearest even (low half of the packed pair). */
__device__ __forceinline__ kf_u16 kf_naive_to_u16(float x)
{
    return (kf_u16)(kf_pack2(x, 0.f) & 0xffffu);
}

extern "C" __global__ void __launch_bounds__(KF_NAIVE_THREADS)
kf_attn_naive(const kf_attn_params p)
{
    __shared__ float qs[KF_NAIVE_D];
    __shared__ float ps[KF_NAIVE_THREADS];
    __shared__ float red[KF_NAIVE_WARPS];

    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const long long r0 = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
    const long long n_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - r0 : p.sq;
    const long long k0 = p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0;
    const long long n_kv = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - k0 : (p.kv_len ? p.kv_len[b] : p.skv);
    if (i >= n_q)
        return;                            /* uniform over the block */
    const int kh = h / (p.hq / p.hkv);

    long long end = n_kv;                  /* one past the last visible key */
#if KF_NAIVE_CAUSAL
    if (i + n_kv - n_q + 1 < end)
        end = i + n_kv - n_q + 1;          /* may be <= 0: no visible key */
#endif
    long long lo = 0;                      /* the first visible key */
#if KF_WIN
    if (i + n_kv - n_q - p.window_left > lo)
        lo = i + n_kv - n_q - p.window_left;
#endif
#if KF_KV8
    const float sc = p.scale * (p.k_scale[kh] * 256.f), vq = p.v_scale[kh] * 256.f;   /* e4m3 = decoded * 256 */
#else
    const float sc = p.scale;
#endif

    const kf_u16 *q = (const kf_u16 *)p.q + (p.cu_seqlens_q ? 0 : (long long)b * p.q_sb)
                      + (r0 + i) * p.q_ss + (long long)h * p.q_sh;
    for (int c = tid; c < KF_NAIVE_D; c += KF_NAIVE_THREADS)
        qs[c] = kf_to_float(q[c]);
    __syncthreads();

    /* pass 1: the row maximum */
    float m = KF_NEG_INF;
    for (long long j = lo + tid; j < end; j += KF_NAIVE_THREADS)
        m = fmaxf(m, KF_NAIVE_S(kf_naive_kv_off(p, b, k0, j, kh, p.k_sb, p.k_ss, p.k_sh)));
    m = kf_naive_reduce(m, true, red);
#if KF_SINK
    m = fmaxf(m, p.sinks[h]);              /* the sink takes part in the max: finite even with no visible key */
#endif

    /* pass 2: weights of a chunk of keys, then every column over the chunk */
    float acc[KF_NAIVE_NACC];
#pragma unroll
    for (int a = 0; a < KF_NAIVE_NACC; ++a)
        acc[a] = 0.f;
    float l = 0.f;
    for (long long j0 = lo; j0 < end; j0 += KF_NAIVE_THREADS) {
        const long long j = j0 + tid;
        float pj = 0.f;
        if (j < end)
            pj = expf(KF_NAIVE_S(kf_naive_kv_off(p, b, k0, j, kh, p.k_sb, p.k_ss, p.k_sh)) - m);
        l += pj;
        ps[tid] = pj;
        __syncthreads();
        const int n = (int)(end - j0 < KF_NAIVE_THREADS ? end - j0 : KF_NAIVE_THREADS);
        for (int jj = 0; jj < n; ++jj) {
#if KF_KV8
            const unsigned char *v = (const unsigned char *)p.v
                                     + kf_naive_kv_off(p, b, k0, j0 + jj, kh, p.v_sb, p.v_ss, p.v_sh);
#define KF_NAIVE_V(c) kf_e4m3_f32(v[c])
#else
            const kf_u16 *v = (const kf_u16 *)p.v + kf_naive_kv_off(p, b, k0, j0 + jj, kh, p.v_sb, p.v_ss, p.v_sh);
#define KF_NAIVE_V(c) kf_to_float(v[c])
#endif
            const float w = ps[jj];
#pragma unroll
            for (int a = 0; a < KF_NAIVE_NACC; ++a) {
                const int c = tid + a * KF_NAIVE_THREADS;
                if (c < KF_NAIVE_D)
                    acc[a] += w * KF_NAIVE_V(c);
            }
#undef KF_NAIVE_V
        }
        __syncthreads();                   /* ps is rewritten by the next chunk */
    }
    l = kf_naive_reduce(l, false, red);
#if KF_SINK
    l += expf(p.sinks[h] - m);             /* the denominator only: o = acc / l, lse = m + log(l) */
#endif

    /* l == 0 only when no key is visible (the max key has weight 1; a sink makes l > 0) */
#if KF_KV8
    const float inv = (l > 0.f ? 1.f / l : 0.f) * vq;
#else
    const float inv = l > 0.f ? 1.f / l : 0.f;
#endif
    kf_u16 *o = (kf_u16 *)p.o + (p.cu_seqlens_q ? 0 : (long long)b * p.o_sb)
                + (r0 + i) * p.o_ss + (long long)h * p.o_sh;
#pragma unroll
    for (int a = 0; a < KF_NAIVE_NACC; ++a) {
        const int c = tid + a * KF_NAIVE_THREADS;
        if (c < KF_NAIVE_D)
            o[c] = kf_naive_to_u16(acc[a] * inv);
    }
    if (p.lse && tid == 0)
        p.lse[(p.cu_seqlens_q ? 0 : (long long)b * p.lse_sb) + (long long)h * p.lse_sh + r0 + i] =
            l > 0.f ? m + logf(l) : KF_NEG_INF;
}

#endif
