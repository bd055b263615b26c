/* kda/naive.cuh: plain KDA token recurrence, one block per (value head, sequence), fp32: the tuner's fast reference */
#ifndef KF_KDA_NAIVE_CUH
#define KF_KDA_NAIVE_CUH

/*
 * Needs kda/common.cuh. Grid (hv_heads, nseq, 1), block KF_KDA_V threads (thread c owns state
 * column c), dynamic shared memory KF_KDA_K * KF_KDA_V * 4 bytes: the state, S[d * V + c]. Per token, warp 0 loads
 * q and k, warp 1 the gates, then every column: s *= exp(g); u = beta (v - s . k); s += k u;
 * o = s . q. The final state is written when p.ht != 0.
 */
extern "C" __global__ void __launch_bounds__(KF_KDA_V)
kf_kda_naive(const kf_kda_params p)
{
    __shared__ float qs[KF_KDA_K], ks[KF_KDA_K], eg[KF_KDA_K];
    __shared__ float beta_s;
    const int hv = blockIdx.x, n = blockIdx.y, c = threadIdx.x;
    const int h = hv / (p.hv_heads / p.h_heads);
    long long bos, len;
    kf_kda_seq(p, n, bos, len);

    extern __shared__ float s_dyn[];
    float *s = s_dyn + c;                  /* s[d * KF_KDA_V]: column c, conflict-free across threads */
    for (int d = 0; d < KF_KDA_K; ++d)
        s[d * KF_KDA_V] = p.h0 ? p.h0[kf_kda_h0_off(p, n, hv, d, c)] : 0.f;

    for (long long i = 0; i < len; ++i) {
        const long long tok = bos + i;
        if (threadIdx.x < 32)
            kf_kda_load_qk_warp(p, n, tok, h, qs, ks, 1);
        else if (threadIdx.x < 64) {
            for (int d = threadIdx.x - 32; d < KF_KDA_K; d += 32)
                eg[d] = expf(kf_kda_gate(p, n, tok, hv, d));
            if (threadIdx.x == 32)
                beta_s = kf_kda_beta(p, n, tok, hv);
        }
        __syncthreads();
        const float vc = kf_to_float(((const kf_u16 *)p.v)[(p.cu_seqlens ? 0 : (long long)n * p.v_sb) + tok * p.v_st
                                                          + (long long)hv * p.v_sh + c]);
        float kv = 0.f;
#pragma unroll 8
        for (int d = 0; d < KF_KDA_K; ++d) {
            const float x = s[d * KF_KDA_V] * eg[d];
            s[d * KF_KDA_V] = x;
            kv += x * ks[d];
        }
        const float u = beta_s * (vc - kv);
        float o = 0.f;
#pragma unroll 8
        for (int d = 0; d < KF_KDA_K; ++d) {
            const float x = s[d * KF_KDA_V] + ks[d] * u;
            s[d * KF_KDA_V] = x;
            o += x * qs[d];
        }
        ((kf_u16 *)p.o)[(p.cu_seqlens ? 0 : (long long)n * p.o_sb) + tok * p.o_st + (long long)hv * p.o_sh + c] = kf_kda_bf16(o);
        __syncthreads();                   /* qs/ks/eg are rewritten by the next token */
    }
    if (p.ht) {
        for (int d = 0; d < KF_KDA_K; ++d)
            p.ht[kf_kda_ht_off(p, n, hv, d, c)] = s[d * KF_KDA_V];
    }
}

#endif
