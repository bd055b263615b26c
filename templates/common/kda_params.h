/* common/kda_params.h: the argument block of every Kimi Delta Attention kernel; one definition for host C and CUDA */
#ifndef KF_KDA_PARAMS_H
#define KF_KDA_PARAMS_H

/*
 * Strides are in elements, not bytes; the last dimension of every tensor is contiguous.
 * dk = K (q/k head dim), dv = V (value head dim); the kernels take them as compile-time
 * facts and the launch check requires equality.
 *
 * Sequence n (0 <= n < nseq):
 *   packed (cu_seqlens != 0):  bos = cu[n], len = cu[n+1] - cu[n]   (cu int32, or int64 when cu64)
 *   padded (cu_seqlens == 0):  bos = 0,     len = t                  (every sequence t tokens)
 *   token i of sequence n, head h:  q + (cu ? 0 : n*q_sb) + (bos+i)*q_st + h*q_sh   (k alike, head h)
 *                                   v + (cu ? 0 : n*v_sb) + (bos+i)*v_st + hv*v_sh  (o alike, value head hv)
 *                                   g + (cu ? 0 : n*g_sb) + (bos+i)*g_st + hv*g_sh  [dk] fp32
 *                                   beta[(cu ? 0 : n*b_sb) + (bos+i)*b_st + hv*b_sh] fp32
 *   q/k head of value head hv: hv / (hv_heads / h_heads)   (hv % h == 0).
 *   Empty sequences (len 0) are allowed: no output rows; final state = initial state.
 *
 * State per (n, hv): S [dk, dv] fp32. Element (kk, vv) of the initial state:
 *   h0 + n*h0_sn + hv*h0_sh + (h0_vfirst ? vv*h0_sr + kk : kk*h0_sr + vv)
 * (h0 == 0: zero initial state); final state ht alike with ht_* (ht == 0: not written).
 *
 * Per token (g_t in log space, g <= 0):
 *   gate == 0:  g_t = g[...]                                   (given in log space)
 *   gate == 1:  g_t[d] = lower_bound * sigmoid(exp(a_log[hv]) * (g[...][d] + dt_bias[hv*dt_sh + d]))
 *               lower_bound in [-5, 0); dt_bias may be 0 (no bias)
 *   l2norm:     q <- q / sqrt(sum q^2 + 1e-6), k alike (before the scale)
 *   beta_sigmoid: beta_t = sigmoid(beta[...]), else beta_t = beta[...]
 *   S <- diag(exp g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale q_t)
 *
 * ws: workspace of the chunked prefill (see runtime/kda_launch.h for its size); 0 elsewhere.
 */
typedef struct kf_kda_params {
    const void *q;             /* bf16 */
    const void *k;             /* bf16 */
    const void *v;             /* bf16 */
    const float *g;            /* fp32, log gate (gate 0) or raw gate (gate 1) */
    const float *beta;         /* fp32, beta or raw beta (beta_sigmoid) */
    const float *a_log;        /* [hv_heads] fp32, gate 1 only */
    const float *dt_bias;      /* [hv_heads, dk] fp32 (row stride dt_sh) or 0, gate 1 only */
    const float *h0;           /* initial state or 0 */
    float *ht;                 /* final state or 0 */
    void *o;                   /* bf16 */
    const void *cu_seqlens;    /* [nseq + 1] int32 (int64 when cu64) or 0: padded */
    void *ws;                  /* prefill workspace or 0 */
    long long q_sb, q_st, q_sh;
    long long k_sb, k_st, k_sh;
    long long v_sb, v_st, v_sh;
    long long o_sb, o_st, o_sh;
    long long g_sb, g_st, g_sh;
    long long b_sb, b_st, b_sh;
    long long h0_sn, h0_sh, h0_sr;
    long long ht_sn, ht_sh, ht_sr;
    long long dt_sh;
    int nseq;                  /* sequences */
    int t;                     /* tokens per sequence when padded; unused when packed */
    int total;                 /* tokens in all: cu[nseq] packed, nseq*t padded */
    int h_heads;               /* q/k heads */
    int hv_heads;              /* value heads */
    int dk, dv;
    int cu64;                  /* cu_seqlens is int64 */
    int gate;                  /* 0: log-space g; 1: lower_bound * sigmoid(exp(a_log) (g + dt_bias)) */
    int l2norm;                /* in-kernel L2 norm of q and k */
    int beta_sigmoid;
    int h0_vfirst, ht_vfirst;  /* state stored [.., dv, dk] */
    float scale;               /* q scale, usually dk^-0.5 */
    float lower_bound;         /* gate 1 */
} kf_kda_params;

#endif
