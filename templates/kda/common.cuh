/* kda/common.cuh: KDA device helpers shared by the naive, decode and prefill kernels: sequence ranges, gates, token loads */
#ifndef KF_KDA_COMMON_CUH
#define KF_KDA_COMMON_CUH

/* Needs common/kda_params.h, common/types.cuh (KF_BF16 1), KF_KDA_K and KF_KDA_V (head dims). */

__device__ __forceinline__ void kf_kda_seq(const kf_kda_params &p, int n, long long &bos, long long &len)
{
    if (p.cu_seqlens) {
        if (p.cu64) {
            const long long *cu = (const long long *)p.cu_seqlens;
            bos = cu[n];
            len = cu[n + 1] - bos;
        } else {
            const int *cu = (const int *)p.cu_seqlens;
            bos = cu[n];
            len = (long long)cu[n + 1] - bos;
        }
    } else {
        bos = 0;
        len = p.t;
    }
}

/* 1: per token the decay exp(g_t) applies to the state before the delta-rule correction reads it
 * (S <- diag(exp g) S; u = beta (v - S^T k)); 0 is a planted bug for the mutation test. */
#define KF_KDA_DECAY_FIRST 1  /* KF_MUTANT_DECAY_ORDER */

/* ex2.approx (ftz) and rcp.approx (2 ulp; 0 for x -> -inf, 1 for x -> +inf): IEEE expf and division cost ~25
 * instructions a gate element, a quarter of the chunk preparation's */
__device__ __forceinline__ float kf_kda_sigmoid(float x) { return __fdividef(1.f, 1.f + kf_exp2(x * -1.4426950408889634f)); }

/* The log gate from its loaded inputs: the raw gate x, its bias and ea = exp(a_log) of the head, taken once a head
 * (sigmoid gate; p.gate 0: x). */
__device__ __forceinline__ float kf_kda_gate_of(const kf_kda_params &p, float x, float bias, float ea)
{
    return p.gate == 0 ? x : p.lower_bound * kf_kda_sigmoid(ea * (x + bias));
}

/* Log gate of element d of token row tok (absolute, after bos) of value head hv of sequence n. */
__device__ __forceinline__ float kf_kda_gate(const kf_kda_params &p, int n, long long tok, int hv, int d)
{
    const float x = p.g[(p.cu_seqlens ? 0 : (long long)n * p.g_sb) + tok * p.g_st + (long long)hv * p.g_sh + d];
    if (p.gate == 0)
        return x;
    const float bias = p.dt_bias ? p.dt_bias[(long long)hv * p.dt_sh + d] : 0.f;
    return kf_kda_gate_of(p, x, bias, expf(p.a_log[hv]));
}

/* beta from its loaded value (sigmoid when p.beta_sigmoid) */
__device__ __forceinline__ float kf_kda_beta_of(const kf_kda_params &p, float b) { return p.beta_sigmoid ? kf_kda_sigmoid(b) : b; }

/* a / b for 0 <= a < 2^22, b >= 1, without the integer division's ~25 instructions: the fp32 quotient (a exact,
 * 2 ulp) is within 1 of a / b, and one step either way makes it the floor */
__device__ __forceinline__ int kf_kda_udiv(int a, int b)
{
    int q = (int)__fdividef((float)a, (float)b);
    q -= q * b > a;
    q += (q + 1) * b <= a;
    return q;
}

/* The q/k head of value head hv: hv / (hv_heads / h_heads) */
__device__ __forceinline__ int kf_kda_qk_head(const kf_kda_params &p, int hv)
{
    return kf_kda_udiv(hv, kf_kda_udiv(p.hv_heads, p.h_heads));
}

/* beta of token row tok (absolute, after bos) of value head hv of sequence n, as stored; kf_kda_beta: as used */
__device__ __forceinline__ float kf_kda_beta_raw(const kf_kda_params &p, int n, long long tok, int hv)
{
    return p.beta[(p.cu_seqlens ? 0 : (long long)n * p.b_sb) + tok * p.b_st + (long long)hv * p.b_sh];
}

__device__ __forceinline__ float kf_kda_beta(const kf_kda_params &p, int n, long long tok, int hv)
{
    return kf_kda_beta_of(p, kf_kda_beta_raw(p, n, tok, hv));
}

__device__ __forceinline__ float kf_kda_warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* A lane's elements lane + 32 j of q and k of token tok, head h, as floats (kf_kda_qk_finish completes them). */
__device__ __forceinline__ void kf_kda_qk_load(const kf_kda_params &p, int n, long long tok, int h,
                                               float (&qv)[(KF_KDA_K + 31) / 32], float (&kv)[(KF_KDA_K + 31) / 32])
{
    const int lane = threadIdx.x & 31;
    const kf_u16 *q = (const kf_u16 *)p.q + (p.cu_seqlens ? 0 : (long long)n * p.q_sb) + tok * p.q_st + (long long)h * p.q_sh;
    const kf_u16 *k = (const kf_u16 *)p.k + (p.cu_seqlens ? 0 : (long long)n * p.k_sb) + tok * p.k_st + (long long)h * p.k_sh;
#pragma unroll
    for (int j = 0; j < (KF_KDA_K + 31) / 32; ++j) {
        const int d = lane + 32 * j;
        qv[j] = d < KF_KDA_K ? kf_to_float(q[d]) : 0.f;
        kv[j] = d < KF_KDA_K ? kf_to_float(k[d]) : 0.f;
    }
}

/* One warp, from the lanes' loaded q and k: q (normalised if asked, times scale) and k (normalised if asked) into
 * qs[d * stride] and ks[d * stride]; returns q . k to every lane. */
__device__ __forceinline__ float kf_kda_qk_finish(const kf_kda_params &p, const float (&qv)[(KF_KDA_K + 31) / 32],
                                                  const float (&kv)[(KF_KDA_K + 31) / 32], float *qs, float *ks, int stride)
{
    const int lane = threadIdx.x & 31;
    float sq = 0.f, sk = 0.f;
#pragma unroll
    for (int j = 0; j < (KF_KDA_K + 31) / 32; ++j) {
        sq += qv[j] * qv[j];
        sk += kv[j] * kv[j];
    }
    float nq = p.scale, nk = 1.f;
    if (p.l2norm) {
        nq *= rsqrtf(kf_kda_warp_sum(sq) + 1e-6f);
        nk = rsqrtf(kf_kda_warp_sum(sk) + 1e-6f);
    }
    float qk = 0.f;
#pragma unroll
    for (int j = 0; j < (KF_KDA_K + 31) / 32; ++j) {
        const int d = lane + 32 * j;
        if (d < KF_KDA_K) {
            qs[d * stride] = qv[j] * nq;
            ks[d * stride] = kv[j] * nk;
            qk += qv[j] * nq * kv[j] * nk;
        }
    }
    return kf_kda_warp_sum(qk);
}

/* One warp: q (normalised if asked, times scale) and k (normalised if asked) of token tok, head h,
 * as floats into qs[d * stride] and ks[d * stride]; returns q . k to every lane. */
__device__ __forceinline__ float kf_kda_load_qk_warp(const kf_kda_params &p, int n, long long tok, int h,
                                                     float *qs, float *ks, int stride)
{
    float qv[(KF_KDA_K + 31) / 32], kv[(KF_KDA_K + 31) / 32];
    kf_kda_qk_load(p, n, tok, h, qv, kv);
    return kf_kda_qk_finish(p, qv, kv, qs, ks, stride);
}

/* Element offset of state element (kk, vv) of (n, hv) in h0 (ht alike with the ht_ strides). */
__device__ __forceinline__ long long kf_kda_h0_off(const kf_kda_params &p, int n, int hv, int kk, int vv)
{
    return (long long)n * p.h0_sn + (long long)hv * p.h0_sh
           + (p.h0_vfirst ? (long long)vv * p.h0_sr + kk : (long long)kk * p.h0_sr + vv);  /* KF_MUTANT_KV_SWAP */
}

__device__ __forceinline__ long long kf_kda_ht_off(const kf_kda_params &p, int n, int hv, int kk, int vv)
{
    return (long long)n * p.ht_sn + (long long)hv * p.ht_sh
           + (p.ht_vfirst ? (long long)vv * p.ht_sr + kk : (long long)kk * p.ht_sr + vv);
}

/* A state's element (kk, vv) as base + kk rs + vv cs, with base, rs and cs taken once from kf_kda_h0_off /
 * kf_kda_ht_off (either state order): a thread's per-element loops then add two products to one base instead of
 * evaluating the layout's select and three 64-bit products per element (~1 000 instructions before the combine's
 * first step, bench/NOTES.md session 29) */
struct kf_kda_soff {
    long long base, rs, cs;
};
__device__ __forceinline__ kf_kda_soff kf_kda_h0_soff(const kf_kda_params &p, int n, int hv)
{
    const long long b = kf_kda_h0_off(p, n, hv, 0, 0);
    return {b, kf_kda_h0_off(p, n, hv, 1, 0) - b, kf_kda_h0_off(p, n, hv, 0, 1) - b};
}
__device__ __forceinline__ kf_kda_soff kf_kda_ht_soff(const kf_kda_params &p, int n, int hv)
{
    const long long b = kf_kda_ht_off(p, n, hv, 0, 0);
    return {b, kf_kda_ht_off(p, n, hv, 1, 0) - b, kf_kda_ht_off(p, n, hv, 0, 1) - b};
}

__device__ __forceinline__ kf_u16 kf_kda_bf16(float x) { return (kf_u16)(kf_pack2(x, 0.f) & 0xffffu); }

#endif
