/* attn/decode_direct.cuh: GQA decode with the keys as the MMA's rows (S^T = K Q^T, O^T = V^T P^T), K and V loaded from global memory straight into fragment registers (attn_decode impl=direct) */
#ifndef KF_ATTN_DECODE_DIRECT_CUH
#define KF_ATTN_DECODE_DIRECT_CUH

/*
 * Compile-time constants (defined by the template): KF_BF16, KF_D head dim (64, 128, 256), KF_G = hq / hkv,
 * KF_CAUSAL, KF_TM packed rows a CTA (8 or 16 MMA columns; 4: FP8 at bf16, see KF_TC), KF_W warps, KF_KS 16-key
 * tiles a warp step (KT = 16 KS keys), KF_BN = KT (the split granularity),
 * KF_PF steps of loads a warp has issued (1: a step's loads, then its math; 2: the next step's loads issued before
 * this step's math), KF_FWD_NAME; the model features of common/attn_features.cuh.
 *
 * Why this shape. A decode CTA of attn/fwd.cuh puts G x Sq packed query rows (4 at 32/8) in the 16 rows of the
 * MMA, so 3/4 of every product and of the softmax is padding, and each 16 bytes of K/V costs a cp.async with its
 * own address arithmetic and a shared-memory round trip. Here the keys are the MMA's M (16 a tile) and the packed
 * query rows its N (8 a tile: 4 of 8 real at 32/8), and each lane loads the bytes its fragments need with whole
 * 16-byte loads: a quad of lanes reads one 128-byte row of K, eight lanes one row of V, so every warp load is whole
 * lines.
 *
 * Tiling. Packed row pr = i * G + g (query row i, head h0 + g), as attn/fwd.cuh's decode; grid (splits,
 * hkv * cdiv(G*sq, TM), b). The CTA owns TM packed rows (its "columns") and one split's key range, in steps of KT
 * keys; warp w takes steps w, w + W, w + 2W, ... with its own running max, sum and O^T, merged through shared
 * memory in warp order at the end (the same result whatever the scheduling).
 *
 * Fragments (mma.sync m16n8k16 row.col, g = lane / 4, t = lane % 4):
 *   S^T = K Q^T: A = 16 keys x 16 d of K, B = Q^T. The order of d inside a dot product is free, so lane t takes
 *     d t*D/4 .. t*D/4 + D/4 - 1 of its keys g and g + 8 (one contiguous run): k-slice kk's slots (2t, 2t+1 |
 *     2t+8, 2t+9) are d t*D/4 + 4kk + (0, 1 | 2, 3), and Q's B fragments are read in the same order.
 *   O^T = V^T P^T: A = 16 d x 16 keys of V^T, B = P^T. The order of O^T's rows is free too (undone at the
 *     merge): d-tile dt's rows g and g + 8 are d g*D/8 + 2dt and + 1, so lane g takes d g*D/8 .. + D/8 - 1 of its
 *     keys 2t, 2t+1, 2t+8, 2t+9 (one contiguous run each); the key pairs of a slot come from byte (FP8) or half
 *     (16-bit) permutes.
 *   P^T: S^T's accumulators (key g | g+8, columns 2t, 2t+1), packed to 16 bits, are two 8 x 8 matrices with the
 *     keys as rows; movmatrix.trans turns each into P^T's B fragment (column g, keys 2t, 2t+1).
 * FP8 (KF_KV8; sm_89+): the e4m3 bytes are the operands of the e4m3 MMA (m16n8k32), not decoded at all. K's raw
 *   words are S^T's A fragments (k-slice kk of 32 d: slots 4t..4t+3 | 16+4t.. are d t*D/4 + 8kk + 0..3 | 4..7).
 *   Q, scaled by 2^e so its largest finite |q| lands in [128, 256), is held as KF_QT e4m3 terms q = t0 + t1 (+ t2),
 *   each the nearest e4m3 of what the others leave: two terms are exact for a bf16 q >= 2^-2 (its 8 bits are
 *   4 + 4), three for an fp16 q; the rest is below 2^-10 absolute against the largest (128..256), so a score is
 *   the bf16 q's to fp32 rounding. P is scaled by 256 and held as two e4m3 terms (what bf16 P would keep). V^T's
 *   A fragments take keys (2t, 2t+1, 2t+8, 2t+9) of each 16-key tile as the k slots 4t..4t+3 (tile 0) and 16+4t..
 *   (tile 1), the keys P^T's B fragments hold after the movmatrix: a 4 x 4 byte transpose (8 permutes) per 16
 *   bytes of V, against ~2 integer operations a byte for the fp16 rule's decode (bench/NOTES.md, session 13).
 *   Each step's O^T products start from zero and are added to O^T (rescaled) in fp32, so no long chain of e4m3
 *   MMAs accumulates into one register. KF_TC (KF_TM 4, bf16): the two terms of Q are the MMA's columns instead of
 *   two MMAs (columns 0..3 the first term of packed rows 0..3, 4..7 the second), a score the sum of its two
 *   columns (one shuffle), and so are P's two terms (lanes t < 2 hold the first, t >= 2 the second), O a row's
 *   two columns summed at the end: half the MMAs where G x Sq <= 4 (32/8 decode) would leave half the columns
 *   empty anyway. A 0x7f / 0xff byte at a key the kernel reads is e4m3's NaN here (the
 *   other kernels' rule reads +-480); none is read past a length. k_scale * 2^-e joins the score scale, v_scale /
 *   256 the epilogue.
 *
 * Masking. Loads of keys at or past kend return zeros (no byte past the length is read, so NaN there cannot leak,
 * and no page past the length is looked up); scores of those keys, of keys past a column's causal bound and
 * (KF_WIN) before its window are -inf; only steps that reach past the first masked key pay for the mask. Steps
 * wholly past the tile's last causal key are never visited. A column with no visible key keeps max -inf, sum 0 and
 * writes o = 0, lse = -inf (with a sink: lse = the sink).
 *
 * Paged K/V: page lookups are made one step ahead of the loads that use them (lane L looks up row L of a step, the
 * loads take each row's page and offset by shuffle), so a load never waits for its block-table entry.
 *
 * Mutation-test hooks: the lines marked KF_MUTANT_ are the ones of attn/fwd.cuh (the suite plants the same bugs).
 */
#define KF_CAP_BEFORE_MAX 1 // KF_MUTANT_CAPORDER
#define KF_KT (16 * KF_KS)
#if KF_BN != KF_KT                                     /* KF_BN (the template's): the split granularity */
#error "kforge attn decode_direct: KF_BN must be the step's keys (16 KF_KS)"
#endif
#define KF_TC (KF_TM == 4)                             /* Q's and P's two e4m3 terms as the MMA's columns */
#define KF_NC (KF_TC ? 8 : KF_TM)                      /* MMA columns a CTA */
#define KF_NQ (KF_NC / 8)
#define KF_DT (KF_D / 16)
#define KF_THREADS (32 * KF_W)
#define KF_OPAD (KF_D + 4)
#if KF_KV8
#define KF_KWD (KF_D / 16)                             /* 32-bit words of one K row a lane loads (D/4 bytes) */
#define KF_VWD (KF_D / 32)                             /* ... of one V row (D/8 bytes) */
#define KF_EB 1
#else
#define KF_KWD (KF_D / 8)
#define KF_VWD (KF_D / 16)
#define KF_EB 2
#endif

#if (KF_TM != 4 && KF_TM != 8 && KF_TM != 16) || (KF_KS != 1 && KF_KS != 2) || (KF_PF != 1 && KF_PF != 2) \
    || KF_D % 64 != 0 || (KF_TC && !(KF_KV8 && KF_BF16))
#error "kforge attn decode_direct: invalid configuration"
#endif
#if KF_KV8
#if KF_KS != 2
#error "kforge attn decode_direct: FP8 K/V takes 32-key steps (the e4m3 MMA's k)"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "kforge attn decode_direct: FP8 K/V needs the e4m3 MMA (sm_89 or newer)"
#endif
#define KF_QT (KF_BF16 ? 2 : 3)                         /* e4m3 terms of Q */
#define KF_QM (KF_TC ? 1 : KF_QT)                      /* MMAs a product (KF_TC: the terms are columns) */
#define KF_DK (KF_D / 32)                              /* 32-d k-slices of S^T */
#endif

/* n 32-bit words from global memory (16- or 8-byte loads, non-coherent, not kept in L1), zeros when !ok */
template <int N> __device__ __forceinline__ void kf_dd_ldg(kf_u32 (&w)[N], const unsigned char *src, bool ok)
{
    static_assert(N % 2 == 0, "kf_dd_ldg: whole 8-byte loads");
    const int on = ok;
    if (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i)
            asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n"
                         " mov.b32 %3, 0;\n @q ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
                         : "=r"(w[4 * i]), "=r"(w[4 * i + 1]), "=r"(w[4 * i + 2]), "=r"(w[4 * i + 3])
                         : "l"(src + 16 * i), "r"(on));
    } else {
#pragma unroll
        for (int i = 0; i < N / 2; ++i)
            asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %3, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n"
                         " @q ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n}\n"
                         : "=r"(w[2 * i]), "=r"(w[2 * i + 1]) : "l"(src + 8 * i), "r"(on));
    }
}

/* The same, every byte read (a step wholly before kend): no predicate, no zero fill */
template <int N> __device__ __forceinline__ void kf_dd_ldg_all(kf_u32 (&w)[N], const unsigned char *src)
{
    static_assert(N % 2 == 0, "kf_dd_ldg_all: whole 8-byte loads");
    if (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(w[4 * i]), "=r"(w[4 * i + 1]), "=r"(w[4 * i + 2]), "=r"(w[4 * i + 3])
                         : "l"(src + 16 * i));
    } else {
#pragma unroll
        for (int i = 0; i < N / 2; ++i)
            asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
                         : "=r"(w[2 * i]), "=r"(w[2 * i + 1]) : "l"(src + 8 * i));
    }
}

/* The transpose of an 8 x 8 matrix of 16-bit pairs held one row a lane quad (movmatrix) */
__device__ __forceinline__ kf_u32 kf_dd_movt(kf_u32 a)
{
    kf_u32 r;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(a));
    return r;
}

__device__ __forceinline__ kf_u32 kf_dd_prmt(kf_u32 a, kf_u32 b, kf_u32 sel)
{
    kf_u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

#if KF_KV8
/* One 16-key tile's P^T (scaled by 256) as the e4m3 terms hi + lo of the B words: bytes (keys 2t, 2t+1, 2t+8,
 * 2t+9) of column g from S^T's accumulators (keys g | g+8, columns 2t, 2t+1), by fp16 and movmatrix */
__device__ __forceinline__ void kf_dd_p8(const float s[4], kf_u32 &hi, kf_u32 &lo)
{
    const kf_u32 m0 = kf_dd_movt(kf_pack2_h(256.f * s[0], 256.f * s[1]));   /* keys 2t, 2t+1 of column g */
    const kf_u32 m1 = kf_dd_movt(kf_pack2_h(256.f * s[2], 256.f * s[3]));   /* keys 2t+8, 2t+9 */
    const kf_u32 h0 = kf_f16x2_e4m3x2(m0), h1 = kf_f16x2_e4m3x2(m1);
    hi = h0 | (h1 << 16);
    const kf_u32 l0 = kf_f16x2_e4m3x2(kf_hsub2(m0, kf_e4m3x2_f16x2(h0)));
    lo = l0 | (kf_f16x2_e4m3x2(kf_hsub2(m1, kf_e4m3x2_f16x2(h1))) << 16);
}
/* KF_TC: the same tile's B word of one term, the term chosen by the lane's columns (lo: columns 4..7): the term as
 * fp16 (exact) before the movmatrix, its e4m3 bytes after */
__device__ __forceinline__ kf_u32 kf_dd_p8_tc(const float s[4], bool lo)
{
    const kf_u32 m0 = kf_pack2_h(256.f * s[0], 256.f * s[1]), m1 = kf_pack2_h(256.f * s[2], 256.f * s[3]);
    const kf_u32 h0 = kf_e4m3x2_f16x2(kf_f16x2_e4m3x2(m0)), h1 = kf_e4m3x2_f16x2(kf_f16x2_e4m3x2(m1));
    const kf_u32 x0 = kf_dd_movt(lo ? kf_hsub2(m0, h0) : h0), x1 = kf_dd_movt(lo ? kf_hsub2(m1, h1) : h1);
    return kf_f16x2_e4m3x2(x0) | (kf_f16x2_e4m3x2(x1) << 16);
}
#else
#define KF_DD_MMA kf_mma16816
#define KF_DD_PACK kf_pack2
#endif

/* The raw K/V words of one warp step: K rows (g, g + 8) and V rows (2t, 2t+1, 2t+8, 2t+9) of each 16-key tile */
struct kf_dd_raw {
    kf_u32 k[KF_KS][2][KF_KWD];
    kf_u32 v[KF_KS][4][KF_VWD];
};

/* The page of one key row (paged K/V): block-table entry and row in the page; 0, 0 past kend */
struct kf_dd_page {
    int pg, in;
};

extern "C" __global__ void __launch_bounds__(KF_THREADS, 1)
KF_FWD_NAME(const kf_attn_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __attribute__((aligned(128))) unsigned char kf_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z;

    /* ---- this CTA's packed rows and key range (attn/decode_rows.cuh) */
    kf_dec_rows x;
    if (!kf_dec_rows_of(p, x))
        return;
    const int h = x.h, kvh = x.kvh, r0 = x.r0, n_q = x.n_q, k0 = x.k0, row0 = x.row0;
    const int kbeg = x.kbeg, kend = x.kend, kstop = x.kstop, nsplit = p.splits, split = blockIdx.x;
    const int nsteps = kstop > kbeg ? (kstop - kbeg + KF_KT - 1) / KF_KT : 0;

    /* ---- global bases (bytes) */
    const kf_u16 *qg = (const kf_u16 *)p.q + (p.cu_seqlens_q ? 0 : (long long)b * p.q_sb) + (long long)r0 * p.q_ss;
    const int *bt = p.block_table ? p.block_table + (long long)b * p.bt_sb : 0;
    const long long kvb = p.cu_seqlens_k ? 0 : (long long)b;
    const unsigned char *kg = (const unsigned char *)p.k
                              + KF_EB * ((long long)kvh * p.k_sh + (bt ? 0 : kvb * p.k_sb + (long long)k0 * p.k_ss));
    const unsigned char *vg = (const unsigned char *)p.v
                              + KF_EB * ((long long)kvh * p.v_sh + (bt ? 0 : kvb * p.v_sb + (long long)k0 * p.v_ss));
    const long long kss = KF_EB * p.k_ss, vss = KF_EB * p.v_ss, ksb = KF_EB * p.k_sb, vsb = KF_EB * p.v_sb;
    kg += t * (KF_D / 4) * KF_EB;                         /* this lane's run of each K row */
    vg += g * (KF_D / 8) * KF_EB;                         /* ... of each V row */

    /* ---- Q^T's B fragments: column nq*8 + g, d t*D/4 + 4kk + (0, 1 | 2, 3) (FP8: the e4m3 terms, d t*D/4 + 8kk +
     * 0..3 | 4..7) */
    int qi[KF_NQ][2];                                     /* query row of this lane's accumulator columns 2t, 2t+1 */
#pragma unroll
    for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
        for (int e = 0; e < 2; ++e)
            qi[nq][e] = (row0 + (KF_TC ? (2 * t + e) & 3 : nq * 8 + 2 * t + e)) / KF_G;
    auto load_q = [&](kf_u32 (&w)[KF_D / 8], int nq) {  /* this lane's run of d of column nq*8 + g */
        const int pr = row0 + (KF_TC ? g & 3 : nq * 8 + g), i = pr / KF_G, hh = h + pr % KF_G;
        kf_dd_ldg(w, (const unsigned char *)(qg + (long long)i * p.q_ss + (long long)hh * p.q_sh + t * (KF_D / 4)),
                  i < n_q);
    };
#if KF_KV8
    kf_u32 qb[KF_QM][KF_NQ][KF_DK][2];
    float qinv;                                           /* q = the terms' sum * 2^-e */
    {
        float qf[KF_NQ][KF_D / 4];
        float m = 0.f;                                    /* the largest finite |q| of the tile (every warp holds it) */
#pragma unroll
        for (int nq = 0; nq < KF_NQ; ++nq) {
            kf_u32 w[KF_D / 8];
            load_q(w, nq);
#pragma unroll
            for (int j = 0; j < KF_D / 8; ++j) {
                qf[nq][2 * j] = kf_to_float((kf_u16)(w[j] & 0xffffu));
                qf[nq][2 * j + 1] = kf_to_float((kf_u16)(w[j] >> 16));
                const float a0 = fabsf(qf[nq][2 * j]), a1 = fabsf(qf[nq][2 * j + 1]);
                m = fmaxf(m, fmaxf(a0 <= 3.4028235e38f ? a0 : 0.f, a1 <= 3.4028235e38f ? a1 : 0.f));
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const int qe = min(126, 7 - max(-126, (int)(__float_as_uint(m) >> 23) - 127));   /* m * 2^e in [128, 256) */
        const float qsc = __uint_as_float((kf_u32)(qe + 127) << 23);
        qinv = __uint_as_float((kf_u32)(127 - qe) << 23);
#pragma unroll
        for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
            for (int j = 0; j < KF_D / 4; ++j)
                qf[nq][j] *= qsc;                         /* exact: a power of two, in range */
#pragma unroll
        for (int tt = 0; tt < KF_QT; ++tt)
#pragma unroll
            for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
                for (int j = 0; j < KF_D / 16; ++j) {     /* word j: d 4j .. 4j + 3 of the run */
                    float *x = &qf[nq][4 * j];
                    const kf_u32 wd = kf_f32x4_e4m3(x[0], x[1], x[2], x[3]);
                    if (KF_TC ? tt == (g >> 2) : true)    /* KF_TC: columns 0..3 the first term, 4..7 the second */
                        qb[KF_TC ? 0 : tt][nq][j / 2][j % 2] = wd;
                    if (tt + 1 < KF_QT)
#pragma unroll
                        for (int c = 0; c < 4; ++c)       /* what the term leaves (exact in fp32) */
                            x[c] -= 256.f * kf_e4m3_f32((wd >> (8 * c)) & 0xffu);
                }
    }
#else
    kf_u32 qb[KF_NQ][KF_DT][2];
#pragma unroll
    for (int nq = 0; nq < KF_NQ; ++nq) {
        kf_u32 w[KF_D / 8];
        load_q(w, nq);
#pragma unroll
        for (int kk = 0; kk < KF_DT; ++kk)
            qb[nq][kk][0] = w[2 * kk], qb[nq][kk][1] = w[2 * kk + 1];
    }
#endif

#if KF_KV8
    const int sh8 = kvh; // KF_MUTANT_FP8HEAD
    /* scores = fragment * k_scale * 2^-e (q scaled by 2^e); O = fragment * v_scale / 256 (P scaled by 256) */
    const float kq = p.k_scale[sh8] * qinv, vq = p.v_scale[sh8] * (1.f / 256.f); // KF_MUTANT_QSCALE
#else
    const float kq = 1.f;
#endif
    KF_SCORE_SCALES(p, kq);   /* sl2, snat (capm): common/attn_features.cuh */

    float o[KF_DT][KF_NQ][4];
    float rmax[KF_NQ][2], rsum[KF_NQ][2];
#pragma unroll
    for (int nq = 0; nq < KF_NQ; ++nq) {
#pragma unroll
        for (int dt = 0; dt < KF_DT; ++dt)
            o[dt][nq][0] = o[dt][nq][1] = o[dt][nq][2] = o[dt][nq][3] = 0.f;
        rmax[nq][0] = rmax[nq][1] = KF_NEG_INF;
        rsum[nq][0] = rsum[nq][1] = 0.f;
    }

    /* ---- paged K/V: lane L looks up row L % (16 KS) of a step one step ahead of its loads */
    const int ps = p.page_size;
    kf_dd_page pgx = {0, 0};
    auto lookup = [&](int n) {
        const int j = kbeg + n * KF_KT + lane % KF_KT;
        pgx.pg = 0, pgx.in = 0;
        if (n < nsteps && j < kend) {
            const int q = j / ps;
            pgx.pg = bt[q];
            pgx.in = j - q * ps;
        }
    };
    if (bt)
        lookup(warp);

    /* ---- one step's loads: keys j0 .. j0 + KT - 1, zeros from kend on. Instantiated for paged and contiguous
     * K/V (pg), and for a step wholly before kend (every load unpredicated) or not. */
    auto load = [&](kf_dd_raw &r, int n, auto pg) {
        constexpr bool PG = decltype(pg)::value;
        const int j0 = kbeg + n * KF_KT;
        long long roff = 0, rvoff = 0;
        if constexpr (PG) {
            roff = (long long)pgx.pg * ksb + (long long)pgx.in * kss;   /* row lane % KT */
            rvoff = (long long)pgx.pg * vsb + (long long)pgx.in * vss;
        }
        const unsigned char *ks0 = kg + (PG ? 0 : (long long)j0 * kss), *vs0 = vg + (PG ? 0 : (long long)j0 * vss);
        auto rows = [&](auto whole) {
            constexpr bool ALL = decltype(whole)::value;
            /* row rr of the step into w: through the block table (off: the lanes' page offsets) or from s0 */
            auto row = [&](auto &w, const unsigned char *pool, const unsigned char *s0, long long off, long long stride,
                           int rr) {
                const unsigned char *src = PG ? pool + (long long)__shfl_sync(0xffffffffu, off, rr)
                                              : s0 + (long long)rr * stride;
                if constexpr (ALL)
                    kf_dd_ldg_all(w, src);
                else
                    kf_dd_ldg(w, src, j0 + rr < kend);
            };
#pragma unroll
            for (int ks = 0; ks < KF_KS; ++ks) {
#pragma unroll
                for (int x = 0; x < 2; ++x)               /* K rows g, g + 8 */
                    row(r.k[ks][x], kg, ks0, roff, kss, ks * 16 + g + 8 * x);
#pragma unroll
                for (int x = 0; x < 4; ++x)               /* V rows 2t, 2t+1, 2t+8, 2t+9 */
                    row(r.v[ks][x], vg, vs0, rvoff, vss, ks * 16 + 2 * t + (x & 1) + 8 * (x >> 1));
            }
        };
        if (j0 + KF_KT <= kend)
            rows(kf_dec_flag<true>());
        else
            rows(kf_dec_flag<false>());
        if constexpr (PG)
            lookup(n + KF_W);                             /* the page of this warp's next step */
    };

    /* ---- one step's math */
    auto step = [&](const kf_dd_raw &r, int n) {
        const int j0 = kbeg + n * KF_KT;
        float s[KF_KS][KF_NQ][4];
#pragma unroll
        for (int ks = 0; ks < KF_KS; ++ks)
#pragma unroll
            for (int nq = 0; nq < KF_NQ; ++nq)
                s[ks][nq][0] = s[ks][nq][1] = s[ks][nq][2] = s[ks][nq][3] = 0.f;
        /* S^T = K Q^T (FP8: K's raw words are the A fragments, one e4m3 MMA a term of Q) */
#pragma unroll
        for (int ks = 0; ks < KF_KS; ++ks)
#if KF_KV8
#pragma unroll
            for (int kk = 0; kk < KF_DK; ++kk) {
                const kf_u32 a[4] = {r.k[ks][0][2 * kk], r.k[ks][1][2 * kk], r.k[ks][0][2 * kk + 1],
                                     r.k[ks][1][2 * kk + 1]};
#pragma unroll
                for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
                    for (int tt = 0; tt < KF_QM; ++tt)
                        kf_mma16832_e4m3(s[ks][nq], a, qb[tt][nq][kk][0], qb[tt][nq][kk][1]);
            }
#if KF_TC
        /* a row's score is its two columns' sum: c (lane t < 2) and c + 4 (lane t ^ 2), both lanes keep it */
#pragma unroll
        for (int ks = 0; ks < KF_KS; ++ks)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[ks][0][e] += __shfl_xor_sync(0xffffffffu, s[ks][0][e], 2);
#endif
#else
#pragma unroll
            for (int kk = 0; kk < KF_DT; ++kk) {
                kf_u32 a[4];
                a[0] = r.k[ks][0][2 * kk], a[2] = r.k[ks][0][2 * kk + 1];
                a[1] = r.k[ks][1][2 * kk], a[3] = r.k[ks][1][2 * kk + 1];
#pragma unroll
                for (int nq = 0; nq < KF_NQ; ++nq)
                    KF_DD_MMA(s[ks][nq], a, qb[nq][kk][0], qb[nq][kk][1]);
            }
#endif
#if KF_CAP && KF_CAP_BEFORE_MAX
#pragma unroll
        for (int ks = 0; ks < KF_KS; ++ks)
#pragma unroll
            for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    s[ks][nq][e] = kf_softcap(s[ks][nq][e], capm, p.softcap);
#endif
        /* mask: keys past the split / sequence end, and past each column's causal bound (before its window) */
        if (kf_dec_needs_mask(x, j0, KF_KT)) {
#pragma unroll
            for (int ks = 0; ks < KF_KS; ++ks)
#pragma unroll
                for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (kf_dec_hidden(x, j0 + ks * 16 + g + 8 * (e >> 1), qi[nq][e & 1]))
                            s[ks][nq][e] = KF_NEG_INF;
        }
        /* online softmax (base 2) per column: the max over the step's keys (lanes g), O^T and the sum rescaled
         * (FP8: O^T by the products' update below) */
        float corr[KF_NQ][2];
#pragma unroll
        for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float mx = rmax[nq][e];
#pragma unroll
                for (int ks = 0; ks < KF_KS; ++ks)
                    mx = fmaxf(mx, fmaxf(s[ks][nq][e], s[ks][nq][e + 2]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
#if KF_CAP && !KF_CAP_BEFORE_MAX
                /* the planted bug: the max taken over the raw scaled scores, the cap applied after it */
                mx = (mx == KF_NEG_INF) ? mx : mx * p.scale * kq;
#pragma unroll
                for (int ks = 0; ks < KF_KS; ++ks)
#pragma unroll
                    for (int x = e; x < 4; x += 2)
                        if (s[ks][nq][x] != KF_NEG_INF)
                            s[ks][nq][x] = kf_softcap(s[ks][nq][x], capm, p.softcap);
#endif
                const float mu = (mx == KF_NEG_INF) ? 0.f : mx * sl2;   /* no -inf - -inf */
                const float cr = kf_exp2(rmax[nq][e] * sl2 - mu);
                corr[nq][e] = cr;
                rmax[nq][e] = mx;
                float psum = 0.f;
#pragma unroll
                for (int ks = 0; ks < KF_KS; ++ks) {
                    s[ks][nq][e] = kf_exp2(s[ks][nq][e] * sl2 - mu);
                    s[ks][nq][e + 2] = kf_exp2(s[ks][nq][e + 2] * sl2 - mu);
                    psum += s[ks][nq][e] + s[ks][nq][e + 2];
                }
                rsum[nq][e] = rsum[nq][e] * cr + psum;         /* per-lane partial; reduced over g at the end */
#if !KF_KV8
#pragma unroll
                for (int dt = 0; dt < KF_DT; ++dt) {
                    o[dt][nq][e] *= cr;
                    o[dt][nq][e + 2] *= cr;
                }
#endif
            }
        /* O^T += V^T P^T */
#if KF_KV8
        /* P^T's B words (hi and lo terms; KF_TC: one word, the lanes of columns 4..7 holding the lo term): b0 tile
         * 0, b1 tile 1 */
        kf_u32 ph[KF_NQ][2], pl[KF_NQ][2];
#pragma unroll
        for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
#if KF_TC
                ph[nq][ks] = kf_dd_p8_tc(s[ks][nq], t >= 2), pl[nq][ks] = 0;
#else
                kf_dd_p8(s[ks][nq], ph[nq][ks], pl[nq][ks]);
#endif
#pragma unroll
        for (int q = 0; q < KF_VWD; ++q) {
            /* word q (d g*D/8 + 4q .. + 3) of V rows (2t, 2t+1, 2t+8, 2t+9) of each tile, transposed: vt[ks][c] holds
             * the four keys of d g*D/8 + 4q + c */
            kf_u32 vt[2][4];
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {
                const kf_u32 w[4] = {r.v[ks][0][q], r.v[ks][1][q], r.v[ks][2][q], r.v[ks][3][q]};
                kf_tr4x4(w, vt[ks]);
            }
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {             /* d-tile 2q + hf: rows g, g + 8 are d g*D/8 + 2dt, + 1 */
                const int dt = 2 * q + hf;
                const kf_u32 a[4] = {vt[0][2 * hf], vt[0][2 * hf + 1], vt[1][2 * hf], vt[1][2 * hf + 1]};
#pragma unroll
                for (int nq = 0; nq < KF_NQ; ++nq) {
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
                    kf_mma16832_e4m3(c, a, ph[nq][0], ph[nq][1]);
                    if (!KF_TC)
                        kf_mma16832_e4m3(c, a, pl[nq][0], pl[nq][1]);
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        o[dt][nq][e] = fmaf(o[dt][nq][e], corr[nq][e & 1], c[e]);
                }
            }
        }
#else
#pragma unroll
        for (int ks = 0; ks < KF_KS; ++ks) {
            kf_u32 pb[KF_NQ][2];
#pragma unroll
            for (int nq = 0; nq < KF_NQ; ++nq) {
                pb[nq][0] = kf_dd_movt(KF_DD_PACK(s[ks][nq][0], s[ks][nq][1]));   /* keys 2t, 2t+1 of column g */
                pb[nq][1] = kf_dd_movt(KF_DD_PACK(s[ks][nq][2], s[ks][nq][3]));   /* keys 2t+8, 2t+9 */
            }
#pragma unroll
            for (int dt = 0; dt < KF_DT; ++dt) {
                kf_u32 a[4];
                /* word dt of each V row: (d-row g, d-row g + 8) */
                a[0] = kf_dd_prmt(r.v[ks][0][dt], r.v[ks][1][dt], 0x5410u);
                a[1] = kf_dd_prmt(r.v[ks][0][dt], r.v[ks][1][dt], 0x7632u);
                a[2] = kf_dd_prmt(r.v[ks][2][dt], r.v[ks][3][dt], 0x5410u);
                a[3] = kf_dd_prmt(r.v[ks][2][dt], r.v[ks][3][dt], 0x7632u);
#pragma unroll
                for (int nq = 0; nq < KF_NQ; ++nq)
                    KF_DD_MMA(o[dt][nq], a, pb[nq][0], pb[nq][1]);
            }
        }
#endif
    };

    /* ---- key loop: this warp's steps warp, warp + W, ... (one instantiation for paged K/V, one for contiguous) */
    auto keys = [&](auto pg) {
        kf_dd_raw ra;
        int n = warp;
#if KF_PF == 1
        for (; n < nsteps; n += KF_W) {
            load(ra, n, pg);
            step(ra, n);
        }
#else
        kf_dd_raw rb;
        if (n < nsteps)
            load(ra, n, pg);
        for (; n < nsteps; n += 2 * KF_W) {
            if (n + KF_W < nsteps)
                load(rb, n + KF_W, pg);
            step(ra, n);
            if (n + KF_W >= nsteps)
                break;
            if (n + 2 * KF_W < nsteps)
                load(ra, n + 2 * KF_W, pg);
            step(rb, n + KF_W);
        }
#endif
    };
    if (bt)
        keys(kf_dec_flag<true>());
    else
        keys(kf_dec_flag<false>());

    /* ---- merge the warps (fixed order): M = max m_w, L = sum l_w 2^(m_w - M), O = sum O_w 2^(m_w - M) */
#pragma unroll
    for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            rsum[nq][e] += __shfl_xor_sync(0xffffffffu, rsum[nq][e], 4);
            rsum[nq][e] += __shfl_xor_sync(0xffffffffu, rsum[nq][e], 8);
            rsum[nq][e] += __shfl_xor_sync(0xffffffffu, rsum[nq][e], 16);
        }
    float *buf = (float *)kf_smem;                         /* [NC][OPAD] */
    float *smax = buf + KF_NC * KF_OPAD, *ssum = smax + KF_W * KF_NC, *cmax = ssum + KF_W * KF_NC, *csum = cmax + KF_NC;
    if (g == 0)
#pragma unroll
        for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                smax[warp * KF_NC + nq * 8 + 2 * t + e] = rmax[nq][e];
                ssum[warp * KF_NC + nq * 8 + 2 * t + e] = rsum[nq][e];
            }
    __syncthreads();
    if (tid < KF_NC) {
        float M = KF_NEG_INF;
        for (int w = 0; w < KF_W; ++w)
            M = fmaxf(M, smax[w * KF_NC + tid]);
        const float Ms = (M == KF_NEG_INF) ? 0.f : M * sl2;
        float L = 0.f;
        for (int w = 0; w < KF_W; ++w)
            L += ssum[w * KF_NC + tid] * kf_exp2(smax[w * KF_NC + tid] * sl2 - Ms);
        cmax[tid] = M;
        csum[tid] = L;
    }
    __syncthreads();
    float fac[KF_NQ][2];
#pragma unroll
    for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float M = cmax[nq * 8 + 2 * t + e];
            fac[nq][e] = kf_exp2(rmax[nq][e] * sl2 - ((M == KF_NEG_INF) ? 0.f : M * sl2));
        }
#pragma unroll 1
    for (int w = 0; w < KF_W; ++w) {
        if (warp == w) {
#pragma unroll
            for (int nq = 0; nq < KF_NQ; ++nq)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float *row = buf + (nq * 8 + 2 * t + e) * KF_OPAD + g * (KF_D / 8);
#pragma unroll
                    for (int dt = 0; dt < KF_DT; ++dt) {   /* O^T rows (dt, g | g + 8) are d g*D/8 + 2dt, + 1 */
                        float2 v = make_float2(o[dt][nq][e] * fac[nq][e], o[dt][nq][e + 2] * fac[nq][e]);
                        float2 *d = (float2 *)(row + 2 * dt);
                        if (w > 0) {
                            const float2 x = *d;
                            v.x += x.x;
                            v.y += x.y;
                        }
                        *d = v;
                    }
                }
        }
        __syncthreads();
    }

    /* ---- epilogue: O / sum -> o (or the split's fp32 partial), lse = max * scale + log(sum) */
    for (int idx = tid; idx < KF_TM * (KF_D / 4); idx += KF_THREADS) {
        const int col = idx / (KF_D / 4), c4 = (idx % (KF_D / 4)) * 4;
        const int pr = row0 + col, i = pr / KF_G, hh = h + pr % KF_G;
        if (i >= n_q)
            continue;
        const float l = csum[col];
        float lse;
#if KF_KV8
        const float inv = kf_attn_finish(p, cmax[col], l, snat, hh, nsplit, lse) * vq;
#else
        const float inv = kf_attn_finish(p, cmax[col], l, snat, hh, nsplit, lse);
#endif
        float4 v = *(const float4 *)(buf + col * KF_OPAD + c4);
#if KF_TC
        {   /* the row's two term columns (col, col + 4: the same max and sum) */
            const float4 u = *(const float4 *)(buf + (col + 4) * KF_OPAD + c4);
            v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
        }
#endif
        kf_dec_put4(p, b, r0 + i, hh, c4, v.x, v.y, v.z, v.w, inv, lse, split, nsplit);
    }
}

#endif
