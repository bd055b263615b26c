/* kda/recur.cuh: KDA prefill's token recurrence for short sequences (kda_prefill impl recurrent): one launch, a value slice of the state in registers, tokens in batches staged in shared memory */
#ifndef KF_KDA_RECUR_CUH
#define KF_KDA_RECUR_CUH

/*
 * Needs kda/common.cuh and KF_KDA_K, KF_KDA_V (head dims), KF_RC_VS (value columns a block), KF_RC_W (warps a block),
 * KF_RC_C (value columns a lane), KF_RC_TB (tokens a batch).
 * Grid (V / VS, hv_heads, nseq), KF_RC_SMEM bytes of dynamic shared memory: block (x, hv, n) owns value columns
 * [x VS, (x + 1) VS) of the state of (n, hv) for every token of sequence n, and writes their o and final state.
 *
 * Geometry: warp w owns CW = VS / W of the block's columns in G = CW / C groups of C; lane = g LC + rg: group g of
 * the warp's, row group rg of the LC = 32 / G lanes that share the group; the lane holds the R = K / LC state rows
 * rg + LC i of the group's C columns in registers (any state layout and stride, once a call: a row's C columns as one
 * 8- or 16-byte access where they are contiguous and aligned, else one float each).
 *
 * Per token, with e = exp(g), k and q as used (normalised if asked; q scaled):
 *   a_j = sum_d S[d, j] (e_d k_d)  = ((diag e) S)^T k: the decay folded into the weights, off the token's chain
 *   b_j = sum_d S[d, j] (e_d q_d)
 *   u_j = beta (v_j - a_j);   o_j = b_j + u_j (k . q);   S[d, j] <- e_d S[d, j] + k_d u_j
 * The reduction over d is the lane's R products (NA independent sums) and a butterfly over the LC lanes of the group
 * (log2 LC shuffle levels of 2 C values); no barrier between tokens. A token's chain is R / NA multiply-adds, the
 * butterfly, u and one multiply-add a row; a token reads R 16-byte rows of shared memory a lane, K VS / C 16-byte rows
 * a block, the term that C shrinks (kda/decode.cuh's slices, four columns a lane over all 32 lanes, took five levels
 * of eight values and the decay on the chain: ~0.39 us a token on an H200; bench/NOTES.md, session 19).
 *
 * Batch: TB tokens' inputs are loaded by the whole block, every load issued before any is used (warp w takes tokens
 * w, w + W, ..; lane l key elements l + 32 m of each: gate, q, k), the norms of all of a warp's tokens reduced
 * together (one butterfly of 3 QT values), then staged in shared memory as (e, e k, e q, k) a key element, v of the
 * block's columns, (beta, k . q) a token.
 */
#define KF_RC_T (32 * KF_RC_W)                 /* threads */
#define KF_RC_CW (KF_RC_VS / KF_RC_W)          /* value columns a warp */
#define KF_RC_G (KF_RC_CW / KF_RC_C)           /* column groups a warp */
#define KF_RC_LC (32 / KF_RC_G)                /* lanes a group */
#define KF_RC_R (KF_KDA_K / KF_RC_LC)          /* state rows a lane */
#define KF_RC_NA (KF_RC_R < 4 ? KF_RC_R : 4)   /* independent partial sums of a lane's reduction */
#define KF_RC_KL ((KF_KDA_K + 31) / 32)        /* key elements a lane a token */
#define KF_RC_QT (KF_RC_TB / KF_RC_W)          /* tokens a warp stages */
#define KF_RC_VE ((KF_RC_TB * KF_RC_VS + KF_RC_T - 1) / KF_RC_T)   /* v elements a thread a batch */
#if KF_RC_VS % KF_RC_W || KF_RC_CW % KF_RC_C || 32 % KF_RC_G || KF_KDA_K % KF_RC_LC || KF_RC_R < 1 || KF_RC_TB % KF_RC_W \
    || KF_RC_TB > KF_RC_T
#error "kforge kda recur: C | VS / W columns a warp, the column groups of a warp must divide 32 and the lanes of a group K; W | TB <= 32 W"
#endif
/* dynamic shared memory: tk [TB][K] float4 (e, e k, e q, k) | vb [TB][VS] | bq [TB] float2 (beta, k . q) */
#define KF_RC_SMEM (16 * KF_RC_TB * KF_KDA_K + 4 * KF_RC_TB * KF_RC_VS + 8 * KF_RC_TB)

/* A lane's C adjacent state columns of one row as one 8- or 16-byte access, where the layout allows it: columns
 * contiguous (a K-first state), the row stride and the first element aligned to C floats (the lane's first column,
 * c0 + col, is a multiple of C). Else one float each. */
__device__ __forceinline__ bool kf_rc_vec_ok(const float *r0, long long rs, long long cs)
{
    return KF_RC_C > 1 && cs == 1 && rs % KF_RC_C == 0 && ((unsigned long long)r0 & (4 * KF_RC_C - 1)) == 0;
}
__device__ __forceinline__ void kf_rc_vload(float (&d)[KF_RC_C], const float *a)
{
#if KF_RC_C == 4
    const float4 x = *(const float4 *)a;
    d[0] = x.x, d[1] = x.y, d[2] = x.z, d[3] = x.w;
#elif KF_RC_C == 2
    const float2 x = *(const float2 *)a;
    d[0] = x.x, d[1] = x.y;
#else
    d[0] = a[0];
#endif
}
__device__ __forceinline__ void kf_rc_vstore(float *a, const float (&v)[KF_RC_C])
{
#if KF_RC_C == 4
    *(float4 *)a = make_float4(v[0], v[1], v[2], v[3]);
#elif KF_RC_C == 2   /* as one 64-bit word: a float2 store was split into two 4-byte stores after the first row */
    *(unsigned long long *)a = (unsigned long long)__float_as_uint(v[1]) << 32 | __float_as_uint(v[0]);
#else
    a[0] = v[0];
#endif
}

extern "C" __global__ void __launch_bounds__(KF_RC_T, 1)
kf_kda_recur(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __align__(16) float4 rc_tk[];                     /* [TB][K] */
    float *const rc_v = (float *)(rc_tk + KF_RC_TB * KF_KDA_K);         /* [TB][VS] */
    float2 *const rc_bq = (float2 *)(rc_v + KF_RC_TB * KF_RC_VS);       /* [TB] */
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5;
    const int hv = blockIdx.y, n = blockIdx.z, c0 = blockIdx.x * KF_RC_VS;
    const int rg = lane % KF_RC_LC, col = wi * KF_RC_CW + (lane / KF_RC_LC) * KF_RC_C;   /* first column, in the slice */
    const int h = kf_kda_qk_head(p, hv);

    /* the state rows first: they do not wait for the sequence's range */
    float s[KF_RC_R][KF_RC_C];
    if (p.h0) {
        const kf_kda_soff so = kf_kda_h0_soff(p, n, hv);
        const float *r0 = p.h0 + so.base + rg * so.rs + (c0 + col) * so.cs;
        const long long rs = KF_RC_LC * so.rs, cs = so.cs;
        if (kf_rc_vec_ok(r0, rs, cs)) {
#pragma unroll
            for (int i = 0; i < KF_RC_R; ++i)
                kf_rc_vload(s[i], r0 + i * rs);
        } else {
#pragma unroll
            for (int i = 0; i < KF_RC_R; ++i)
#pragma unroll
                for (int c = 0; c < KF_RC_C; ++c)
                    s[i][c] = r0[i * rs + c * cs];
        }
    } else {
#pragma unroll
        for (int i = 0; i < KF_RC_R; ++i)
#pragma unroll
            for (int c = 0; c < KF_RC_C; ++c)
                s[i][c] = 0.f;
    }
    const float ea = p.gate ? expf(p.a_log[hv]) : 0.f;   /* exp(a_log) */
    float gb[KF_RC_KL];                                   /* dt_bias of the lane's key elements */
#pragma unroll
    for (int m = 0; m < KF_RC_KL; ++m) {
        const int d = lane + 32 * m;
        gb[m] = p.gate && p.dt_bias && d < KF_KDA_K ? p.dt_bias[(long long)hv * p.dt_sh + d] : 0.f;
    }
    long long bos, len;
    kf_kda_seq(p, n, bos, len);
    const long long gs = p.cu_seqlens ? 0 : (long long)n * p.g_sb, vsb = p.cu_seqlens ? 0 : (long long)n * p.v_sb;
    const kf_u16 *qb = (const kf_u16 *)p.q + (p.cu_seqlens ? 0 : (long long)n * p.q_sb) + (long long)h * p.q_sh;
    const kf_u16 *kb = (const kf_u16 *)p.k + (p.cu_seqlens ? 0 : (long long)n * p.k_sb) + (long long)h * p.k_sh;
    kf_u16 *ob = (kf_u16 *)p.o + (p.cu_seqlens ? 0 : (long long)n * p.o_sb) + (long long)hv * p.o_sh + c0 + col;

    for (long long i0 = 0; i0 < len; i0 += KF_RC_TB) {
        const int nb = (int)min((long long)KF_RC_TB, len - i0);
        const long long t0 = bos + i0;
        /* ---- every load of the batch (predicated, no branch between them), then the math into shared memory */
        float gx[KF_RC_QT][KF_RC_KL], qv[KF_RC_QT][KF_RC_KL], kv[KF_RC_QT][KF_RC_KL], vx[KF_RC_VE];
#pragma unroll
        for (int i = 0; i < KF_RC_QT; ++i) {
            const int j = wi + KF_RC_W * i;
            const long long tj = t0 + (j < nb ? j : 0);
            const float *gr = p.g + gs + tj * p.g_st + (long long)hv * p.g_sh;
            const kf_u16 *qr = qb + tj * p.q_st, *kr = kb + tj * p.k_st;
#pragma unroll
            for (int m = 0; m < KF_RC_KL; ++m) {
                const int d = lane + 32 * m;
                const bool ok = j < nb && d < KF_KDA_K;
                gx[i][m] = ok ? gr[d] : 0.f;
                qv[i][m] = ok ? kf_to_float(qr[d]) : 0.f;
                kv[i][m] = ok ? kf_to_float(kr[d]) : 0.f;
            }
        }
#pragma unroll
        for (int u = 0; u < KF_RC_VE; ++u) {              /* v: column c of token j */
            const int e = tid + u * KF_RC_T, j = e / KF_RC_VS, c = e % KF_RC_VS;
            vx[u] = e < KF_RC_TB * KF_RC_VS && j < nb
                        ? kf_to_float(((const kf_u16 *)p.v)[vsb + (t0 + j) * p.v_st + (long long)hv * p.v_sh + c0 + c])
                        : 0.f;
        }
        const float braw = tid < nb ? kf_kda_beta_raw(p, n, t0 + tid, hv) : 0.f;
        /* the warp's tokens' sums of q^2, k^2, q k, reduced together (3 QT independent values a level) */
        float red[KF_RC_QT][3];
#pragma unroll
        for (int i = 0; i < KF_RC_QT; ++i) {
            red[i][0] = red[i][1] = red[i][2] = 0.f;
#pragma unroll
            for (int m = 0; m < KF_RC_KL; ++m) {
                red[i][0] += qv[i][m] * qv[i][m];
                red[i][1] += kv[i][m] * kv[i][m];
                red[i][2] += qv[i][m] * kv[i][m];
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
            for (int i = 0; i < KF_RC_QT; ++i)
#pragma unroll
                for (int r = 0; r < 3; ++r)
                    red[i][r] += __shfl_xor_sync(0xffffffffu, red[i][r], off);
        if (i0 > 0)
            __syncthreads();                            /* the previous batch's serial pass has read the stage */
#pragma unroll
        for (int u = 0; u < KF_RC_VE; ++u) {
            const int e = tid + u * KF_RC_T;
            if (e < KF_RC_TB * KF_RC_VS)
                rc_v[e] = vx[u];
        }
#pragma unroll
        for (int i = 0; i < KF_RC_QT; ++i) {
            const int j = wi + KF_RC_W * i;
            const float nq = p.l2norm ? p.scale * rsqrtf(red[i][0] + 1e-6f) : p.scale;
            const float nk = p.l2norm ? rsqrtf(red[i][1] + 1e-6f) : 1.f;
            if (j < nb) {
#pragma unroll
                for (int m = 0; m < KF_RC_KL; ++m) {
                    const int d = lane + 32 * m;
                    const float e = kf_exp2(kf_kda_gate_of(p, gx[i][m], gb[m], ea) * 1.4426950408889634f);
                    const float q = qv[i][m] * nq, k = kv[i][m] * nk;
                    if (d < KF_KDA_K)
                        rc_tk[j * KF_KDA_K + d] = make_float4(e, KF_KDA_DECAY_FIRST ? e * k : k, e * q, k);
                }
                if (lane == 0)
                    rc_bq[j].y = red[i][2] * nq * nk;
            }
        }
        if (tid < nb)
            rc_bq[tid].x = kf_kda_beta_of(p, braw);
        __syncthreads();

        /* ---- the serial pass: shared memory and shuffles only */
        kf_u16 *o = ob + t0 * p.o_st;
#pragma unroll 2
        for (int jt = 0; jt < nb; ++jt) {
            const float2 bq = rc_bq[jt];
            float a[KF_RC_C][KF_RC_NA], b[KF_RC_C][KF_RC_NA], kk[KF_RC_R];
#pragma unroll
            for (int c = 0; c < KF_RC_C; ++c)
#pragma unroll
                for (int i = 0; i < KF_RC_NA; ++i)
                    a[c][i] = b[c][i] = 0.f;
#pragma unroll
            for (int i = 0; i < KF_RC_R; ++i) {
                const float4 x = rc_tk[jt * KF_KDA_K + rg + KF_RC_LC * i];
                const float e = x.x;
#pragma unroll
                for (int c = 0; c < KF_RC_C; ++c) {
                    const float s0 = s[i][c];
                    a[c][i % KF_RC_NA] += s0 * x.y;
                    b[c][i % KF_RC_NA] += s0 * x.z;
                    s[i][c] = s0 * e;  /* KF_MUTANT_NO_DECAY */
                }
                kk[i] = x.w;
            }
#pragma unroll
            for (int c = 0; c < KF_RC_C; ++c)
#pragma unroll
                for (int i = 1; i < KF_RC_NA; ++i) {
                    a[c][0] += a[c][i];
                    b[c][0] += b[c][i];
                }
#pragma unroll
            for (int off = 1; off < KF_RC_LC; off <<= 1)
#pragma unroll
                for (int c = 0; c < KF_RC_C; ++c) {
                    a[c][0] += __shfl_xor_sync(0xffffffffu, a[c][0], off);
                    b[c][0] += __shfl_xor_sync(0xffffffffu, b[c][0], off);
                }
            const float beta = bq.x;
            float u[KF_RC_C], ov[KF_RC_C];
#pragma unroll
            for (int c = 0; c < KF_RC_C; ++c) {
                const float vsmj = rc_v[jt * KF_RC_VS + col + c];
                u[c] = beta * (vsmj - a[c][0]);  /* KF_MUTANT_BETA_TWICE */
                ov[c] = b[c][0] + u[c] * bq.y;
            }
            if (rg == 0) {
                kf_u16 *oj = o + jt * p.o_st;
#pragma unroll
                for (int c = 0; c < KF_RC_C; ++c)
                    oj[c] = kf_kda_bf16(ov[c]);
            }
#pragma unroll
            for (int i = 0; i < KF_RC_R; ++i)
#pragma unroll
                for (int c = 0; c < KF_RC_C; ++c)
                    s[i][c] = fmaf(kk[i], u[c], s[i][c]);
        }
    }

    if (!p.ht)
        return;
    const kf_kda_soff so = kf_kda_ht_soff(p, n, hv);
    float *r0 = p.ht + so.base + rg * so.rs + (c0 + col) * so.cs;
    const long long rs = KF_RC_LC * so.rs, cs = so.cs;
    if (kf_rc_vec_ok(r0, rs, cs)) {   /* the final state's stores drained at the exit: 14% of the samples (session 29) */
#pragma unroll
        for (int i = 0; i < KF_RC_R; ++i)
            kf_rc_vstore(r0 + i * rs, s[i]);
        return;
    }
#pragma unroll
    for (int i = 0; i < KF_RC_R; ++i)
#pragma unroll
        for (int c = 0; c < KF_RC_C; ++c)
            r0[i * rs + c * cs] = s[i][c];
}

#endif
