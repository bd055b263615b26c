/* parts/decode.cuh: split-score decode (absorbed MLA, base + per-layer delta with a joint layer-group scan): packed G x Sq tiles, split-KV, paged KV */
#ifndef KF_PARTS_DECODE_CUH
#define KF_PARTS_DECODE_CUH

/*
 * Compile-time constants (defined by templates/attn_parts_decode.lua):
 *   KF_G = hq / hkv, KF_CAUSAL, KF_L layers, KF_TM packed rows per tile (per layer), KF_BN keys per block,
 *   KF_WN warps sharing a 16-row group (they split the block's keys for S and the value columns for O),
 *   KF_STAGES cp.async stages, KF_PS page size (0: contiguous caches), KF_DQ key columns of a layer
 *   (the sum of its key parts), KF_DQP the same padded to 64, KF_DV value columns of a layer, KF_W
 *   columns of a tile row (every cache side by side, padded to 64), KF_SCORE_PARTS key parts in the score,
 *   KF_FOR_CACHES(X): X(cache index, first 8-column chunk in the tile row, dim) for every cache,
 *   KF_FOR_KPARTS(X): X(part, first chunk in a Q row, dim, first tile chunk of layer 0, tile chunks per layer),
 *   kf_vchunk(l, c16): tile chunk of the 16-column step c16 of layer l's value row.
 *
 * Tiling. The CTA owns TM packed rows pr = i * G + g (query row i, head h0 + g) of one kv head, for every
 * layer, and a key range (split); grid (splits, hkv * cdiv(G * sq, TM), b). A key block's rows of every
 * cache (key parts, per-layer deltas, own value parts) land side by side in one swizzled tile row, so each
 * byte of the caches is read once per (row tile, split), whatever the number of layers; a value part that
 * aliases a key part (MLA: value = the first 512 latent columns) is read from the key columns.
 * Warp (wl, wm, wn): layer wl, rows wm*16 .. +16, keys wn*KW .. +KW of the block for S = sum_p Q_p K_p^T,
 * and value columns wn*DVW .. +DVW of O. With WN > 1 the warps of a row group exchange their block row
 * maxima through shared memory (all use the same running max, so their partial sums add up) and P (16-bit)
 * goes through shared memory; with WN = 1 P stays in registers as the A operand. The layers' warps run the
 * same instructions on their own Q and delta columns: layer l of an L-layer variant gives, bit for bit,
 * what the 1-layer variant with the same tile gives on that layer alone.
 *
 * Paged caches: page = block_table[b][j / PS]; when PS is a multiple of BN a key block lies in one page,
 * whose index is read once per block.
 *
 * Masking as attn/fwd.cuh: keys at or past kend are zero-filled (never read: NaN past n_kv, and unused
 * pages, cannot leak) and their scores -inf; causal keys j > i + n_kv - n_q are -inf; a row with no
 * visible key writes o = 0, lse = -inf.
 *
 * Shared memory: Q [L][TM][DQP] | STAGES x tile [BN][W] | P [L][TM][BN + 8] (WN > 1) | red [L][TM][WN] fp32.
 *
 * KF_KV8 (FP8 latent cache; the template allows it with KF_L 1 and an aliased value only): every cache holds e4m3
 * bytes (strides in bytes) and the score and value of key j are those of c_j * e4m3, c_j = p.cs's fp32 scale of
 * token j (one per token and kv head, addressed as the caches: page, row in page, head). Each stage holds the
 * block's bytes [BN][W] (unswizzled) and its BN scales (cp.async, 4 bytes each; both zero-filled from kend on);
 * after the block's barrier every thread converts its share of the bytes into one 16-bit tile laid out as the
 * 16-bit path's (common/fp8.cuh: value / 256, exact), a second barrier, then the 16-bit path's Q K^T and P V
 * unchanged. The scale and the 256 factor out of both products: S's column j is multiplied by 256 c_j before the
 * mask and the max (score = scale * 256 c_j * (q . k_tile)), and P's column j by 256 c_j after the row sums and
 * before P V (o = sum_j p_j 256 c_j v_tile,j / sum_j p_j). Shared memory: Q | tile [BN][W] | STAGES x (bytes
 * [BN][W] | scales [BN]) | P | red. Mutation hook: KF_MUTANT_FP8SCALE (the scale of the neighbouring token).
 */
#define KF_WM (KF_TM / 16)
#define KF_THREADS (32 * KF_L * KF_WM * KF_WN)
#define KF_KW (KF_BN / KF_WN)
#define KF_NT (KF_KW / 8)
#define KF_DVW (KF_DV / KF_WN)
#define KF_VT (KF_DVW / 8)
#define KF_Q_BYTES (KF_L * KF_TM * KF_DQP * 2)
#define KF_TILE_BYTES (KF_BN * KF_W * 2)
#define KF_PST (KF_BN + 8)
#ifndef KF_KV8
#define KF_KV8 0
#endif
#if KF_KV8
#define KF_T8_BYTES (KF_BN * KF_W)                  /* one block's e4m3 bytes */
#define KF_ST8_BYTES (KF_T8_BYTES + KF_BN * 4)      /* ... and its per-token scales: one stage */
#define KF_ST8_OFF (KF_Q_BYTES + KF_TILE_BYTES)     /* the stages, after Q and the converted tile */
#define KF_P_OFF (KF_ST8_OFF + KF_STAGES * KF_ST8_BYTES)
#if KF_L != 1
#error "kforge parts decode: the FP8 latent cache takes one layer"
#endif
#else
#define KF_P_OFF (KF_Q_BYTES + KF_STAGES * KF_TILE_BYTES)
#endif
#define KF_P_BYTES ((KF_WN > 1) ? KF_L * KF_TM * KF_PST * 2 : 0)
#define KF_RED_OFF (KF_P_OFF + KF_P_BYTES)

#if KF_TM % 16 != 0 || KF_KW % 16 != 0 || KF_DVW % 16 != 0 || KF_W % 64 != 0 || KF_DQP % 64 != 0 || KF_L < 1 || KF_L > 4
#error "kforge parts decode: invalid tile configuration"
#endif

/* layer l's value of an array of KF_L entries in the parameter block (no dynamic indexing of parameters) */
#if KF_L == 1
#define KF_PICK(a, l) ((a)[0])
#elif KF_L == 2
#define KF_PICK(a, l) ((l) == 0 ? (a)[0] : (a)[1])
#elif KF_L == 3
#define KF_PICK(a, l) ((l) == 0 ? (a)[0] : (l) == 1 ? (a)[1] : (a)[2])
#else
#define KF_PICK(a, l) ((l) == 0 ? (a)[0] : (l) == 1 ? (a)[1] : (l) == 2 ? (a)[2] : (a)[3])
#endif

/* element offset of (row, 16-byte chunk c) in a swizzled tile with rows of `width` elements */
__device__ __forceinline__ int kf_pswz(int row, int c, int width) { return row * width + ((c ^ (row & 7)) << 3); }

/* tile row r -> query row i and query head hh (h: first head of the kv head's group) */
__device__ __forceinline__ void kf_prow(int row0, int r, int h, int &i, int &hh)
{
    const int pr = row0 + r;
    i = pr / KF_G;
    hh = h + pr % KF_G;
}

/* cp.async of cache CI (DIM columns) for keys j0 .. j0+BN-1 into tile chunks OFF8 ..; zero-fill from kend on.
 * KF_KV8: the e4m3 bytes, 16 columns a copy, into the stage's byte rows at stile (row r at r * W, unswizzled). */
#if KF_KV8
typedef unsigned char kf_pcache_t;
#define KF_PC_COLS 16
#define KF_PC_DST(r, c) (stile + (r) * KF_W + (OFF8 / 2 + (c)) * 16)
#else
typedef kf_u16 kf_pcache_t;
#define KF_PC_COLS 8
#define KF_PC_DST(r, c) (stile + kf_pswz((r), OFF8 + (c), KF_W) * 2)
#endif
template <int CI, int OFF8, int DIM>
__device__ __forceinline__ void kf_load_cache(kf_u32 stile, const kf_parts_params &p, const int *bt, int pg, int b,
                                              int kvh, int j0, int kend, int tid)
{
    constexpr int C8 = DIM / KF_PC_COLS, N = KF_BN * C8;
    const kf_pcache_t *base = (const kf_pcache_t *)p.c[CI].p + (long long)kvh * p.c[CI].sh;
    const long long sb = p.c[CI].sb, ss = p.c[CI].ss;
#if !KF_PS
    base += (long long)b * sb;
#endif
#pragma unroll 4   /* a full unroll keeps every row's address live across the key loop (spills at 576 columns) */
    for (int it = 0; it < (N + KF_THREADS - 1) / KF_THREADS; ++it) {
        const int idx = tid + it * KF_THREADS;
        if (N % KF_THREADS == 0 || idx < N) {
            const int r = idx / C8, c = idx % C8;
            const int j = j0 + r;
            const bool ok = j < kend;
#if KF_PS && KF_PS % KF_BN == 0
            /* the block lies in one page (blocks start at multiples of BN): its index was read once */
            const kf_pcache_t *src = ok ? base + (long long)pg * sb + (long long)(j % KF_PS) * ss + c * KF_PC_COLS : base; // KF_MUTANT_PAGE
#elif KF_PS
            const kf_pcache_t *src = ok ? base + (long long)bt[j / KF_PS] * sb + (long long)(j % KF_PS) * ss + c * KF_PC_COLS : base; // KF_MUTANT_PAGE
#else
            const kf_pcache_t *src = ok ? base + (long long)j * ss + c * KF_PC_COLS : base;
#endif
            kf_cp_async16(KF_PC_DST(r, c), src, ok);
        }
    }
}
#undef KF_PC_DST

#if KF_KV8
/* FP8: the block's per-token scales (keys j0 .. j0+BN-1, zero from kend on) into the stage's [BN] fp32 at ssc */
__device__ __forceinline__ void kf_load_scales(kf_u32 ssc, const kf_parts_params &p, const int *bt, int pg, int b,
                                               int kvh, int j0, int kend, int tid)
{
    const float *base = (const float *)p.cs.p + (long long)kvh * p.cs.sh;
#if !KF_PS
    base += (long long)b * p.cs.sb;
#endif
    for (int r = tid; r < KF_BN; r += KF_THREADS) {
        const int j = j0 + r;
        const bool ok = j < kend;
        const int jt = j; // KF_MUTANT_FP8SCALE
#if KF_PS && KF_PS % KF_BN == 0
        const float *src = ok ? base + (long long)pg * p.cs.sb + (long long)(jt % KF_PS) * p.cs.ss : base;
#elif KF_PS
        const float *src = ok ? base + (long long)bt[j / KF_PS] * p.cs.sb + (long long)(jt % KF_PS) * p.cs.ss : base;
#else
        const float *src = ok ? base + (long long)jt * p.cs.ss : base;
#endif
        kf_cp_async4(ssc + r * 4, src, ok);
    }
}

#endif

__device__ __forceinline__ void kf_load_tile(kf_u32 stile, const kf_parts_params &p, const int *bt, int b, int kvh,
                                             int j0, int kend, int tid)
{
#if KF_PS && KF_PS % KF_BN == 0
    const int pg = bt[j0 / KF_PS];   /* j0 < kend: a page of the sequence */
#else
    const int pg = 0;
#endif
#define KF_LOAD_ONE(CI, OFF8, DIM) kf_load_cache<CI, OFF8, DIM>(stile, p, bt, pg, b, kvh, j0, kend, tid);
    KF_FOR_CACHES(KF_LOAD_ONE)
#undef KF_LOAD_ONE
#if KF_KV8
    kf_load_scales(stile + KF_T8_BYTES, p, bt, pg, b, kvh, j0, kend, tid);
#endif
}

#if KF_KV8
/* FP8: the block's bytes at s8 -> the 16-bit tile sT (value / 256, common/fp8.cuh), the key columns 0 .. DQ-1 in the
 * 16-bit path's swizzled layout; every thread converts its share */
__device__ __forceinline__ void kf_cvt_tile8(kf_u32 sT, kf_u32 s8, int tid)
{
    constexpr int C16 = KF_DQ / 16, N = KF_BN * C16;
#pragma unroll 2
    for (int idx = tid; idx < N; idx += KF_THREADS) {
        const int r = idx / C16, c = idx % C16;
        kf_e4m3x16_smem(s8 + r * KF_W + c * 16, sT + kf_pswz(r, 2 * c, KF_W) * 2, sT + kf_pswz(r, 2 * c + 1, KF_W) * 2);
    }
}

#define KF_LOAD_STAGE(s, j0) kf_load_tile(sTa + KF_TILE_BYTES + (s) * KF_ST8_BYTES, p, bt, b, kvh, (j0), kend, tid)
#else
#define KF_LOAD_STAGE(s, j0) kf_load_tile(sTa + (s) * KF_TILE_BYTES, p, bt, b, kvh, (j0), kend, tid)
#endif

extern "C" __global__ void __launch_bounds__(KF_THREADS, 1)
kf_parts_decode(const kf_parts_params p)
{
    KF_PDL_WAIT();   /* before any global access; dependents placed as the blocks exit: common/types.cuh */
    extern __shared__ __attribute__((aligned(128))) unsigned char kf_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wn = warp % KF_WN, wm = (warp / KF_WN) % KF_WM, wl = warp / (KF_WN * KF_WM);
    const int b = blockIdx.z;

    const int ntiles = (KF_G * p.sq + KF_TM - 1) / KF_TM;
    const int tile = blockIdx.y % ntiles;
    const int kvh = blockIdx.y / ntiles;
    const int h = kvh * KF_G;                               /* first query head of the group */
    const int split = blockIdx.x, nsplit = p.splits;
    const int n_q = p.sq;
    const int n_kv = p.kv_len ? p.kv_len[b] : p.skv;
    const int row0 = tile * KF_TM;
    if (row0 >= KF_G * n_q)
        return;
    const int imin = row0 / KF_G, imax = (min(row0 + KF_TM, KF_G * n_q) - 1) / KF_G;
    const int coff = n_kv - n_q;
    const int bps = ((n_kv + KF_BN - 1) / KF_BN + nsplit - 1) / nsplit;     /* key blocks per split */
    const int kbeg = split * bps * KF_BN, kend = min(n_kv, kbeg + bps * KF_BN);
    const int kstop = KF_CAUSAL ? min(kend, imax + coff + 1) : kend;
    const int kmask = KF_CAUSAL ? min(kend, imin + coff + 1) : kend;
    const int nblk = kstop > kbeg ? (kstop - kbeg + KF_BN - 1) / KF_BN : 0;
#if KF_PS
    const int *bt = p.block_table + (long long)b * p.bt_sb;
#else
    const int *bt = 0;
#endif

    const kf_u32 sQa = kf_smem_u32(kf_smem);
    const kf_u32 sTa = sQa + KF_Q_BYTES;
    float *red = (float *)(kf_smem + KF_RED_OFF);

    /* ---- Q of every layer -> shared (rows past n_q zero-filled) */
#pragma unroll
    for (int l = 0; l < KF_L; ++l) {
#define KF_LOAD_Q(P, QOFF8, DIM, KOFF8, LS8)                                                                   \
        {                                                                                                     \
            const kf_parts_tensor qt = p.q[l][P];                                                             \
            for (int idx = tid; idx < KF_TM * (DIM / 8); idx += KF_THREADS) {                                 \
                const int r = idx / (DIM / 8), c = idx % (DIM / 8);                                           \
                int i, hh;                                                                                    \
                kf_prow(row0, r, h, i, hh);                                                                   \
                const bool ok = i < n_q;                                                                      \
                const kf_u16 *src = (const kf_u16 *)qt.p + (ok ? (long long)b * qt.sb + (long long)i * qt.ss  \
                                                                 + (long long)hh * qt.sh + c * 8 : 0);         \
                kf_cp_async16(sQa + (l * KF_TM * KF_DQP + kf_pswz(r, QOFF8 + c, KF_DQP)) * 2, src, ok);      \
            }                                                                                                 \
        }
        KF_FOR_KPARTS(KF_LOAD_Q)
#undef KF_LOAD_Q
    }
    kf_cp_async_commit();

    /* ---- prologue: the first STAGES-1 blocks, one commit group each */
#pragma unroll
    for (int s = 0; s < KF_STAGES - 1; ++s) {
        if (s < nblk)
            KF_LOAD_STAGE(s, kbeg + s * KF_BN);
        kf_cp_async_commit();
    }

    const int sw = lane & 7;
    const int q_row = wm * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), q_chk = lane >> 4;
    const int k_row = wn * KF_KW + (lane >> 4) * 8 + (lane & 7), k_chk = (lane >> 3) & 1;
    const int v_row = ((lane >> 3) & 1) * 8 + (lane & 7), v_chk = lane >> 4;
    const kf_u32 sQl = sQa + wl * KF_TM * KF_DQP * 2;
    const int rrow = wl * KF_TM + wm * 16 + (lane >> 2);     /* red / P row of accumulator half 0 (+8: half 1) */

    int qi[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        int hh;
        kf_prow(row0, wm * 16 + (lane >> 2) + hf * 8, h, qi[hf], hh);
    }

    float acc[KF_VT][4];
    float rmax[2], rsum[2];
#pragma unroll
    for (int dt = 0; dt < KF_VT; ++dt)
        acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.f;
    rmax[0] = rmax[1] = KF_NEG_INF;
    rsum[0] = rsum[1] = 0.f;
    const float sl2 = p.scale_log2;

    /* ---- key loop */
    for (int n = 0; n < nblk; ++n) {
#if KF_KV8
        const kf_u32 sT = sTa;                              /* the converted tile */
#else
        const kf_u32 sT = sTa + (n % KF_STAGES) * KF_TILE_BYTES;
#endif
        const int j0 = kbeg + n * KF_BN;
#if KF_STAGES == 1
        KF_LOAD_STAGE(0, j0);
        kf_cp_async_commit();
        kf_cp_async_wait<0>();
        __syncthreads();
#else
        kf_cp_async_wait<KF_STAGES - 2>();                   /* block n (and Q) */
        __syncthreads();                                    /* ... and every warp is done with block n-1 */
        {
            const int jn = n + KF_STAGES - 1;
            if (jn < nblk)
                KF_LOAD_STAGE(jn % KF_STAGES, kbeg + jn * KF_BN);
            kf_cp_async_commit();
        }
#endif
#if KF_KV8
        /* the block's bytes -> the tile (the barrier above: every warp is done with the tile's block n-1), a barrier;
         * this thread's score columns' factors 256 c_j (the stage's scales stay until block n + STAGES refills it,
         * after the next iteration's first barrier) */
        const unsigned char *const st8 = kf_smem + KF_ST8_OFF + (n % KF_STAGES) * KF_ST8_BYTES;
        kf_cvt_tile8(sT, sTa + KF_TILE_BYTES + (n % KF_STAGES) * KF_ST8_BYTES, tid);
        __syncthreads();
        float2 cj[KF_NT];
#pragma unroll
        for (int nt = 0; nt < KF_NT; ++nt) {
            const float2 c = *(const float2 *)(st8 + KF_T8_BYTES + (wn * KF_KW + nt * 8 + 2 * (lane & 3)) * 4);
            cj[nt] = make_float2(c.x * 256.f, c.y * 256.f);
        }
#endif

        /* S = sum over key parts of Q_p K_p^T, this warp's KW keys */
        float s[KF_NT][4];
#pragma unroll
        for (int nt = 0; nt < KF_NT; ++nt)
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#define KF_S_PART(P, QOFF8, DIM, KOFF8, LS8)                                                                    \
        if (P < KF_SCORE_PARTS) {                                                                              \
            const int kc = KOFF8 + wl * LS8;                                                                   \
            _Pragma("unroll 4") for (int kk = 0; kk < DIM / 16; ++kk) {                                        \
                kf_u32 qa[4];                                                                                  \
                kf_ldsm_x4(qa, sQl + (q_row * KF_DQP + (((QOFF8 + 2 * kk + q_chk) ^ sw) << 3)) * 2);           \
                _Pragma("unroll") for (int nt2 = 0; nt2 < KF_NT / 2; ++nt2) {                                  \
                    kf_u32 kb[4];                                                                              \
                    kf_ldsm_x4(kb, sT + ((k_row + nt2 * 16) * KF_W + (((kc + 2 * kk + k_chk) ^ sw) << 3)) * 2); \
                    kf_mma16816(s[2 * nt2], qa, kb[0], kb[1]);                                                 \
                    kf_mma16816(s[2 * nt2 + 1], qa, kb[2], kb[3]);                                             \
                }                                                                                              \
            }                                                                                                  \
        }
        KF_FOR_KPARTS(KF_S_PART)
#undef KF_S_PART
#if KF_KV8
#pragma unroll
        for (int nt = 0; nt < KF_NT; ++nt) {   /* score column j times 256 c_j */
            s[nt][0] *= cj[nt].x, s[nt][1] *= cj[nt].y;
            s[nt][2] *= cj[nt].x, s[nt][3] *= cj[nt].y;
        }
#endif

        if (j0 + KF_BN > kmask) {
#pragma unroll
            for (int nt = 0; nt < KF_NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int j = j0 + wn * KF_KW + nt * 8 + 2 * (lane & 3) + (e & 1);
                    if (j >= kend || (KF_CAUSAL && j > qi[e >> 1] + coff))
                        s[nt][e] = KF_NEG_INF;
                }
        }

        /* block row maxima (over the WN warps of the row group), then the online softmax */
        float mx[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float m = KF_NEG_INF;
#pragma unroll
            for (int nt = 0; nt < KF_NT; ++nt)
                m = fmaxf(m, fmaxf(s[nt][2 * hf], s[nt][2 * hf + 1]));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            mx[hf] = m;
        }
#if KF_WN > 1
        if ((lane & 3) == 0) {
            red[rrow * KF_WN + wn] = mx[0];
            red[(rrow + 8) * KF_WN + wn] = mx[1];
        }
        __syncthreads();
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float m = KF_NEG_INF;
#pragma unroll
            for (int w = 0; w < KF_WN; ++w)
                m = fmaxf(m, red[(rrow + 8 * hf) * KF_WN + w]);
            mx[hf] = m;
        }
#endif
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const float m = fmaxf(rmax[hf], mx[hf]);
            const float mu = (m == KF_NEG_INF) ? 0.f : m * sl2;
            const float corr = kf_exp2(rmax[hf] * sl2 - mu);
            rmax[hf] = m;
            float ps = 0.f;
#pragma unroll
            for (int nt = 0; nt < KF_NT; ++nt) {
                s[nt][2 * hf] = kf_exp2(s[nt][2 * hf] * sl2 - mu);
                s[nt][2 * hf + 1] = kf_exp2(s[nt][2 * hf + 1] * sl2 - mu);
                ps += s[nt][2 * hf] + s[nt][2 * hf + 1];
            }
            rsum[hf] = rsum[hf] * corr + ps;
#pragma unroll
            for (int dt = 0; dt < KF_VT; ++dt) {
                acc[dt][2 * hf] *= corr;
                acc[dt][2 * hf + 1] *= corr;
            }
        }
#if KF_KV8
#pragma unroll
        for (int nt = 0; nt < KF_NT; ++nt) {   /* after the row sums: P column j times 256 c_j for P V */
            s[nt][0] *= cj[nt].x, s[nt][1] *= cj[nt].y;
            s[nt][2] *= cj[nt].x, s[nt][3] *= cj[nt].y;
        }
#endif

#if KF_WN > 1
        {   /* P -> shared: every warp of the row group needs all BN keys */
            kf_u16 *ps = (kf_u16 *)(kf_smem + KF_P_OFF);
#pragma unroll
            for (int nt = 0; nt < KF_NT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
                    *(kf_u32 *)(ps + (rrow + 8 * hf) * KF_PST + wn * KF_KW + nt * 8 + 2 * (lane & 3)) =
                        kf_pack2(s[nt][2 * hf], s[nt][2 * hf + 1]);
        }
        __syncthreads();
        const kf_u32 sP = kf_smem_u32(kf_smem + KF_P_OFF) + ((wl * KF_TM + wm * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * KF_PST
                                                             + (lane >> 4) * 8) * 2;
#endif

        /* O += P V over this warp's DVW value columns */
#pragma unroll
        for (int kk = 0; kk < KF_BN / 16; ++kk) {
            kf_u32 pa[4];
#if KF_WN > 1
            kf_ldsm_x4(pa, sP + kk * 32);
#else
            pa[0] = kf_pack2(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = kf_pack2(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = kf_pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = kf_pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#endif
#pragma unroll
            for (int dt2 = 0; dt2 < KF_VT / 2; ++dt2) {
                const int ch = kf_vchunk(wl, wn * (KF_DVW / 16) + dt2);
                kf_u32 vb[4];
                kf_ldsm_x4_t(vb, sT + ((v_row + kk * 16) * KF_W + (((ch + v_chk) ^ sw) << 3)) * 2);
                kf_mma16816(acc[2 * dt2], pa, vb[0], vb[1]);
                kf_mma16816(acc[2 * dt2 + 1], pa, vb[2], vb[3]);
            }
        }
#if KF_STAGES == 1
        __syncthreads();                                    /* the stage may be refilled */
#endif
    }
    kf_cp_async_wait<0>();

    /* ---- row sums: the quad, then the WN warps of the row group (fixed order) */
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        rsum[hf] += __shfl_xor_sync(0xffffffffu, rsum[hf], 1);
        rsum[hf] += __shfl_xor_sync(0xffffffffu, rsum[hf], 2);
    }
#if KF_WN > 1
    __syncthreads();
    if ((lane & 3) == 0) {
        red[rrow * KF_WN + wn] = rsum[0];
        red[(rrow + 8) * KF_WN + wn] = rsum[1];
    }
    __syncthreads();
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        float t = 0.f;
#pragma unroll
        for (int w = 0; w < KF_WN; ++w)
            t += red[(rrow + 8 * hf) * KF_WN + w];
        rsum[hf] = t;
    }
#endif

    /* ---- epilogue: O / sum -> o_l (or the split's fp32 partial), lse = max*scale + log(sum) */
    const kf_parts_tensor ot = KF_PICK(p.o, wl);
    float *const lsep = KF_PICK(p.lse, wl);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        int i, hh;
        kf_prow(row0, wm * 16 + (lane >> 2) + hf * 8, h, i, hh);
        if (i >= n_q)
            continue;
        const float l = rsum[hf];
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const float lse = l > 0.f ? rmax[hf] * p.scale + logf(l) : KF_NEG_INF;
        if (nsplit == 1) {
            kf_u16 *o = (kf_u16 *)ot.p + (long long)b * ot.sb + (long long)i * ot.ss + (long long)hh * ot.sh
                        + wn * KF_DVW + 2 * (lane & 3);
#pragma unroll
            for (int dt = 0; dt < KF_VT; ++dt)
                *(kf_u32 *)(o + dt * 8) = kf_pack2(acc[dt][2 * hf] * inv, acc[dt][2 * hf + 1] * inv);
            if (lsep && wn == 0 && (lane & 3) == 0)
                lsep[(long long)b * p.lse_sb + (long long)hh * p.lse_sh + i] = lse;
        } else {
            const long long rid = ((long long)b * p.sq + i) * (long long)p.hq + hh;
            const long long wrow = (long long)split * p.ws_rows * p.hq + rid;
            float *wo = KF_PICK(p.ws_o, wl) + wrow * KF_DV + wn * KF_DVW + 2 * (lane & 3);
#pragma unroll
            for (int dt = 0; dt < KF_VT; ++dt)
                *(float2 *)(wo + dt * 8) = make_float2(acc[dt][2 * hf] * inv, acc[dt][2 * hf + 1] * inv);
            if (wn == 0 && (lane & 3) == 0)
                KF_PICK(p.ws_lse, wl)[wrow] = lse;
        }
    }
}

#endif
