/* kda/prep_tc.cuh: the KDA chunk preparation on tensor cores (kda_prefill prep 1): L, A, T's off-diagonal blocks, W and U by mma.sync */
#ifndef KF_KDA_PREP_TC_CUH
#define KF_KDA_PREP_TC_CUH

/*
 * Needs kda/prefill.cuh (KF_PF_*, kf_pf_sink, kf_pf_mma, kf_pf_prepare), rendered before this file. Computes what
 * kf_pf_prepare computes, into the same sink, over 16-row blocks (NB = C / 16), every product an mma.sync
 * m16n8k16 with bf16 operands and fp32 accumulators (on CUDA cores with KF_PF_MMA 0, as the state pass):
 *   1. q, k rows as loaded (bf16) and their scales nq, nk (norm, scale), beta, v; G = cumsum g per column (fp32).
 *   2. In one pass over the elements, row i of block row a (rows i0 = 16a ..), R[d] the midpoint of G[.][d] over
 *      the block row: q_i exp(G_i - R), k_i exp(G_i - R), k_i exp(R - G_i) (step 3's diagonal-block operands),
 *      and from them Qg = q exp(G), Kg = k exp(G) (the operand of W) and KdT = k exp(G_last - G) by the
 *      column factors exp(R), exp(G_last - R); Qg, KdT, gl to the sink.
 *   3. Per block row a: L and A over the columns j < i0 + 16 as one product over K of q_i exp(G_i - R),
 *      k_i exp(G_i - R) by k_j exp(R - G_j): in the diagonal block both factors lie within exp(+-span / 2), left
 *      of it the column factor is <= 1 (G never grows), so no factor overflows and an underflowing one stands
 *      for a term < exp(-47).
 *   4. T = (I + L)^-1 diag(beta) by 16 x 16 blocks: D_a = (I + L_aa)^-1 by forward substitution in fp32 (one
 *      column a thread), T_aa = D_a diag(beta); off the diagonal T_ab = -sum_{b <= c < a} P_ac T_cb with
 *      P_ac = D_a L_ac, one block row after the other.
 *   5. W = T Kg, U = T V.
 * The factorisation needs every gate <= 0 and a gate span G_i0 - G_i0+15 of at most KF_PF_TC_SPAN in every
 * column (the lower-bound gate form, lb >= -5, spans at most 75). A chunk outside that (log gates given
 * directly, beyond a mean of -5.3 a token) is prepared by kf_pf_prepare in fp32, as with prep 0.
 * The bf16 operands are those of fla's chunk_kda (bf16 products, fp32 accumulation); the solve stays fp32.
 */
#define KF_PF_TC_NB (KF_PF_C / 16)
#define KF_PF_TC_SPAN 80.f
#define KF_PF_TC_LDD 24                                                /* D_a row stride (16 columns + 8) */

/* shared memory, bytes from sc (kda_prefill.lua's tc_bytes mirrors it); un: value columns of U. Row strides padded
 * (LDG, LDK) so that step 2's threads, on consecutive rows, read and write without bank conflicts. */
#define KF_PF_TC_LDG (KF_PF_K + 4)                                      /* G row stride, floats */
#define KF_PF_TC_G 0                                                   /* fp32 [C][LDG] cumulative gates */
#define KF_PF_TC_QR (KF_PF_TC_G + 4 * KF_PF_C * KF_PF_TC_LDG)           /* bf16 [C][LDK] q as loaded */
#define KF_PF_TC_KR (KF_PF_TC_QR + 2 * KF_PF_C * KF_PF_LDK)             /* bf16 [C][LDK] k as loaded */
#define KF_PF_TC_NQ (KF_PF_TC_KR + 2 * KF_PF_C * KF_PF_LDK)             /* fp32 [C] q scales */
#define KF_PF_TC_NK (KF_PF_TC_NQ + 4 * KF_PF_C)                         /* fp32 [C] k scales */
#define KF_PF_TC_BETA (KF_PF_TC_NK + 4 * KF_PF_C)                       /* fp32 [C] */
#define KF_PF_TC_REF (KF_PF_TC_BETA + 4 * KF_PF_C)                      /* fp32 [NB][K] R of each block row */
#define KF_PF_TC_ER (KF_PF_TC_REF + 4 * KF_PF_TC_NB * KF_PF_K)          /* fp32 [NB][K] exp(R) */
#define KF_PF_TC_EL (KF_PF_TC_ER + 4 * KF_PF_TC_NB * KF_PF_K)           /* fp32 [NB][K] exp(G_last - R) */
#define KF_PF_TC_KG (KF_PF_TC_EL + 4 * KF_PF_TC_NB * KF_PF_K)           /* bf16 [C][LDK] k exp(G) */
#define KF_PF_TC_QB (KF_PF_TC_KG + 2 * KF_PF_C * KF_PF_LDK)             /* bf16 [C][LDK] q exp(G - R) */
#define KF_PF_TC_KB (KF_PF_TC_QB + 2 * KF_PF_C * KF_PF_LDK)             /* bf16 [C][LDK] k exp(G - R) */
#define KF_PF_TC_KC (KF_PF_TC_KB + 2 * KF_PF_C * KF_PF_LDK)             /* bf16 [C][LDK] k exp(R - G) */
#define KF_PF_TC_LF (KF_PF_TC_KC + 2 * KF_PF_C * KF_PF_LDK)             /* fp32 [C][CP] L */
#define KF_PF_TC_LB (KF_PF_TC_LF + 4 * KF_PF_C * KF_PF_CP)              /* bf16 [C][LDC] L */
#define KF_PF_TC_P (KF_PF_TC_LB + 2 * KF_PF_C * KF_PF_LDC)              /* bf16 [C][LDC] P_ac */
#define KF_PF_TC_DB (KF_PF_TC_P + 2 * KF_PF_C * KF_PF_LDC)              /* bf16 [C][LDD] D_a */
#define KF_PF_TC_T (KF_PF_TC_DB + 2 * KF_PF_C * KF_PF_TC_LDD)           /* bf16 [C][LDC] T */
#define KF_PF_TC_AS (KF_PF_TC_T + 2 * KF_PF_C * KF_PF_LDC)              /* bf16 [C][C] A, staged */
#define KF_PF_TC_V (KF_PF_TC_AS + 2 * KF_PF_C * KF_PF_C)                /* bf16 [C][un + 8] v */
#define KF_PF_TC_BYTES(un) (KF_PF_TC_V + 2 * KF_PF_C * ((un) + 8))
#define KF_PF_TC_WS KF_PF_TC_G                                         /* bf16 [C][K] W, staged over G, q, k */
#define KF_PF_TC_US (KF_PF_TC_WS + 2 * KF_PF_C * KF_PF_K)               /* bf16 [C][un] U, staged */

/* Two 8x8 b16 matrices transposed; lanes 0-15 give the row addresses (matrix l/8, row l%8). */
__device__ __forceinline__ void kf_pf_ldsm_x2_t(kf_u32 r[2], kf_u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

/* d += A[m0.., k0..] (16x16, row-major, lda) * B[kb0.., n0..] (16x8, stored [k][n] row-major, ldb): one warp,
 * the fragment layout of kf_pf_mma. */
__device__ __forceinline__ void kf_pf_tc_mma_bt(float d[4], const kf_u16 *A, int lda, int m0, int k0,
                                                const kf_u16 *B, int ldb, int kb0, int n0)
{
    const int lane = threadIdx.x & 31;
#if KF_PF_MMA
    kf_u32 a[4], b[2];
    kf_ldsm_x4(a, kf_smem_u32(A + (m0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * lda + k0 + (lane >> 4) * 8));
    kf_pf_ldsm_x2_t(b, kf_smem_u32(B + (kb0 + (lane & 15)) * ldb + n0));
    kf_mma16816(d, a, b[0], b[1]);
#else
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int m = m0 + g + ((r & 2) ? 8 : 0), nn = n0 + 2 * c + (r & 1);
        float acc = 0.f;
#pragma unroll
        for (int kk = 0; kk < 16; ++kk)
            acc += kf_to_float(A[m * lda + k0 + kk]) * kf_to_float(B[(kb0 + kk) * ldb + nn]);
        d[r] += acc;
    }
#endif
}

__device__ __forceinline__ void kf_pf_tc_unpack8(uint4 u, float f[8])
{
    const kf_u32 w[4] = { u.x, u.y, u.z, u.w };
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        f[2 * r] = kf_to_float((kf_u16)(w[r] & 0xffffu));
        f[2 * r + 1] = kf_to_float((kf_u16)(w[r] >> 16));
    }
}

__device__ __forceinline__ uint4 kf_pf_tc_pack8(const float f[8])
{
    return make_uint4(kf_pack2(f[0], f[1]), kf_pack2(f[2], f[3]), kf_pack2(f[4], f[5]), kf_pack2(f[6], f[7]));
}

__device__ __forceinline__ void kf_pf_tc_ld8(const float *x, float f[8])
{
    const float4 a = ((const float4 *)x)[0], b = ((const float4 *)x)[1];
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

/* 16-byte copy of bytes (a multiple of 16) from shared src to dst, by the whole block */
__device__ __forceinline__ void kf_pf_tc_copy(void *dst, const void *src, int bytes)
{
    for (int e = threadIdx.x; e < bytes / 16; e += blockDim.x)
        ((uint4 *)dst)[e] = ((const uint4 *)src)[e];
}

/* W = K / 64 words (bf16 pairs) of a q or k row from x, aligned to 4 W bytes when vec, as one 4- or 8-byte load;
 * else W pairs of 2-byte loads */
template <int W>
__device__ __forceinline__ void kf_pf_tc_ldw(const kf_u16 *x, bool vec, kf_u32 (&o)[W])
{
    static_assert(W == 1 || W == 2, "q, k rows of 64 or 128");
    if (vec) {
        if (W == 2) {
            const uint2 u = *(const uint2 *)x;
            o[0] = u.x;
            o[W - 1] = u.y;
        } else {
            o[0] = *(const kf_u32 *)x;
        }
    } else {
#pragma unroll
        for (int w = 0; w < W; ++w)
            o[w] = x[2 * w] | (kf_u32)x[2 * w + 1] << 16;
    }
}

/* One warp, rows i = warp + NW (j0 + j) (j < RPW) of the chunk from token row t0: q and k (head h) as loaded and the raw
 * beta of value head hv (lane 0), every load issued before any is used; a row past cc (warp-uniform) loads nothing.
 * The row pointers step NW rows at a time (no 64-bit product a row). Lane l takes the E = K / 32 contiguous elements
 * from E l: one 4- or 8-byte load where the row allows (the API guarantees no alignment of q, k rows: checked per
 * row, a warp-uniform branch), else E 2-byte loads. */
template <int RPW, int NW>
__device__ __forceinline__ void kf_pf_tc_qk_issue(const kf_kda_params &p, int n, long long t0, int j0, int cc, int h, int hv,
                                                  kf_u32 (&qw)[RPW][KF_PF_K / 64], kf_u32 (&kw)[RPW][KF_PF_K / 64],
                                                  float (&bv)[RPW])
{
    constexpr int E = KF_PF_K / 32, W = E / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long tok = t0 + warp + NW * j0;
    const kf_u16 *q = (const kf_u16 *)p.q + (p.cu_seqlens ? 0 : (long long)n * p.q_sb) + tok * p.q_st + (long long)h * p.q_sh + E * lane;
    const kf_u16 *k = (const kf_u16 *)p.k + (p.cu_seqlens ? 0 : (long long)n * p.k_sb) + tok * p.k_st + (long long)h * p.k_sh + E * lane;
    const float *b = &p.beta[(p.cu_seqlens ? 0 : (long long)n * p.b_sb) + tok * p.b_st + (long long)hv * p.b_sh];
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
        bv[j] = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w)
            qw[j][w] = kw[j][w] = 0u;
        if (warp + NW * (j0 + j) < cc) {
            if (lane == 0)
                bv[j] = *b;
            const bool vec = __all_sync(0xffffffffu, ((((unsigned long long)q | (unsigned long long)k) & (2 * E - 1)) == 0));
            kf_pf_tc_ldw<W>(q, vec, qw[j]);
            kf_pf_tc_ldw<W>(k, vec, kw[j]);
        }
        q += NW * p.q_st;
        k += NW * p.k_st;
        b += NW * p.b_st;
    }
}

/* One warp, the rows of kf_pf_tc_qk_issue: q and k as loaded into Qr, Kr (zeros past cc: as issued) and, from lane 0, their scales
 * (q counts as q * nq, k as k * nk, the norms of kf_kda_load_qk_warp; the squares summed in another order: fp32
 * rounding only) and beta. */
template <int RPW, int NW>
__device__ __forceinline__ void kf_pf_tc_qk_finish(const kf_kda_params &p, const kf_u32 (&qw)[RPW][KF_PF_K / 64],
                                                   const kf_u32 (&kw)[RPW][KF_PF_K / 64], const float (&bv)[RPW], int j0, int cc,
                                                   kf_u16 *Qr, kf_u16 *Kr, float *nq, float *nk, float *beta)
{
    constexpr int E = KF_PF_K / 32, W = E / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
        const int i = warp + NW * (j0 + j);
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            const float x0 = kf_to_float((kf_u16)(qw[j][w] & 0xffffu)), x1 = kf_to_float((kf_u16)(qw[j][w] >> 16));
            const float y0 = kf_to_float((kf_u16)(kw[j][w] & 0xffffu)), y1 = kf_to_float((kf_u16)(kw[j][w] >> 16));
            sq += x0 * x0 + x1 * x1;
            sk += y0 * y0 + y1 * y1;
        }
        if (W == 2) {
            *(uint2 *)(Qr + i * KF_PF_LDK + E * lane) = make_uint2(qw[j][0], qw[j][W - 1]);
            *(uint2 *)(Kr + i * KF_PF_LDK + E * lane) = make_uint2(kw[j][0], kw[j][W - 1]);
        } else {
            *(kf_u32 *)(Qr + i * KF_PF_LDK + E * lane) = qw[j][0];
            *(kf_u32 *)(Kr + i * KF_PF_LDK + E * lane) = kw[j][0];
        }
        float a = p.scale, b = 1.f;
        if (p.l2norm) {
            a *= rsqrtf(kf_kda_warp_sum(sq) + 1e-6f);
            b = rsqrtf(kf_kda_warp_sum(sk) + 1e-6f);
        }
        if (lane == 0) {
            nq[i] = a;
            nk[i] = b;
            beta[i] = i < cc ? kf_kda_beta_of(p, bv[j]) : 0.f;
        }
    }
}

/* Prepares the chunk of cc tokens from token row t0 of sequence n, value head hv, as kf_pf_prepare does, with
 * the whole block. STAGE: s is a workspace slot in global memory (ldw = ldq = K, ldkd = lda = C, ldu = un = V):
 * W, U and A are staged in shared memory and stored as 16-byte vectors, and the function ends without a barrier;
 * else s lies in shared memory and the function ends with __syncthreads(). */
template <bool STAGE>
__device__ void kf_pf_prepare_tc(const kf_kda_params &p, int n, int hv, long long t0, int cc, char *sc,
                                 const kf_pf_sink &s)
{
    constexpr int NT = STAGE ? 256 : KF_PF_THREADS, NW = NT / 32;   /* kernels(): kf_kda_prep 256, fused 32 w */
    constexpr int un = STAGE ? KF_PF_V : KF_PF_VS, ldv = un + 8;   /* value columns of U: the sinks' s.un */
    const int tid = threadIdx.x, nt = NT, warp = tid >> 5, nw = NW, lane = tid & 31;
    const int g4 = lane >> 2, c4 = lane & 3;
    const int h = kf_kda_qk_head(p, hv);
    float *G = (float *)(sc + KF_PF_TC_G);
    kf_u16 *Qr = (kf_u16 *)(sc + KF_PF_TC_QR), *Kr = (kf_u16 *)(sc + KF_PF_TC_KR);
    float *nq = (float *)(sc + KF_PF_TC_NQ), *nk = (float *)(sc + KF_PF_TC_NK);
    float *beta = (float *)(sc + KF_PF_TC_BETA), *R = (float *)(sc + KF_PF_TC_REF);
    float *ER = (float *)(sc + KF_PF_TC_ER), *EL = (float *)(sc + KF_PF_TC_EL);
    kf_u16 *Kg = (kf_u16 *)(sc + KF_PF_TC_KG), *Qb = (kf_u16 *)(sc + KF_PF_TC_QB), *Kb = (kf_u16 *)(sc + KF_PF_TC_KB);
    kf_u16 *Kc = (kf_u16 *)(sc + KF_PF_TC_KC);
    float *Lf = (float *)(sc + KF_PF_TC_LF);
    kf_u16 *Lb = (kf_u16 *)(sc + KF_PF_TC_LB), *P = (kf_u16 *)(sc + KF_PF_TC_P), *Db = (kf_u16 *)(sc + KF_PF_TC_DB);
    kf_u16 *T = (kf_u16 *)(sc + KF_PF_TC_T), *V = (kf_u16 *)(sc + KF_PF_TC_V);
    kf_u16 *Ao = STAGE ? (kf_u16 *)(sc + KF_PF_TC_AS) : s.a;
    const int lda = STAGE ? KF_PF_C : s.lda;
    (void)Lb; (void)P; (void)Db;

    /* 1. Every global load of the chunk is issued before any of them is used (one memory round trip a block,
     *    not one a gate row): the raw gates, beta, q and k rows, v; then the arithmetic. Gates: column d, the
     *    RUN rows of run ru (NR runs a column, in one warp, CW lanes apart), summed in the run and offset by the
     *    runs before it (shuffles); rows past cc load nothing and count as 0. */
    constexpr int NR = NT / KF_PF_K, CW = 32 / NR, RUN = KF_PF_C / NR, RPW = KF_PF_C / NW;
    static_assert(NT % KF_PF_K == 0 && NR >= 1 && NR <= 32 && KF_PF_C % NR == 0, "gate runs: K | threads, runs | C");
    static_assert(KF_PF_C % NW == 0, "q, k rows: warps | C");
    const int ru = lane / CW, d = warp * CW + lane % CW, ir = ru * RUN;
    float gx[RUN];
    {
        const float *gp = p.g + (p.cu_seqlens ? 0 : (long long)n * p.g_sb) + (t0 + ir) * p.g_st + (long long)hv * p.g_sh + d;
#pragma unroll
        for (int r = 0; r < RUN; ++r, gp += p.g_st)
            gx[r] = ir + r < cc ? *gp : 0.f;
    }
    const float ea = p.gate ? expf(p.a_log[hv]) : 0.f;   /* exp(a_log), once */
    const float bias = p.gate && p.dt_bias ? p.dt_bias[(long long)hv * p.dt_sh + d] : 0.f;
    constexpr int RG = RPW < 4 ? RPW : 4;                           /* q, k rows a warp in flight (registers) */
    kf_u32 qw[RG][KF_PF_K / 64], kw[RG][KF_PF_K / 64];
    float bv[RG];
    kf_pf_tc_qk_issue<RG, NW>(p, n, t0, 0, cc, h, hv, qw, kw, bv);
    const kf_u16 *vg = (const kf_u16 *)p.v + (p.cu_seqlens ? 0 : (long long)n * p.v_sb) + (long long)hv * p.v_sh + s.u0 + t0 * p.v_st;
    const bool v16 = ((((unsigned long long)vg & 15) | (p.v_st & 7)) == 0);  /* every row 16-byte aligned */
    constexpr int NV = (KF_PF_C * un / 8 + NT - 1) / NT;                 /* 16-byte vectors a thread, at most */
    uint4 vx[NV];
    if (v16) {
        const int nv = un / 8, ne = KF_PF_C * nv;
#pragma unroll
        for (int r = 0; r < NV; ++r) {
            const int e = tid + r * NT, i = e / nv, c = e % nv * 8;
            vx[r] = e < ne && i < cc ? *(const uint4 *)(vg + i * p.v_st + c) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
    bool bad = false;
    {
        float acc = 0.f;
#pragma unroll
        for (int r = 0; r < RUN; ++r) {
            const float g = kf_kda_gate_of(p, gx[r], bias, ea);
            gx[r] = ir + r < cc ? g : 0.f;
            bad |= gx[r] > 0.f;
            acc += gx[r];
            gx[r] = acc;
        }
        float off = 0.f;                          /* the totals of the runs before ru */
#pragma unroll
        for (int j = 1; j < NR; ++j) {
            const float o = __shfl_up_sync(0xffffffffu, acc, j * CW);
            if (ru >= j)
                off += o;
        }
#pragma unroll
        for (int r = 0; r < RUN; ++r)
            G[(ir + r) * KF_PF_TC_LDG + d] = gx[r] + off;
    }
    kf_pf_tc_qk_finish<RG, NW>(p, qw, kw, bv, 0, cc, Qr, Kr, nq, nk, beta);
    for (int j0 = RG; j0 < RPW; j0 += RG) {                          /* chunk 32, 64: the other rows, RG at a time */
        kf_pf_tc_qk_issue<RG, NW>(p, n, t0, j0, cc, h, hv, qw, kw, bv);
        kf_pf_tc_qk_finish<RG, NW>(p, qw, kw, bv, j0, cc, Qr, Kr, nq, nk, beta);
    }
    if (v16) {
        const int nv = un / 8, ne = KF_PF_C * nv;
#pragma unroll
        for (int r = 0; r < NV; ++r) {
            const int e = tid + r * NT;
            if (e < ne)
                *(uint4 *)(V + e / nv * ldv + e % nv * 8) = vx[r];
        }
    } else {
        /* rows not 16-byte aligned (the API guarantees no alignment): 2-byte loads, 4 in flight a thread */
        for (int e0 = tid; e0 < KF_PF_C * un; e0 += 4 * nt) {
            kf_u16 x[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int e = e0 + r * nt, i = e / un;
                x[r] = e < KF_PF_C * un && i < cc ? vg[i * p.v_st + e % un] : (kf_u16)0;
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int e = e0 + r * nt;
                if (e < KF_PF_C * un)
                    V[e / un * ldv + e % un] = x[r];
            }
        }
    }
    __syncthreads();
    /* each block row's reference R (the midpoint of G over its rows), exp(R), exp(G_last - R); the span check */
    for (int e = tid; e < KF_PF_TC_NB * KF_PF_K; e += nt) {
        const int a = e / KF_PF_K, dd = e % KF_PF_K;
        const float hi = G[16 * a * KF_PF_TC_LDG + dd], lo = G[(16 * a + 15) * KF_PF_TC_LDG + dd];
        const float r = 0.5f * (hi + lo);
        bad |= hi - lo > KF_PF_TC_SPAN;
        R[e] = r;
        ER[e] = kf_pf_exp(r);
        EL[e] = kf_pf_exp(G[(KF_PF_C - 1) * KF_PF_TC_LDG + dd] - r);
    }
    if (__syncthreads_or(bad)) {                  /* a gate span the bf16 factors cannot hold: fp32, exactly */
        kf_pf_prepare(p, n, hv, t0, cc, (float *)sc, s);
        return;
    }

    /* 2. One pass over the chunk's elements, 8 columns of one row a thread-item (consecutive threads on consecutive
     *    rows). Row i of block row a, with e = exp(G_i - R_a) and f = exp(R_a - G_i) (both within exp(+-span / 2)),
     *    q and k with their scales: Qb = q e, Kb = k e and Kc = k f (step 3's operands of the diagonal block),
     *    Qg = Qb exp(R_a) and Kg = Kb exp(R_a) (q, k exp(G)), KdT = Kc exp(G_last - R_a) (k exp(G_last - G),
     *    transposed, to the sink directly); gl = exp(G_last). */
    for (int e = tid; e < KF_PF_C * KF_PF_K / 8; e += nt) {
        const int i = e % KF_PF_C, d0 = e / KF_PF_C * 8, a = i >> 4;
        float g[8], ref[8], q[8], k[8], kc[8];
        kf_pf_tc_ld8(G + i * KF_PF_TC_LDG + d0, g);
        kf_pf_tc_ld8(R + a * KF_PF_K + d0, ref);
        kf_pf_tc_unpack8(*(const uint4 *)(Qr + i * KF_PF_LDK + d0), q);
        kf_pf_tc_unpack8(*(const uint4 *)(Kr + i * KF_PF_LDK + d0), k);
        const float sq = nq[i], sk = nk[i];
#pragma unroll
        for (int x = 0; x < 8; ++x) {
            const float ex = kf_pf_exp(g[x] - ref[x]);
            kc[x] = k[x] * (sk * kf_pf_exp(ref[x] - g[x]));
            q[x] *= sq * ex;                      /* Qb */
            k[x] *= sk * ex;                      /* Kb */
        }
        *(uint4 *)(Qb + i * KF_PF_LDK + d0) = kf_pf_tc_pack8(q);
        *(uint4 *)(Kb + i * KF_PF_LDK + d0) = kf_pf_tc_pack8(k);
        *(uint4 *)(Kc + i * KF_PF_LDK + d0) = kf_pf_tc_pack8(kc);
        kf_pf_tc_ld8(ER + a * KF_PF_K + d0, g);   /* exp(R), exp(G_last - R) */
        kf_pf_tc_ld8(EL + a * KF_PF_K + d0, ref);
#pragma unroll
        for (int x = 0; x < 8; ++x) {
            q[x] *= g[x];
            k[x] *= g[x];
            s.kdt[(d0 + x) * s.ldkd + i] = kf_kda_bf16(kc[x] * ref[x]);  /* a warp: 2 rows of 16 (32 bytes) */
        }
        *(uint4 *)(s.qg + i * s.ldq + d0) = kf_pf_tc_pack8(q);
        *(uint4 *)(Kg + i * KF_PF_LDK + d0) = kf_pf_tc_pack8(k);
    }
    for (int dd = tid; dd < KF_PF_K; dd += nt)
        s.gl[dd] = kf_pf_exp(G[(KF_PF_C - 1) * KF_PF_TC_LDG + dd]);

    /* 3. L and A, one block row of 16 at a time; Kc's rows left of the diagonal block for block row a (step 2 wrote
     *    the diagonal ones): k_j exp(R_a - G_j) <= k_j */
    for (int a = 0; a < KF_PF_TC_NB; ++a) {
        const int i0 = 16 * a, nc = i0 + 16;
        const float *Ra = R + a * KF_PF_K;
        for (int e = tid; e < i0 * KF_PF_K / 8; e += nt) {
            const int j = e % i0, d0 = e / i0 * 8;
            float g[8], ref[8], k[8];
            kf_pf_tc_ld8(G + j * KF_PF_TC_LDG + d0, g);
            kf_pf_tc_ld8(Ra + d0, ref);
            kf_pf_tc_unpack8(*(const uint4 *)(Kr + j * KF_PF_LDK + d0), k);
            const float sk = nk[j];
#pragma unroll
            for (int x = 0; x < 8; ++x)
                k[x] *= sk * kf_pf_exp(ref[x] - g[x]);
            *(uint4 *)(Kc + j * KF_PF_LDK + d0) = kf_pf_tc_pack8(k);
        }
        __syncthreads();
        /* tile t: columns 8 (t / 2) .., L (t even) or A (t odd); both read the same Kc fragments */
        for (int t = warp; t < 2 * (nc / 8); t += nw) {
            const int n0 = (t >> 1) * 8;
            const bool isa = t & 1;
            float acc[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
            for (int k0 = 0; k0 < KF_PF_K; k0 += 16)
                kf_pf_mma(acc, isa ? Qb : Kb, KF_PF_LDK, i0, k0, Kc, KF_PF_LDK, n0);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = i0 + g4 + ((r & 2) ? 8 : 0), j = n0 + 2 * c4 + (r & 1);
                if (isa) {
                    Ao[i * lda + j] = kf_kda_bf16(j <= i ? acc[r] : 0.f);
                } else {
                    const float l = j < i ? beta[i] * acc[r] : 0.f;
                    Lf[i * KF_PF_CP + j] = l;
                    Lb[i * KF_PF_LDC + j] = kf_kda_bf16(l);
                }
            }
        }
        for (int e = tid; e < 16 * (KF_PF_C - nc); e += nt) {      /* A is zero right of the diagonal block */
            const int i = i0 + e / (KF_PF_C - nc), j = nc + e % (KF_PF_C - nc);
            Ao[i * lda + j] = 0;
        }
        __syncthreads();                          /* Kc's rows left of the next diagonal block are rewritten */
    }

    /* 4. T: the diagonal blocks by forward substitution (fp32, one column a thread), D_a kept for P */
    for (int c = tid; c < KF_PF_C; c += nt) {
        const int i0 = c & ~15, cl = c & 15;
        float t[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            float acc = r == cl ? 1.f : 0.f;
#pragma unroll
            for (int j = 0; j < r; ++j)
                acc -= Lf[(i0 + r) * KF_PF_CP + i0 + j] * t[j];
            t[r] = acc;                           /* 0 above the diagonal (r < cl) */
        }
        const float bc = beta[c];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            T[(i0 + r) * KF_PF_LDC + c] = kf_kda_bf16(t[r] * bc);  /* KF_MUTANT_BETA_TWICE */
            if (KF_PF_TC_NB > 1)
                Db[(i0 + r) * KF_PF_TC_LDD + cl] = kf_kda_bf16(t[r]);
        }
    }
    __syncthreads();
#if KF_PF_C > 16
    /* P_ac = D_a L_ac for c < a; tile t: pair t / 2 (block row a, c), columns 16 c + 8 (t % 2) .. */
    for (int t = warp; t < KF_PF_TC_NB * (KF_PF_TC_NB - 1); t += nw) {
        int c = t >> 1, a = 1;
        while (c >= a) {
            c -= a;
            ++a;
        }
        const int n0 = 16 * c + 8 * (t & 1);
        float acc[4] = { 0.f, 0.f, 0.f, 0.f };
        kf_pf_tc_mma_bt(acc, Db, KF_PF_TC_LDD, 16 * a, 0, Lb, KF_PF_LDC, 16 * a, n0);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
            *(kf_u32 *)(P + (16 * a + g4 + 8 * hr) * KF_PF_LDC + n0 + 2 * c4) = kf_pack2(acc[2 * hr], acc[2 * hr + 1]);
    }
    __syncthreads();
    /* T_ab = -sum_{b <= c < a} P_ac T_cb, block row after block row; tile t: b = t / 2, columns 16 b + 8 (t % 2) .. */
    for (int a = 1; a < KF_PF_TC_NB; ++a) {
        for (int t = warp; t < 2 * a; t += nw) {
            const int b = t >> 1, n0 = 16 * b + 8 * (t & 1);
            float acc[4] = { 0.f, 0.f, 0.f, 0.f };
            for (int c = b; c < a; ++c)
                kf_pf_tc_mma_bt(acc, P, KF_PF_LDC, 16 * a, 16 * c, T, KF_PF_LDC, 16 * c, n0);  /* KF_MUTANT_TINV */
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
                *(kf_u32 *)(T + (16 * a + g4 + 8 * hr) * KF_PF_LDC + n0 + 2 * c4) = kf_pack2(-acc[2 * hr], -acc[2 * hr + 1]);
        }
        __syncthreads();
    }
#endif

    /* 5. W = T Kg, U = T V; tile t: block row a (the longest first), 8 columns of W or of U */
    {
        kf_u16 *Wo = STAGE ? (kf_u16 *)(sc + KF_PF_TC_WS) : s.w, *Uo = STAGE ? (kf_u16 *)(sc + KF_PF_TC_US) : s.u;
        const int ldw = STAGE ? KF_PF_K : s.ldw, ldu = STAGE ? un : s.ldu;
        constexpr int NTN = KF_PF_K / 8 + un / 8, NTT = (KF_PF_TC_NB * NTN + NW - 1) / NW;
#pragma unroll 1
        for (int jt = 0; jt < NTT; ++jt) {
            const int t = warp + NW * jt;
            if (KF_PF_TC_NB * NTN % NW != 0 && t >= KF_PF_TC_NB * NTN)
                break;
            const int a = KF_PF_TC_NB - 1 - t / NTN, nn = t % NTN;
            const bool isw = nn < KF_PF_K / 8;
            const int n0 = isw ? 8 * nn : 8 * (nn - KF_PF_K / 8);
            float acc[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
            for (int kb = 0; kb < KF_PF_TC_NB; ++kb)
                if (kb <= a)
                    kf_pf_tc_mma_bt(acc, T, KF_PF_LDC, 16 * a, 16 * kb, isw ? Kg : V, isw ? KF_PF_LDK : ldv, 16 * kb, n0);
            kf_u16 *o = isw ? Wo : Uo;
            const int ld = isw ? ldw : ldu;
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
                *(kf_u32 *)(o + (16 * a + g4 + 8 * hr) * ld + n0 + 2 * c4) = kf_pack2(acc[2 * hr], acc[2 * hr + 1]);
        }
        __syncthreads();
        if (STAGE) {
            kf_pf_tc_copy(s.w, Wo, 2 * KF_PF_C * KF_PF_K);
            kf_pf_tc_copy(s.u, Uo, 2 * KF_PF_C * un);
            kf_pf_tc_copy(s.a, Ao, 2 * KF_PF_C * KF_PF_C);
        }
    }
}

#endif
