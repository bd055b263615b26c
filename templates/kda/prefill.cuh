/* kda/prefill.cuh: chunked KDA prefill: per-chunk preparation (fp32) and the serial state pass on tensor cores */
#ifndef KF_KDA_PREFILL_CUH
#define KF_KDA_PREFILL_CUH

/*
 * Needs kda/common.cuh, common/mma.cuh and
 *   KF_PF_C      chunk length (16, 32, 64)
 *   KF_PF_VS     value columns per state block (16, 32, 64)
 *   KF_PF_W      warps of the state (and fused) block
 *   KF_PF_TR     1: the state is held transposed, [VS, K] (M = VS rows, N = K), else [K, VS]
 *   KF_PF_MMA    1: mma.sync bf16 tensor cores; 0: the same fragments computed on CUDA cores
 *   KF_PF_FUSED  1: one kernel prepares each chunk in shared memory (small batches, one launch)
 *   KF_PF_PREP   1: the chunk preparation on tensor cores (kda/prep_tc.cuh, rendered after this file); 0: fp32
 *   KF_PF_SEG    segments per sequence (split path): > 1 adds kf_kda_segop (each segment's affine map
 *                S -> M S + c, all segments in parallel) and kf_kda_segcomb (start states by composing
 *                the maps); kf_kda_state then runs every segment in parallel from its start state
 *
 * Chunk math (tuner/ref_kda.h, proven against the token recurrence there): in a chunk of cc <= C
 * tokens, G_i = sum_{s<=i} g_s;  L[i,j] = beta_i sum_d k_i k_j exp(G_i - G_j) (j < i);
 * A[i,j] = sum_d q_i k_j exp(G_i - G_j) (j <= i);  T = (I + L)^-1 diag(beta);  W = T (exp(G) K);
 * U = T V;  then, serially over chunks:  V' = U - W S;  O = (Q exp G) S + A V';
 * S <- diag(exp G_last) S + (K exp(G_last - G))^T V'. Rows cc..C-1 of a tail chunk are zero
 * (g = 0, beta = 0), which makes their W, U, V' rows zero and G_last = G_{cc-1}.
 *
 * exp(G_i - G_j), i >= j: within a 16-row diagonal block it is computed per element (exact for any
 * log gate); across blocks it factors through the row r = 16a - 1 before block a:
 * exp(G_i - G_r) exp(G_r - G_j), both factors <= 1. No exp(-G) alone is ever formed.
 *
 * Split path (KF_PF_FUSED 0), two kernels:
 *   kf_kda_prep   grid (nvc, hv_heads): block (vc, hv) prepares virtual chunk vc of value head hv
 *                 into workspace slot vc * hv_heads + hv (bytes KF_PF_SLOT):
 *                 W [C][K] bf16, Qg [C][K] bf16 (Q exp(G), q scaled), KdT [K][C] bf16
 *                 (K exp(G_last - G), transposed), A [C][C] bf16, U [C][V] bf16, gl [K] fp32.
 *   kf_kda_state  grid (V / VS, hv_heads, nseq): the serial pass over the chunks of one sequence;
 *                 the copy of chunk ch + 1's slot into shared memory overlaps chunk ch (two buffers).
 * Virtual chunks: sequence n's chunk c is vc = gbos(n) / C + n + c (gbos = cu[n] packed, n * t
 * padded), which never overlaps the next sequence; nvc = total / C + nseq bounds them all.
 * Fused path: kf_kda_state alone, preparing each chunk (its VS columns of U only) in shared memory.
 */
#define KF_PF_K KF_KDA_K
#define KF_PF_V KF_KDA_V
#define KF_PF_KP (KF_PF_K + 1)               /* fp32 scratch row stride: conflict-free column walks */
#define KF_PF_CP (KF_PF_C + 1)
#define KF_PF_LDK (KF_PF_K + 8)              /* bf16 row strides of mma operands: conflict-free fragments */
#define KF_PF_LDC (KF_PF_C + 8)
#define KF_PF_THREADS (32 * KF_PF_W)

/* workspace slot of one (virtual chunk, value head) */
#define KF_PF_OFF_W 0
#define KF_PF_OFF_Q (KF_PF_OFF_W + 2 * KF_PF_C * KF_PF_K)
#define KF_PF_OFF_KD (KF_PF_OFF_Q + 2 * KF_PF_C * KF_PF_K)
#define KF_PF_OFF_A (KF_PF_OFF_KD + 2 * KF_PF_C * KF_PF_K)
#define KF_PF_OFF_U (KF_PF_OFF_A + 2 * KF_PF_C * KF_PF_C)
#define KF_PF_OFF_GL (KF_PF_OFF_U + 2 * KF_PF_C * KF_PF_V)
#define KF_PF_SLOT (KF_PF_OFF_GL + 4 * KF_PF_K)

/* Segments (KF_PF_SEG > 1, split path): sequence n's chunks are cut into SEG runs of ceil(nch / SEG);
 * after the chunk slots (rounded up to 256 bytes), per (n, hv, segment) fp32: c [K][V] (the
 * segment's end state from a zero start), ss [K][V] (its start state), M [K][K] (its transition). */
#ifndef KF_PF_SEG
#define KF_PF_SEG 1
#endif
#define KF_PF_SEG_CS 0
#define KF_PF_SEG_SS (KF_PF_K * KF_PF_V)
#define KF_PF_SEG_MS (2 * KF_PF_K * KF_PF_V)
#define KF_PF_SEG_FLOATS (2 * KF_PF_K * KF_PF_V + KF_PF_K * KF_PF_K)

__device__ __forceinline__ float *kf_pf_segws(const kf_kda_params &p, int n, int hv, int sg)
{
    const long long slots = ((long long)(p.total / KF_PF_C + p.nseq) * p.hv_heads * KF_PF_SLOT + 255) / 256 * 256;
    return (float *)((char *)p.ws + slots) + (((long long)n * p.hv_heads + hv) * KF_PF_SEG + sg) * (long long)KF_PF_SEG_FLOATS;
}

#define KF_LOG2E 1.4426950408889634f
__device__ __forceinline__ float kf_pf_exp(float x) { return kf_exp2(x * KF_LOG2E); }

/* ---- chunk preparation ------------------------------------------------------------------ */

/* Where a prepared chunk goes (global workspace or shared memory): bf16 matrices with row strides
 * in elements; U gets value columns [u0, u0 + un). */
struct kf_pf_sink {
    kf_u16 *w, *qg, *kdt, *a, *u;
    float *gl;
    int ldw, ldq, ldkd, lda, ldu;
    int u0, un;
};

/* fp32 scratch of the preparation, in floats (un = value columns of U prepared) */
#define KF_PF_SC_QK(un) ((KF_PF_C - 16 + 32) * KF_PF_KP)
#define KF_PF_SC_TV(un) (KF_PF_C * KF_PF_CP + KF_PF_C * (un))
#define KF_PF_SCRATCH(un) (3 * KF_PF_C * KF_PF_KP + 2 * KF_PF_C * KF_PF_CP + KF_PF_C \
                           + (KF_PF_SC_QK(un) > KF_PF_SC_TV(un) ? KF_PF_SC_QK(un) : KF_PF_SC_TV(un)))

__device__ __forceinline__ long long kf_pf_gbos(const kf_kda_params &p, int n)
{
    if (!p.cu_seqlens)
        return (long long)n * p.t;
    return p.cu64 ? ((const long long *)p.cu_seqlens)[n] : (long long)((const int *)p.cu_seqlens)[n];
}

__device__ __forceinline__ long long kf_pf_vbase(const kf_kda_params &p, int n)
{
    return kf_pf_gbos(p, n) / KF_PF_C + n;
}

/* Prepares the chunk of cc tokens starting at token row t0 (absolute, bos included) of sequence n,
 * value head hv, with the whole block. sc: KF_PF_SCRATCH(s.un) floats of shared memory. Ends with
 * __syncthreads(). */
__device__ __forceinline__ void kf_pf_prepare(const kf_kda_params &p, int n, int hv, long long t0, int cc, float *sc,
                              const kf_pf_sink &s)
{
    const int tid = threadIdx.x, nt = blockDim.x, warp = tid >> 5, nw = nt >> 5;
    const int h = hv / (p.hv_heads / p.h_heads);
    float *G = sc;                                 /* [C][KP] cumulative gates */
    float *Kf = G + KF_PF_C * KF_PF_KP;            /* [C][KP] k (normalised), later k exp(G) */
    float *Qf = Kf + KF_PF_C * KF_PF_KP;           /* [C][KP] q (normalised, scaled) */
    float *L = Qf + KF_PF_C * KF_PF_KP;            /* [C][CP] beta_i k_i k_j exp(G_i - G_j), j < i */
    float *A = L + KF_PF_C * KF_PF_CP;             /* [C][CP] q_i k_j exp(G_i - G_j), j <= i */
    float *beta = A + KF_PF_C * KF_PF_CP;          /* [C] */
    float *X = beta + KF_PF_C;                     /* shared region: KJ/Qt/Kt, later T/Vf */
    float *KJ = X;                                 /* [C-16][KP] k_j exp(G_r - G_j) */
    float *Qt = X + (KF_PF_C - 16) * KF_PF_KP;     /* [16][KP] q_i exp(G_i - G_r) */
    float *Kt = Qt + 16 * KF_PF_KP;                /* [16][KP] k_i exp(G_i - G_r) */
    float *T = X;                                  /* [C][CP] */
    float *Vf = X + KF_PF_C * KF_PF_CP;            /* [C][un] */

    /* 1. q, k, beta per row; cumulative gates per column */
#pragma unroll 4
    for (int i = warp; i < KF_PF_C; i += nw) {
        if (i < cc) {
            kf_kda_load_qk_warp(p, n, t0 + i, h, Qf + i * KF_PF_KP, Kf + i * KF_PF_KP, 1);
        } else {
            for (int d = tid & 31; d < KF_PF_K; d += 32) {
                Qf[i * KF_PF_KP + d] = 0.f;
                Kf[i * KF_PF_KP + d] = 0.f;
            }
        }
        if ((tid & 31) == 0)
            beta[i] = i < cc ? kf_kda_beta(p, n, t0 + i, hv) : 0.f;
    }
    /* every gate of the column is loaded before the first store: C loads in flight, not C round trips */
    for (int d = tid; d < KF_PF_K; d += nt) {
        float x[KF_PF_C];
#pragma unroll
        for (int i = 0; i < KF_PF_C; ++i)
            x[i] = i < cc ? kf_kda_gate(p, n, t0 + i, hv, d) : 0.f;
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < KF_PF_C; ++i) {
            acc += x[i];
            G[i * KF_PF_KP + d] = acc;
        }
    }
    __syncthreads();

    /* 2. L and A, one block row of 16 at a time */
    for (int a = 0; a < KF_PF_C / 16; ++a) {
        const int i0 = 16 * a;
        if (a > 0) {
            const float *Gr = G + (i0 - 1) * KF_PF_KP;
            for (int e = tid; e < i0 * KF_PF_K; e += nt) {
                const int j = e / KF_PF_K, d = e % KF_PF_K;
                KJ[j * KF_PF_KP + d] = Kf[j * KF_PF_KP + d] * kf_pf_exp(Gr[d] - G[j * KF_PF_KP + d]);
            }
            for (int e = tid; e < 16 * KF_PF_K; e += nt) {
                const int i = e / KF_PF_K, d = e % KF_PF_K;
                const float x = kf_pf_exp(G[(i0 + i) * KF_PF_KP + d] - Gr[d]);
                Qt[i * KF_PF_KP + d] = Qf[(i0 + i) * KF_PF_KP + d] * x;
                Kt[i * KF_PF_KP + d] = Kf[(i0 + i) * KF_PF_KP + d] * x;
            }
            __syncthreads();
        }
        /* off-diagonal blocks (j < i0) through the reference row, diagonal block per element, zeros
         * right of it: three loops, so no warp runs both dot-product kinds (divergence) */
        for (int e = tid; e < 16 * i0; e += nt) {
            const int i = i0 + e / i0, j = e % i0;
            const float *x = Kt + (i - i0) * KF_PF_KP, *y = Qt + (i - i0) * KF_PF_KP, *z = KJ + j * KF_PF_KP;
            float kk = 0.f, qk = 0.f;
#pragma unroll 8
            for (int d = 0; d < KF_PF_K; ++d) {
                kk += x[d] * z[d];
                qk += y[d] * z[d];
            }
            L[i * KF_PF_CP + j] = beta[i] * kk;
            A[i * KF_PF_CP + j] = qk;
        }
        for (int e = tid; e < 16 * 16; e += nt) {
            const int i = i0 + e / 16, j = i0 + e % 16;
            float kk = 0.f, qk = 0.f;
            if (j <= i) {
                const float *ki = Kf + i * KF_PF_KP, *qi = Qf + i * KF_PF_KP, *kj = Kf + j * KF_PF_KP;
                const float *gi = G + i * KF_PF_KP, *gj = G + j * KF_PF_KP;
#pragma unroll 8
                for (int d = 0; d < KF_PF_K; ++d) {
                    const float x = kj[d] * kf_pf_exp(gi[d] - gj[d]);
                    kk += ki[d] * x;
                    qk += qi[d] * x;
                }
            }
            L[i * KF_PF_CP + j] = j < i ? beta[i] * kk : 0.f;
            A[i * KF_PF_CP + j] = qk;
        }
        for (int e = tid; e < 16 * (KF_PF_C - i0 - 16); e += nt) {
            const int w = KF_PF_C - i0 - 16, i = i0 + e / w, j = i0 + 16 + e % w;
            L[i * KF_PF_CP + j] = 0.f;
            A[i * KF_PF_CP + j] = 0.f;
        }
        __syncthreads();                          /* KJ/Qt/Kt are rewritten by the next block row */
    }

    /* 3. Qg, KdT, gl, k exp(G) in place; T by forward substitution (one column per thread); V */
    {
        const float *Gl = G + (KF_PF_C - 1) * KF_PF_KP;
        for (int e = tid; e < KF_PF_C * KF_PF_K; e += nt) {
            const int i = e / KF_PF_K, d = e % KF_PF_K;
            const float g = G[i * KF_PF_KP + d], eg = kf_pf_exp(g);
            s.qg[i * s.ldq + d] = kf_kda_bf16(Qf[i * KF_PF_KP + d] * eg);
            const float kf = Kf[i * KF_PF_KP + d];
            Kf[i * KF_PF_KP + d] = kf * eg;
            s.kdt[d * s.ldkd + i] = kf_kda_bf16(kf * kf_pf_exp(Gl[d] - g));
        }
        for (int d = tid; d < KF_PF_K; d += nt)
            s.gl[d] = kf_pf_exp(Gl[d]);
        for (int c = tid; c < KF_PF_C; c += nt) {
            for (int i = 0; i < KF_PF_C; ++i) {
                float acc = (i == c) ? beta[i] : 0.f;
                for (int j = c; j < i; ++j)
                    acc -= L[i * KF_PF_CP + j] * T[j * KF_PF_CP + c];
                T[i * KF_PF_CP + c] = acc;
            }
        }
        const kf_u16 *v = (const kf_u16 *)p.v + (p.cu_seqlens ? 0 : (long long)n * p.v_sb) + (long long)hv * p.v_sh + s.u0;
#pragma unroll 4
        for (int e = tid; e < KF_PF_C * s.un; e += nt) {
            const int i = e / s.un, c = e % s.un;
            Vf[e] = i < cc ? kf_to_float(v[(t0 + i) * p.v_st + c]) : 0.f;  /* KF_MUTANT_BETA_TWICE */
        }
        for (int e = tid; e < KF_PF_C * KF_PF_C; e += nt) {
            const int i = e / KF_PF_C, j = e % KF_PF_C;
            s.a[i * s.lda + j] = kf_kda_bf16(A[i * KF_PF_CP + j]);
        }
    }
    __syncthreads();

    /* 4. W = T (k exp G), U = T V */
    for (int e = tid; e < KF_PF_C * KF_PF_K; e += nt) {
        const int i = e / KF_PF_K, d = e % KF_PF_K;
        float acc = 0.f;
        for (int j = 0; j <= i; ++j)
            acc += T[i * KF_PF_CP + j] * Kf[j * KF_PF_KP + d];
        s.w[i * s.ldw + d] = kf_kda_bf16(acc);
    }
    for (int e = tid; e < KF_PF_C * s.un; e += nt) {
        const int i = e / s.un, c = e % s.un;
        float acc = 0.f;
        for (int j = 0; j <= i; ++j)
            acc += T[i * KF_PF_CP + j] * Vf[j * s.un + c];
        s.u[i * s.ldu + c] = kf_kda_bf16(acc);
    }
    __syncthreads();
}

#if KF_PF_PREP
/* kda/prep_tc.cuh: the same preparation with the products on tensor cores; STAGE: the sink is global (W, U, A
 * staged in shared memory, stored as 16-byte vectors), else shared. sc: KF_PF_TC_BYTES(un) bytes, 16-aligned. */
template <bool STAGE>
__device__ void kf_pf_prepare_tc(const kf_kda_params &p, int n, int hv, long long t0, int cc, char *sc,
                                 const kf_pf_sink &s);
#endif

#if !KF_PF_FUSED
extern "C" __global__ void __launch_bounds__(256)
kf_kda_prep(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __align__(16) float pf_smem[];
    const long long vc = blockIdx.x;
    const int hv = blockIdx.y;
    /* sequence of this virtual chunk: the last n with vbase(n) <= vc */
    int lo = 0, hi = p.nseq - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (kf_pf_vbase(p, mid) <= vc)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int n = lo;
    long long bos, len;
    kf_kda_seq(p, n, bos, len);
    const long long c = vc - kf_pf_vbase(p, n);
    if (c < 0 || c * KF_PF_C >= len)
        return;                                   /* a gap slot: no chunk here */
    const int cc = (int)(len - c * KF_PF_C < KF_PF_C ? len - c * KF_PF_C : KF_PF_C);
    char *slot = (char *)p.ws + (vc * p.hv_heads + hv) * (long long)KF_PF_SLOT;
    kf_pf_sink s;
    s.w = (kf_u16 *)(slot + KF_PF_OFF_W);     s.ldw = KF_PF_K;
    s.qg = (kf_u16 *)(slot + KF_PF_OFF_Q);    s.ldq = KF_PF_K;
    s.kdt = (kf_u16 *)(slot + KF_PF_OFF_KD);  s.ldkd = KF_PF_C;
    s.a = (kf_u16 *)(slot + KF_PF_OFF_A);     s.lda = KF_PF_C;
    s.u = (kf_u16 *)(slot + KF_PF_OFF_U);     s.ldu = KF_PF_V;
    s.gl = (float *)(slot + KF_PF_OFF_GL);
    s.u0 = 0;
    s.un = KF_PF_V;
#if KF_PF_PREP
    kf_pf_prepare_tc<true>(p, n, hv, bos + c * KF_PF_C, cc, (char *)pf_smem, s);
#else
    kf_pf_prepare(p, n, hv, bos + c * KF_PF_C, cc, pf_smem, s);
#endif
}
#endif

/* ---- mma.sync fragments (the state pass, and prep 1's preparation: kda/prep_tc.cuh) ------ */

/* Two 8x8 b16 matrices; lanes 0-15 give the row addresses (matrix l/8, row l%8). */
__device__ __forceinline__ void kf_pf_ldsm_x2(kf_u32 r[2], kf_u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

/* d += A[m0.., k0..] (16x16, row-major, lda) * B (16x8: stored [n][k], ldb) at (n0, k0): one warp.
 * Fragment ownership of mma.m16n8k16: lane (g = lane/4, c = lane%4) holds d[0..1] = (m0+g, n0+2c..),
 * d[2..3] = (m0+g+8, n0+2c..). */
__device__ __forceinline__ void kf_pf_mma(float d[4], const kf_u16 *A, int lda, int m0, int k0,
                                          const kf_u16 *B, int ldb, int n0)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#if KF_PF_MMA
    /* ldmatrix: A as four 8x8 matrices (rows m0.., m0+8.. x k0.., k0+8..: a[0..3] in mma order), B as
     * two (rows n0..n0+7 x k0.., k0+8..). Every operand row is 16-byte aligned (LDK, LDC multiples of 8)
     * and the row strides (68, 12, 20, 36 words) put the 8 rows of a matrix in distinct banks. */
    (void)g; (void)c;
    kf_u32 a[4], b[2];
    kf_ldsm_x4(a, kf_smem_u32(A + (m0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * lda + k0 + (lane >> 4) * 8));
    kf_pf_ldsm_x2(b, kf_smem_u32(B + (n0 + (lane & 7)) * ldb + k0 + ((lane >> 3) & 1) * 8));
    kf_mma16816(d, a, b[0], b[1]);
#else
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int m = m0 + g + ((r & 2) ? 8 : 0), nn = n0 + 2 * c + (r & 1);
        float acc = 0.f;
#pragma unroll
        for (int kk = 0; kk < 16; ++kk)
            acc += kf_to_float(A[m * lda + k0 + kk]) * kf_to_float(B[nn * ldb + k0 + kk]);
        d[r] += acc;
    }
#endif
}

/* ---- the serial state pass ------------------------------------------------------------- */

/* state tiles: tr 0: [K][VS] as (K/16) x (VS/8) tiles; tr 1: [VS][K] as (VS/16) x (K/8) */
#define KF_PF_NS (KF_PF_K * KF_PF_VS / 128)
#define KF_PF_NSW (KF_PF_NS / KF_PF_W)
#if KF_PF_TR
#define KF_PF_SNT (KF_PF_K / 8)
#else
#define KF_PF_SNT (KF_PF_VS / 8)
#endif

/* Element r of state tile s of this warp (mma C layout: quad row g, column pair c4): its key row kk and value
 * column vv within the block's VS columns, for either orientation. */
__device__ __forceinline__ void kf_pf_st_kv(int warp, int g, int c4, int s, int r, int &kk, int &vv)
{
    const int t = warp + KF_PF_W * s, mt = t / KF_PF_SNT, nt = t % KF_PF_SNT;
    const int row = mt * 16 + g + ((r & 2) ? 8 : 0), col = nt * 8 + 2 * c4 + (r & 1);
#if KF_PF_TR
    kk = col, vv = row;
#else
    kk = row, vv = col;
#endif
}

/* shared memory of the state pass, in bytes from the start: S^T and V'^T, then KF_PF_NBUF chunk
 * buffers (the split path double-buffers: chunk ch + 1 is copied in while chunk ch is computed) */
#if KF_PF_FUSED
#define KF_PF_NBUF 1
#else
#define KF_PF_NBUF 2
#endif
#define KF_PF_SM_SB 0                                                   /* S^T bf16 [VS][LDK] */
#define KF_PF_SM_VP (KF_PF_SM_SB + 2 * KF_PF_VS * KF_PF_LDK)             /* V'^T [VS][LDC] */
#define KF_PF_SM_B0 (KF_PF_SM_VP + 2 * KF_PF_VS * KF_PF_LDC)             /* chunk buffer 0 */
#define KF_PF_BO_W 0                                                    /* W [C][LDK] */
#define KF_PF_BO_Q (KF_PF_BO_W + 2 * KF_PF_C * KF_PF_LDK)                /* Qg [C][LDK] */
#define KF_PF_BO_KD (KF_PF_BO_Q + 2 * KF_PF_C * KF_PF_LDK)               /* KdT [K][LDC] */
#define KF_PF_BO_A (KF_PF_BO_KD + 2 * KF_PF_K * KF_PF_LDC)               /* A [C][LDC] */
#define KF_PF_BO_U (KF_PF_BO_A + 2 * KF_PF_C * KF_PF_LDC)                /* U [C][VS] */
#define KF_PF_BO_GL (KF_PF_BO_U + 2 * KF_PF_C * KF_PF_VS)                /* gl [K] fp32 */
#define KF_PF_SM_BUF (KF_PF_BO_GL + 4 * KF_PF_K)
#define KF_PF_SM_END (KF_PF_SM_B0 + KF_PF_NBUF * KF_PF_SM_BUF)
#define KF_PF_SM_SCRATCH ((KF_PF_SM_END + 15) / 16 * 16)                 /* fused: preparation scratch */


#if !KF_PF_FUSED
/* Starts the copy of prepared slot `slot` (this block's VS columns of U) into chunk buffer bb; one commit group. */
__device__ __forceinline__ void kf_pf_fetch(const char *slot, char *bb, int v0, bool fetch_u)
{
    const int tid = threadIdx.x;
    for (int e = tid; e < KF_PF_C * KF_PF_K / 8; e += KF_PF_THREADS) {
        const int i = e / (KF_PF_K / 8), j = e % (KF_PF_K / 8);
        kf_cp_async16(kf_smem_u32(bb + KF_PF_BO_W + 2 * (i * KF_PF_LDK + 8 * j)), slot + KF_PF_OFF_W + 2 * (i * KF_PF_K + 8 * j), true);
        kf_cp_async16(kf_smem_u32(bb + KF_PF_BO_Q + 2 * (i * KF_PF_LDK + 8 * j)), slot + KF_PF_OFF_Q + 2 * (i * KF_PF_K + 8 * j), true);
    }
    for (int e = tid; e < KF_PF_K * KF_PF_C / 8; e += KF_PF_THREADS) {
        const int i = e / (KF_PF_C / 8), j = e % (KF_PF_C / 8);
        kf_cp_async16(kf_smem_u32(bb + KF_PF_BO_KD + 2 * (i * KF_PF_LDC + 8 * j)), slot + KF_PF_OFF_KD + 2 * (i * KF_PF_C + 8 * j), true);
    }
    for (int e = tid; e < KF_PF_C * KF_PF_C / 8; e += KF_PF_THREADS) {
        const int i = e / (KF_PF_C / 8), j = e % (KF_PF_C / 8);
        kf_cp_async16(kf_smem_u32(bb + KF_PF_BO_A + 2 * (i * KF_PF_LDC + 8 * j)), slot + KF_PF_OFF_A + 2 * (i * KF_PF_C + 8 * j), true);
    }
    for (int e = tid; fetch_u && e < KF_PF_C * KF_PF_VS / 8; e += KF_PF_THREADS) {
        const int i = e / (KF_PF_VS / 8), j = e % (KF_PF_VS / 8);
        kf_cp_async16(kf_smem_u32(bb + KF_PF_BO_U + 2 * (i * KF_PF_VS + 8 * j)), slot + KF_PF_OFF_U + 2 * (i * KF_PF_V + v0 + 8 * j), true);
    }
    for (int e = tid; e < KF_PF_K / 4; e += KF_PF_THREADS)
        kf_cp_async16(kf_smem_u32(bb + KF_PF_BO_GL + 16 * e), slot + KF_PF_OFF_GL + 16 * e, true);
    kf_cp_async_commit();
}
#endif

/* The serial pass over the chunks [c_begin, c_end) of segment sg of sequence n, value head hv:
 * MODE 0 (kf_kda_state): VS value columns from v0; the initial state is h0 (seg 1) or the segment's
 *   start state from kf_kda_segcomb; writes o, and ht from the segment holding the last chunk.
 * MODE 1 (kf_kda_segop, seg > 1): no output; ident 0: VS value columns from v0 from a zero state
 *   (the segment's offset c); ident 1: VS columns from v0 of the K x K identity with U = 0 (the
 *   segment's transition M, since a chunk maps S to (diag(gl) - KdT W) S + KdT U). */
template <int MODE>
__device__ __forceinline__ void kf_pf_state_body(const kf_kda_params &p, char *st_smem, int v0, bool ident, int hv, int n, int sg)
{
    kf_u16 *Sb = (kf_u16 *)(st_smem + KF_PF_SM_SB);
    kf_u16 *VpT = (kf_u16 *)(st_smem + KF_PF_SM_VP);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    long long bos, len;
    kf_kda_seq(p, n, bos, len);
    const long long nch = (len + KF_PF_C - 1) / KF_PF_C;
    const long long cps = (nch + KF_PF_SEG - 1) / KF_PF_SEG;              /* chunks per segment */
    const long long c_begin = sg * cps < nch ? sg * cps : nch;
    const long long c_end = c_begin + cps < nch ? c_begin + cps : nch;
    const int last = nch > 0 ? (int)((nch - 1) / cps) : 0;                /* segment of the last chunk */
#if KF_PF_SEG > 1
    const int sr = sg;  /* KF_MUTANT_SEG_BOUNDARY */
    const float *s_in = kf_pf_segws(p, n, hv, sr) + KF_PF_SEG_SS;
#endif

    /* the state tiles of this warp, fp32 accumulators */
    float st[KF_PF_NSW][4];
#pragma unroll
    for (int s = 0; s < KF_PF_NSW; ++s) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            int kk, vv;
            kf_pf_st_kv(warp, g, c4, s, r, kk, vv);
            if (MODE == 1)
                st[s][r] = ident && kk == v0 + vv ? 1.f : 0.f;
#if KF_PF_SEG > 1
            else
                st[s][r] = s_in[kk * KF_PF_V + v0 + vv];
#else
            else
                st[s][r] = p.h0 ? p.h0[kf_kda_h0_off(p, n, hv, kk, v0 + vv)] : 0.f;
#endif
        }
    }

    const long long vb = kf_pf_vbase(p, n);
    const bool fetch_u = !(MODE == 1 && ident);      /* the identity columns have U = 0 */
#if !KF_PF_FUSED
    if (!fetch_u) {                                  /* zero U in both buffers once; never fetched */
        for (int e = tid; e < KF_PF_C * KF_PF_VS; e += KF_PF_THREADS)
            for (int b = 0; b < KF_PF_NBUF; ++b)
                ((kf_u16 *)(st_smem + KF_PF_SM_B0 + b * KF_PF_SM_BUF + KF_PF_BO_U))[e] = 0;
    }
    if (c_begin < c_end)
        kf_pf_fetch((const char *)p.ws + ((vb + c_begin) * p.hv_heads + hv) * (long long)KF_PF_SLOT,
                    st_smem + KF_PF_SM_B0 + (int)(c_begin & 1) * KF_PF_SM_BUF, v0, fetch_u);
#endif
    for (long long ch = c_begin; ch < c_end; ++ch) {
        const int cc = (int)(len - ch * KF_PF_C < KF_PF_C ? len - ch * KF_PF_C : KF_PF_C);
        char *bb = st_smem + KF_PF_SM_B0 + (KF_PF_NBUF > 1 ? (int)(ch & 1) : 0) * KF_PF_SM_BUF;
        kf_u16 *Wc = (kf_u16 *)(bb + KF_PF_BO_W);
        kf_u16 *Qc = (kf_u16 *)(bb + KF_PF_BO_Q);
        kf_u16 *KdT = (kf_u16 *)(bb + KF_PF_BO_KD);
        kf_u16 *Ac = (kf_u16 *)(bb + KF_PF_BO_A);
        kf_u16 *Uc = (kf_u16 *)(bb + KF_PF_BO_U);
        float *gl = (float *)(bb + KF_PF_BO_GL);
        /* S^T (bf16) for this chunk's products; the previous chunk's readers are past its last barrier */
#pragma unroll
        for (int s = 0; s < KF_PF_NSW; ++s) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                int kk, vv;
                kf_pf_st_kv(warp, g, c4, s, r, kk, vv);
                Sb[vv * KF_PF_LDK + kk] = kf_kda_bf16(st[s][r]);
            }
        }
#if KF_PF_FUSED
        {
            kf_pf_sink s;
            s.w = Wc;   s.ldw = KF_PF_LDK;
            s.qg = Qc;  s.ldq = KF_PF_LDK;
            s.kdt = KdT; s.ldkd = KF_PF_LDC;
            s.a = Ac;   s.lda = KF_PF_LDC;
            s.u = Uc;   s.ldu = KF_PF_VS;
            s.gl = gl;
            s.u0 = v0;
            s.un = KF_PF_VS;
#if KF_PF_PREP
            kf_pf_prepare_tc<false>(p, n, hv, bos + ch * KF_PF_C, cc, st_smem + KF_PF_SM_SCRATCH, s);
#else
            kf_pf_prepare(p, n, hv, bos + ch * KF_PF_C, cc, (float *)(st_smem + KF_PF_SM_SCRATCH), s);
#endif
        }
#else
        /* the next chunk's copy goes into the other buffer, whose readers passed the last barrier */
        if (ch + 1 < c_end) {
            const long long nx = vb + ch + 1;  /* KF_MUTANT_CHUNK_BOUNDARY */
            kf_pf_fetch((const char *)p.ws + (nx * p.hv_heads + hv) * (long long)KF_PF_SLOT,
                        st_smem + KF_PF_SM_B0 + (int)((ch + 1) & 1) * KF_PF_SM_BUF, v0, fetch_u);
            kf_cp_async_wait<1>();
        } else {
            kf_cp_async_wait<0>();
        }
        __syncthreads();
#endif

        /* P1: V' = U - W S  ([C][VS], inner K) -> V'^T bf16 */
        for (int t = warp; t < (KF_PF_C / 16) * (KF_PF_VS / 8); t += KF_PF_W) {
            const int m0 = (t / (KF_PF_VS / 8)) * 16, n0 = (t % (KF_PF_VS / 8)) * 8;
            float d[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
            for (int k0 = 0; k0 < KF_PF_K; k0 += 16)
                kf_pf_mma(d, Wc, KF_PF_LDK, m0, k0, Sb, KF_PF_LDK, n0);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = m0 + g + ((r & 2) ? 8 : 0), vv = n0 + 2 * c4 + (r & 1);
                VpT[vv * KF_PF_LDC + i] = kf_kda_bf16(kf_to_float(Uc[i * KF_PF_VS + vv]) - d[r]);
            }
        }
        __syncthreads();

        /* P2: O = Qg S + A V'  ([C][VS], inner K then C) -> o */
        for (int t = warp; MODE == 0 && t < (KF_PF_C / 16) * (KF_PF_VS / 8); t += KF_PF_W) {
            const int m0 = (t / (KF_PF_VS / 8)) * 16, n0 = (t % (KF_PF_VS / 8)) * 8;
            float d[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
            for (int k0 = 0; k0 < KF_PF_K; k0 += 16)
                kf_pf_mma(d, Qc, KF_PF_LDK, m0, k0, Sb, KF_PF_LDK, n0);
#pragma unroll
            for (int k0 = 0; k0 < KF_PF_C; k0 += 16)
                kf_pf_mma(d, Ac, KF_PF_LDC, m0, k0, VpT, KF_PF_LDC, n0);
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = m0 + g + 8 * hr;
                if (i < cc) {
                    kf_u16 *o = (kf_u16 *)p.o + (p.cu_seqlens ? 0 : (long long)n * p.o_sb)
                                + (bos + ch * KF_PF_C + i) * p.o_st + (long long)hv * p.o_sh + v0 + n0 + 2 * c4;
                    *(kf_u32 *)o = kf_pack2(d[2 * hr], d[2 * hr + 1]);
                }
            }
        }

        /* P3: S <- diag(gl) S + KdT V'  (tr 0: [K][VS] = KdT[K][C] V'; tr 1: [VS][K] = V'^T KdT^T) */
#pragma unroll
        for (int s = 0; s < KF_PF_NSW; ++s) {
            const int t = warp + KF_PF_W * s, m0 = (t / KF_PF_SNT) * 16, n0 = (t % KF_PF_SNT) * 8;
            float dec[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
#if KF_PF_TR
                dec[r] = gl[n0 + 2 * c4 + (r & 1)];
#else
                dec[r] = gl[m0 + g + ((r & 2) ? 8 : 0)];
#endif
                if (KF_KDA_DECAY_FIRST)
                    st[s][r] *= dec[r];  /* KF_MUTANT_NO_DECAY */
            }
#pragma unroll
            for (int k0 = 0; k0 < KF_PF_C; k0 += 16) {
#if KF_PF_TR
                kf_pf_mma(st[s], VpT, KF_PF_LDC, m0, k0, KdT, KF_PF_LDC, n0);
#else
                kf_pf_mma(st[s], KdT, KF_PF_LDC, m0, k0, VpT, KF_PF_LDC, n0);
#endif
            }
            if (!KF_KDA_DECAY_FIRST) {
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    st[s][r] *= dec[r];  /* KF_MUTANT_NO_DECAY */
            }
        }
        __syncthreads();                          /* Sb and the chunk buffers are free again */
    }

    (void)last;
    if (MODE == 1 || (p.ht && (KF_PF_SEG == 1 || sg == last))) {
#pragma unroll
        for (int s = 0; s < KF_PF_NSW; ++s) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                int kk, vv;
                kf_pf_st_kv(warp, g, c4, s, r, kk, vv);
#if KF_PF_SEG > 1
                if (MODE == 1) {
                    float *o = kf_pf_segws(p, n, hv, sg);
                    if (ident)
                        o[KF_PF_SEG_MS + kk * KF_PF_K + v0 + vv] = st[s][r];
                    else
                        o[KF_PF_SEG_CS + kk * KF_PF_V + v0 + vv] = st[s][r];
                    continue;
                }
#endif
                p.ht[kf_kda_ht_off(p, n, hv, kk, v0 + vv)] = st[s][r];
            }
        }
    }
}

/* grid (V / VS, hv_heads, nseq * seg): block (x, hv, n * seg + sg) */
extern "C" __global__ void __launch_bounds__(KF_PF_THREADS, 1)
kf_kda_state(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __align__(16) char st_smem[];
    kf_pf_state_body<0>(p, st_smem, blockIdx.x * KF_PF_VS, false, blockIdx.y, blockIdx.z / KF_PF_SEG, blockIdx.z % KF_PF_SEG);
}

#if KF_PF_SEG > 1
/* grid (V / VS + K / VS, hv_heads, nseq * seg): x < V / VS: the offset c of segment sg (value
 * columns x * VS..), else the transition M (identity columns (x - V / VS) * VS..). The last
 * segment's operator is never used. */
extern "C" __global__ void __launch_bounds__(KF_PF_THREADS, 1)
kf_kda_segop(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __align__(16) char st_smem[];
    const int sg = blockIdx.z % KF_PF_SEG;
    if (sg == KF_PF_SEG - 1)
        return;
    const bool ident = blockIdx.x >= KF_PF_V / KF_PF_VS;
    const int v0 = (ident ? blockIdx.x - KF_PF_V / KF_PF_VS : blockIdx.x) * KF_PF_VS;
    kf_pf_state_body<1>(p, st_smem, v0, ident, blockIdx.y, blockIdx.z / KF_PF_SEG, sg);
}

/* grid (V / VS, hv_heads, nseq), KF_PF_THREADS threads, shared (K * K + K * VS) floats: the start
 * state of every segment, S_0 = h0, S_{s+1} = M_s S_s + c_s, in fp32, into the ss slots. */
extern "C" __global__ void __launch_bounds__(KF_PF_THREADS, 1)
kf_kda_segcomb(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __align__(16) float sc_smem[];
    float *M = sc_smem, *S = sc_smem + KF_PF_K * KF_PF_K;     /* M [K][K], S [K][VS] */
    const int v0 = blockIdx.x * KF_PF_VS, hv = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
    constexpr int E = KF_PF_K * KF_PF_VS / KF_PF_THREADS;        /* state elements per thread */
    for (int e = tid; e < KF_PF_K * KF_PF_VS; e += KF_PF_THREADS) {
        const int kk = e / KF_PF_VS, vv = e % KF_PF_VS;
        const float x = p.h0 ? p.h0[kf_kda_h0_off(p, n, hv, kk, v0 + vv)] : 0.f;
        S[e] = x;
        kf_pf_segws(p, n, hv, 0)[KF_PF_SEG_SS + kk * KF_PF_V + v0 + vv] = x;
    }
    for (int sg = 0; sg + 1 < KF_PF_SEG; ++sg) {
        const float *seg = kf_pf_segws(p, n, hv, sg);
        __syncthreads();                                          /* S written, M free */
        for (int e = tid; e < KF_PF_K * KF_PF_K / 4; e += KF_PF_THREADS)
            ((float4 *)M)[e] = ((const float4 *)(seg + KF_PF_SEG_MS))[e];
        __syncthreads();
        float acc[E];
#pragma unroll
        for (int q = 0; q < E; ++q) {
            const int e = tid + q * KF_PF_THREADS, kk = e / KF_PF_VS, vv = e % KF_PF_VS;
            float a = seg[KF_PF_SEG_CS + kk * KF_PF_V + v0 + vv];  /* KF_MUTANT_SEG_FIXUP */
#pragma unroll 8
            for (int j = 0; j < KF_PF_K; ++j)
                a += M[kk * KF_PF_K + j] * S[j * KF_PF_VS + vv];
            acc[q] = a;
        }
        __syncthreads();                                          /* every read of S is done */
        float *nxt = kf_pf_segws(p, n, hv, sg + 1) + KF_PF_SEG_SS;
#pragma unroll
        for (int q = 0; q < E; ++q) {
            const int e = tid + q * KF_PF_THREADS, kk = e / KF_PF_VS, vv = e % KF_PF_VS;
            S[e] = acc[q];
            nxt[kk * KF_PF_V + v0 + vv] = acc[q];
        }
    }
}
#endif

#endif
