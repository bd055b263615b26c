/* attn/combine.cuh: merges split-KV partials (ws_o, ws_lse) into o and lse (attn_combine, 2nd kernel of attn_decode) */
#ifndef KF_ATTN_COMBINE_CUH
#define KF_ATTN_COMBINE_CUH

/* Needs KF_BF16, KF_CMB_DV (value head dim), KF_CMB_VEC (columns per thread: 2, 4 or 8),
 * KF_CMB_ROWS (rows per block). Grid: x = cdiv(ws_rows * hq, KF_CMB_ROWS).
 * One row = one (query row, head) pair, rid = token * hq + h (see attn_params.h);
 * KF_CMB_DV / KF_CMB_VEC threads share a row, each owning KF_CMB_VEC contiguous columns.
 *   m = max_s lse_s (0 if all -inf), sum = sum_s exp(lse_s - m), LSE = m + log(sum),
 *   O = sum_s exp(lse_s - LSE) * O_s; a row whose partials are all -inf gives O = 0, LSE = -inf.
 * KF_SINK (sink logits, p.sinks[h]): the sink is one more term of the denominator, added here once (the
 *   partials carry none): m = max(max_s lse_s, sink), sum += exp(sink - m), and O as above with that LSE;
 *   every partial -inf gives O = 0, LSE = sink. */
#ifndef KF_SINK
#define KF_SINK 0
#endif
#define KF_CMB_TPR (KF_CMB_DV / KF_CMB_VEC)
#define KF_CMB_UNROLL 8                                 /* partials loaded together */
#define KF_CMB_THREADS (KF_CMB_TPR * KF_CMB_ROWS)

extern "C" __global__ void __launch_bounds__(KF_CMB_THREADS)
kf_attn_combine(const kf_attn_params p)
{
    KF_PDL_WAIT();   /* before any global access; the next kernel placed as these blocks exit: common/types.cuh */
    const long long nrows = (long long)p.ws_rows * p.hq;   /* rows of one split */
    const long long rid = (long long)blockIdx.x * KF_CMB_ROWS + threadIdx.x / KF_CMB_TPR;
    if (rid >= nrows)
        return;
    const int c0 = (threadIdx.x % KF_CMB_TPR) * KF_CMB_VEC;
    const int ns = p.splits;

    float m = KF_NEG_INF;
#pragma unroll 8
    for (int s = 0; s < ns; ++s)
        m = fmaxf(m, p.ws_lse[s * nrows + rid]);
#if KF_SINK
    const float sink = p.sinks[rid % p.hq];
    m = fmaxf(m, sink);
#endif
    const float mu = (m == KF_NEG_INF) ? 0.f : m;
    float sum = 0.f;
#pragma unroll 8
    for (int s = 0; s < ns; ++s)
        sum += expf(p.ws_lse[s * nrows + rid] - mu);    /* exp(-inf) = 0 */
#if KF_SINK
    const float sum0 = sum;                             /* the partials' share of the denominator */
    sum += expf(sink - mu);
    const float lse = mu + logf(sum);
    const float lse0 = (sum0 > 0.f) ? mu + logf(sum0) : KF_NEG_INF;
    const float sw = expf(lse0 - lse); // KF_MUTANT_SINK
#else
    const float lse = (sum > 0.f) ? mu + logf(sum) : KF_NEG_INF;
#endif

    /* KF_CMB_UNROLL partials at a time, every load issued before any is used: one split after another, each load
     * waited for before the next, the merge of 64 partials took 36 us at B1 Hq128 MLA (ncu, session 12; latency-bound
     * at 9% of DRAM). The sum keeps the split order. */
    float acc[KF_CMB_VEC];
#pragma unroll
    for (int c = 0; c < KF_CMB_VEC; ++c)
        acc[c] = 0.f;
    if (sum > 0.f) {
        for (int s0 = 0; s0 < ns; s0 += KF_CMB_UNROLL) {
            float w[KF_CMB_UNROLL];
            float2 v[KF_CMB_UNROLL][KF_CMB_VEC / 2];
#pragma unroll
            for (int u = 0; u < KF_CMB_UNROLL; ++u) {
                const int s = s0 + u;
                const float ls = s < ns ? p.ws_lse[s * nrows + rid] : KF_NEG_INF;
                const bool on = ls > KF_NEG_INF;   /* an empty split (or past the last): its O is never read */
#if KF_SINK
                w[u] = on ? expf(ls - lse0) * sw : 0.f;   /* = exp(ls - lse) */
#else
                w[u] = on ? expf(ls - lse) : 0.f;
#endif
                const float *src = p.ws_o + ((long long)(on ? s : 0) * nrows + rid) * KF_CMB_DV + c0;
#pragma unroll
                for (int c = 0; c < KF_CMB_VEC / 2; ++c)
                    v[u][c] = on ? *(const float2 *)(src + 2 * c) : make_float2(0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < KF_CMB_UNROLL; ++u)
#pragma unroll
                for (int c = 0; c < KF_CMB_VEC / 2; ++c) {
                    acc[2 * c] += w[u] * v[u][c].x;
                    acc[2 * c + 1] += w[u] * v[u][c].y;
                }
        }
    }

    /* Output address: dense rows t = b*sq + i, packed rows t = global token index. */
    const int t = (int)(rid / p.hq), h = (int)(rid % p.hq);
    long long orow, lidx;
    if (p.cu_seqlens_q) {
        orow = (long long)t * p.o_ss + (long long)h * p.o_sh;
        lidx = (long long)h * p.lse_sh + t;
    } else {
        const int b = t / p.sq, i = t % p.sq;
        orow = (long long)b * p.o_sb + (long long)i * p.o_ss + (long long)h * p.o_sh;
        lidx = (long long)b * p.lse_sb + (long long)h * p.lse_sh + i;
    }
    kf_u32 pk[KF_CMB_VEC / 2];
#pragma unroll
    for (int c = 0; c < KF_CMB_VEC / 2; ++c)
        pk[c] = kf_pack2(acc[2 * c], acc[2 * c + 1]);
    kf_u16 *dst = (kf_u16 *)p.o + orow + c0;
#if KF_CMB_VEC == 8
    *(uint4 *)dst = make_uint4(pk[0], pk[1], pk[2], pk[3]);
#elif KF_CMB_VEC == 4
    *(uint2 *)dst = make_uint2(pk[0], pk[1]);
#else
    *(kf_u32 *)dst = pk[0];
#endif
    if (p.lse && c0 == 0)
        p.lse[lidx] = lse;
}

#endif
