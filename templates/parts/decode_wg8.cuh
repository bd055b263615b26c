/* parts/decode_wg8.cuh: absorbed-MLA decode over an FP8 (e4m3) latent cache on Hopper's FP8 tensor cores, the keys as wgmma's rows (attn_parts_decode impl=wg8, sm_90a) */
#ifndef KF_PARTS_DECODE_WG8_CUH
#define KF_PARTS_DECODE_WG8_CUH

/*
 * Template constants: KF_BF16 (1: bf16 queries), KF_KV8 (1), KF_L (1), KF_G (query heads of the kv head), KF_CAUSAL,
 * KF_TM (16 packed rows a CTA), KF_BN (64), KF_STAGES (2..4 cp.async stages), KF_PS (0, or pages of a multiple of 64
 * rows: a block lies in one page), KF_DQ (key columns: a multiple of 32, at most 640), KF_DV (a multiple of 128: the
 * value is key columns KF_VALIAS_OFF8 * 8 .. + DV - 1, the latent), KF_FOR_CACHES, KF_FOR_KPARTS. Needs
 * common/types.cuh, common/fp8.cuh, common/mma.cuh, common/wgmma.cuh, common/wgmma_fp8.cuh, common/parts_params.h and
 * parts/decode_sm90_common.cuh (KF_PD_CTA_ROWS, kf_pd_row, kf_pd_put2).
 *
 * attn/decode_wg8.cuh's scheme (GQA decode on e4m3 wgmma) carried to MLA's 576-wide rows, the FP8 latent cache of
 * issue 18: the e4m3 bytes are wgmma's operands as they come from memory, no conversion instruction a byte (the mma
 * impl converts each block to a 16-bit tile first, and sm_90a has no e4m3 mma.sync: bench/NOTES.md, sessions 22, 23).
 *
 *   S^T (64 keys x N) = K (64 keys x DQ, shared, K-major) Q^T (DQ x N, shared), N = 2 TM: column 2r + u is term u of
 *     packed row r's q, scaled by 2^e so the tile's largest finite |q| lies in [128, 256), split into two e4m3 terms
 *     (attn/decode_wg8.cuh's rule). K's tile is KP = DQ / 128 (rounded up) panels of [64 keys][128 bytes], 128-byte
 *     swizzled, Q^T's the same panels of [N][128 bytes]. Each k32 step runs from zero and is added in fp32 (Hopper's
 *     FP8 accumulation inside a chain keeps ~13-14 bits, truncating: the LSE errors of panel-long chains reached
 *     1.8e-3), the next step issued before the last is waited for. A score is the sum of its row's two term columns,
 *     times the token's scale c_j and 2^-e.
 *   O^T (DV x N) += V^T (DV x 64 keys) P^T (64 keys x N): V is the first DV bytes of the same K rows (the value
 *     aliased to the latent), read from the K panels; V^T's A fragments from registers, a thread's 32-bit word (four
 *     d) of 16 key rows a k32 step and panel, transposed 4 x 4 by byte permutes (kf_tr4x4). O^T's rows are permuted
 *     as attn/decode_wg8.cuh's: tile (q, jd)'s row 16 w + g + 8 h is d = 128 q + 4 (8 w + g) + 2 jd + h, so a
 *     thread's four d of a panel are one word of a V row. Key slot 16 h + 4 c + i of a k32 step is key 8 i + 2 c + h
 *     (P^T uses the same order). In a 128-byte-swizzled row the word lands in chunk (2 w + g / 4) ^ (row & 7): the
 *     four rows of an instruction (2 t apart) and the two chunks of a warp give eight distinct chunks, 32 banks.
 *   P carries the token's scale: P^T's column j holds 256 p_j c_j / cmax (cmax: the block's largest scale, so the
 *     terms stay in e4m3's range whatever the scales), two e4m3 terms; the block's O^T product, from zero, is added
 *     to O in fp32 times cmax / 256. The row sums take p_j alone.
 *
 * Tiling: packed row pr = i G + g (query row i, head h + g), grid (splits, hkv * cdiv(G sq, TM), b), keys of the split
 * in blocks of 64 (KF_PD_CTA_ROWS); every thread copies 16-byte chunks of the block's rows (zero-filled from kend on,
 * no byte past a length read) and thread j < 64 the token's scale (cp.async), STAGES - 1 blocks in flight; the
 * block's row maxima over the warpgroup through shared memory (the four warps hold other keys of the same rows).
 * Splits > 1 write fp32 partials and lse (attn/combine.cuh merges them). Mutation hooks: KF_MUTANT_PAGE (the
 * in-page row), KF_MUTANT_FP8SCALE (the token's scale), KF_MUTANT_W8CAUSAL (the causal bound), KF_MUTANT_W8SLOT
 * (P^T's key order), and the header's KF_VALIAS_OFF8 (the value's first column).
 */
#define KF_M8_N (2 * KF_TM)                                  /* wgmma columns */
#define KF_M8_NG (KF_TM / 4)                                 /* 8-column groups: packed rows 4 jg + t */
#define KF_M8_KP ((KF_DQ + 127) / 128)                       /* K panels */
#define KF_M8_KS (KF_DQ / 32)                                /* k32 steps of S^T */
#define KF_M8_VP (KF_DV / 128)                               /* value panels (O^T tiles 2 a panel) */
#define KF_M8_KB (KF_M8_KP * 64 * 128)                       /* K bytes a stage */
#define KF_M8_STAGE (KF_M8_KB + 1024)                        /* ... and the block's 64 fp32 scales (1024-aligned) */
#define KF_M8_QB (KF_M8_KP * KF_M8_N * 128)                  /* Q^T */
#define KF_M8_PB (KF_M8_N * 128)                             /* P^T */
#define KF_M8_RED (KF_M8_QB + KF_M8_PB + KF_STAGES * KF_M8_STAGE)   /* [4 warps][TM] fp32, then [4 warps] fp32 */
#define KF_M8_BAR (KF_M8_RED + 4 * KF_TM * 4 + 16)                  /* a stage's mbarrier (copy engine), 8 bytes */

#if !KF_BF16 || !KF_KV8 || KF_L != 1 || KF_TM != 16 || KF_BN != 64 || KF_STAGES < 2 || KF_STAGES > 4 || KF_DQ % 32 \
    || KF_DQ > 640 || KF_DV % 128 || KF_DV > KF_DQ || (KF_PS && KF_PS % 64)
#error "kforge parts decode_wg8: invalid configuration (bf16 Q, FP8 cache, one layer, tm 16, bn 64, 2..4 stages, dq <= 640)"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
#error "kforge parts decode_wg8: needs sm_90a (wgmma)"
#endif

/* Byte address of column col (a byte of the row) of row r in a tile of 128-byte-swizzled panels of `rows` rows */
__device__ __forceinline__ kf_u32 kf_m8_at(kf_u32 base, int rows, int r, int col)
{
    return base + kf_wg_swz(rows, r, col >> 4) + (kf_u32)(col & 15);
}

/* The block's bytes of cache CI (DIM columns from tile column OFF8 * 8) for keys j0 .. j0 + 63 into the K panels at
 * sK, 16 bytes a copy, zero-filled from kend on; pg: the block's page (paged caches) */
template <int CI, int OFF8, int DIM>
__device__ __forceinline__ void kf_m8_load_cache(kf_u32 sK, const kf_parts_params &p, int pg, int b, int kvh, int j0,
                                                 int kend, int tid)
{
    constexpr int C16 = DIM / 16, N = 64 * C16;
    const unsigned char *base = (const unsigned char *)p.c[CI].p + (long long)kvh * p.c[CI].sh;
    const long long sb = p.c[CI].sb, ss = p.c[CI].ss;
#if KF_PS
    base += (long long)pg * sb;
#else
    base += (long long)b * sb;
#endif
#pragma unroll 4
    for (int it = 0; it < (N + 127) / 128; ++it) {
        const int idx = tid + 128 * it;
        if (N % 128 == 0 || idx < N) {
            const int r = idx / C16, c = idx % C16, j = j0 + r;
            const bool ok = j < kend;
#if KF_PS
            const unsigned char *src = ok ? base + (long long)(j % KF_PS) * ss + c * 16 : base; // KF_MUTANT_PAGE
#else
            const unsigned char *src = ok ? base + (long long)j * ss + c * 16 : base;
#endif
            kf_cp_async16(kf_m8_at(sK, 64, r, OFF8 * 8 + 16 * c), src, ok);
        }
    }
}

/* The block's K rows and its tokens' scales (one a thread of the first 64) into stage sK (scales at sK + KF_M8_KB);
 * pg: the block's page (paged caches: block_table's entry, read a block ahead by the caller; else unused).
 * The rows of a block whose 64 keys all lie below kend, where the host mapped the whole row (tm.kv8), come by the
 * copy engine: thread 0 expects the panels' bytes on the stage's barrier and issues one 128-column box a panel (the
 * last panel's columns past the row zero-filled by the map); any other block (the split's last, short one: its zero
 * fill keeps NaN tails and unused pages out, a map would read them) by cp.async. The scales always by cp.async. */
__device__ __forceinline__ void kf_m8_load_block(kf_u32 sK, kf_u32 bar, const kf_parts_tmaps &tm, const kf_parts_params &p,
                                                 int pg, int b, int kvh, int j0, int kend, int tid)
{
    if (tm.kv8 && j0 + 64 <= kend) {
        if (tid == 0) {
            kf_mbar_expect_tx(bar, KF_M8_KB);
#pragma unroll
            for (int pp = 0; pp < KF_M8_KP; ++pp)
#if KF_PS
                kf_tma_load4(sK + pp * 64 * 128, &tm.c[0], 128 * pp, j0 % KF_PS, kvh, pg, bar); // KF_MUTANT_PAGE8 KF_MUTANT_TCOL8
#else
                kf_tma_load4(sK + pp * 64 * 128, &tm.c[0], 128 * pp, j0, kvh, b, bar); // KF_MUTANT_TCOL8
#endif
        }
    } else {
#define KF_M8_LOAD_ONE(CI, OFF8, DIM) kf_m8_load_cache<CI, OFF8, DIM>(sK, p, pg, b, kvh, j0, kend, tid);
        KF_FOR_CACHES(KF_M8_LOAD_ONE)
#undef KF_M8_LOAD_ONE
    }
    if (tid < 64) {
        const int j = j0 + tid;
        const bool ok = j < kend;
        const int jt = j; // KF_MUTANT_FP8SCALE
        const float *base = (const float *)p.cs.p + (long long)kvh * p.cs.sh;
#if KF_PS
        const float *src = ok ? base + (long long)pg * p.cs.sb + (long long)(jt % KF_PS) * p.cs.ss : base;
#else
        const float *src = ok ? base + (long long)b * p.cs.sb + (long long)jt * p.cs.ss : base;
#endif
        kf_cp_async4(sK + KF_M8_KB + 4 * tid, src, ok);
    }
}

extern "C" __global__ void __launch_bounds__(128, 1)
kf_parts_decode(const kf_parts_params p, const __grid_constant__ kf_parts_tmaps tm)
{
    KF_PD_CTA_ROWS(64, KF_TM)   /* tid, b, kvh, h, split, n_q, n_kv, row0, coff; kbeg .. kend, kstop, kmask, nblk; sbase */
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const kf_u32 sQ = sbase, sP = sbase + KF_M8_QB, sKV = sP + KF_M8_PB, sBar = sbase + KF_M8_BAR;
    float *red = (float *)(gbase + KF_M8_RED);
    const int *bt = KF_PS ? p.block_table + (long long)b * p.bt_sb : 0;
    if (tid == 0) {                                       /* the stages' barriers (ordered by Q's barrier below) */
#pragma unroll
        for (int s = 0; s < KF_STAGES; ++s)
            kf_mbar_init(sBar + 8 * s, 1);
        if (tm.kv8)
            kf_tma_prefetch(&tm.c[0]);
    }

    /* ---- Q^T: the two e4m3 terms of each packed row (rows 2r, 2r + 1), four columns a thread a round. Every
     * thread's Q words are loaded at once (all in flight, kept in registers: a loop of dependent loads cost ~10% of
     * the call at B128 Hq16, bench/NOTES.md session 28), then the tile's largest finite |q|, then the terms. */
    float qinv;
    {
#define KF_M8_QN(DIM) ((KF_TM * ((DIM) / 4) + 127) / 128)   /* a thread's Q words (4 values) of a key part */
#define KF_M8_QLOAD(P, QOFF8, DIM, KOFF8, LS8)                                                                      \
        uint2 qv##P[KF_M8_QN(DIM)];                                                                                 \
        _Pragma("unroll") for (int it = 0; it < KF_M8_QN(DIM); ++it) {                                            \
            const int idx = tid + 128 * it, r = idx / (DIM / 4), d4 = idx % (DIM / 4);                             \
            int i, hh;                                                                                              \
            kf_pd_row(row0, r, h, i, hh);                                                                           \
            qv##P[it] = make_uint2(0u, 0u);                                                                         \
            if ((KF_TM * (DIM / 4) % 128 == 0 || idx < KF_TM * (DIM / 4)) && i < n_q) {                             \
                const kf_parts_tensor qt = p.q[0][P];                                                               \
                qv##P[it] = *(const uint2 *)((const kf_u16 *)qt.p + (long long)b * qt.sb + (long long)i * qt.ss     \
                                             + (long long)hh * qt.sh + 4 * d4);                                     \
            }                                                                                                       \
        }
        KF_FOR_KPARTS(KF_M8_QLOAD)
#undef KF_M8_QLOAD
        float m = 0.f;
#define KF_M8_QMAX(P, QOFF8, DIM, KOFF8, LS8)                                                                       \
        _Pragma("unroll") for (int it = 0; it < KF_M8_QN(DIM); ++it) {                                            \
            const uint2 v = qv##P[it];                                                                              \
            const float x[4] = {kf_to_float((kf_u16)(v.x & 0xffffu)), kf_to_float((kf_u16)(v.x >> 16)),           \
                                kf_to_float((kf_u16)(v.y & 0xffffu)), kf_to_float((kf_u16)(v.y >> 16))};           \
            _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                                         \
                const float a = fabsf(x[e]);                                                                        \
                m = fmaxf(m, a <= 3.4028235e38f ? a : 0.f);                                                         \
            }                                                                                                       \
        }
        KF_FOR_KPARTS(KF_M8_QMAX)
#undef KF_M8_QMAX
        float qsc;
        kf_w8_qscale_wg(m, red, warp, lane, qsc, qinv);
#define KF_M8_QPUT(P, QOFF8, DIM, KOFF8, LS8)                                                                       \
        _Pragma("unroll") for (int it = 0; it < KF_M8_QN(DIM); ++it) {                                            \
            const int idx = tid + 128 * it, r = idx / (DIM / 4), d4 = idx % (DIM / 4);                             \
            if (KF_TM * (DIM / 4) % 128 == 0 || idx < KF_TM * (DIM / 4)) {                                          \
                const uint2 v = qv##P[it];   /* zero for rows past n_q */                                           \
                float x[4] = {kf_to_float((kf_u16)(v.x & 0xffffu)) * qsc, kf_to_float((kf_u16)(v.x >> 16)) * qsc,  \
                              kf_to_float((kf_u16)(v.y & 0xffffu)) * qsc, kf_to_float((kf_u16)(v.y >> 16)) * qsc}; \
                kf_u32 t0, t1;                                                                                      \
                kf_w8_qterms(x, t0, t1);                                                                            \
                kf_w8_sts32(kf_m8_at(sQ, KF_M8_N, 2 * r, QOFF8 * 8 + 4 * d4), t0);                                  \
                kf_w8_sts32(kf_m8_at(sQ, KF_M8_N, 2 * r + 1, QOFF8 * 8 + 4 * d4), t1);                              \
            }                                                                                                       \
        }
        KF_FOR_KPARTS(KF_M8_QPUT)
#undef KF_M8_QPUT
#undef KF_M8_QN
        kf_fence_proxy_async();                           /* Q^T (generic stores) before wgmma reads it; the first
                                                           * block's barrier orders it across threads */
    }

    /* this thread's packed rows 4 jg + t: query row; accumulators O^T (value panel q, tile jd) and the row state */
    int qi[KF_M8_NG];
#pragma unroll
    for (int jg = 0; jg < KF_M8_NG; ++jg)
        qi[jg] = (row0 + 4 * jg + t) / KF_G;
    float o[KF_M8_VP][2][KF_M8_N / 2];
    float rmax[KF_M8_NG], rsum[KF_M8_NG];
#pragma unroll
    for (int jg = 0; jg < KF_M8_NG; ++jg)
        rmax[jg] = KF_NEG_INF, rsum[jg] = 0.f;
#pragma unroll
    for (int q = 0; q < KF_M8_VP; ++q)
#pragma unroll
        for (int e = 0; e < KF_M8_N / 2; ++e)
            o[q][0][e] = o[q][1][e] = 0.f;
    const float sl2 = p.scale_log2;
    const int vrow = 4 * (8 * warp + g);                  /* this thread's word of a value panel's row: d vrow .. + 3 */
    /* the byte offsets in a stage of this thread's V words of key rows 2 t + hh (+ 8 n: the same swizzle), value
     * panel 0 (panel q: + q 64 x 128) */
    kf_u32 voff[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
        voff[hh] = kf_m8_at(0, 64, 2 * t + hh, KF_VALIAS_OFF8 * 8 + vrow);
    float of = 1.f;                                       /* O is held in units of of (the last block's cmax / 256) */

    /* block j's page: block_table's entry (a block lies in one page), read a block ahead of its load so that its
     * latency is not on the path of the load it feeds */
#define KF_M8_PAGE(blk) (KF_PS && (blk) < nblk ? bt[(kbeg + 64 * (blk)) / (KF_PS ? KF_PS : 1)] : 0)
#pragma unroll 1
    for (int s = 0; s < KF_STAGES - 1; ++s) {
        if (s < nblk)
            kf_m8_load_block(sKV + s * KF_M8_STAGE, sBar + 8 * s, tm, p, KF_M8_PAGE(s), b, kvh, kbeg + 64 * s, kend, tid);
        kf_cp_async_commit();
    }
    int pg_next = KF_M8_PAGE(KF_STAGES - 1);
#pragma unroll 1
    for (int blk = 0; blk < nblk; ++blk) {
        const kf_u32 sK = sKV + (blk % KF_STAGES) * KF_M8_STAGE;
        const float *sc = (const float *)(gbase + KF_M8_QB + KF_M8_PB + (blk % KF_STAGES) * KF_M8_STAGE + KF_M8_KB);
        const int j0 = kbeg + 64 * blk;
        kf_cp_async_wait<KF_STAGES - 2>();
        if (tm.kv8 && j0 + 64 <= kend)                    /* the copy engine's panels: the stage's (blk / STAGES)-th
                                                           * phase (every earlier block of the split was whole) */
            kf_mbar_wait(sBar + 8 * (blk % KF_STAGES), (blk / KF_STAGES) & 1);
        kf_fence_proxy_async();                           /* this thread's copies, then wgmma's (async proxy) reads */
        __syncthreads();                                  /* (A) the block landed; block blk - 1's stage is free */
        if (blk + KF_STAGES - 1 < nblk)
            kf_m8_load_block(sKV + ((blk + KF_STAGES - 1) % KF_STAGES) * KF_M8_STAGE,
                             sBar + 8 * ((blk + KF_STAGES - 1) % KF_STAGES), tm, p, pg_next, b, kvh,
                             kbeg + 64 * (blk + KF_STAGES - 1), kend, tid);
        kf_cp_async_commit();
        pg_next = KF_M8_PAGE(blk + KF_STAGES);

        /* S^T = K Q^T, each k32 step from zero into one of two accumulator sets and added in fp32: step ks + 1 is
         * issued before step ks is waited for (wait_group 1), so the tensor core always holds the next (a third set
         * in flight measured no faster, bench/NOTES.md session 29). A
         * chain of steps in the tensor core would add them at its own precision (Hopper's FP8 accumulation aligns
         * the terms to the largest and keeps ~13-14 bits, truncating): chains of a 128-column panel gave LSE errors
         * up to 1.8e-3 on N(0, 1) rows (bench/NOTES.md, session 26), single steps ~10x less */
        float s[KF_M8_NG][2];
#pragma unroll
        for (int jg = 0; jg < KF_M8_NG; ++jg)
            s[jg][0] = s[jg][1] = 0.f;
        float sacc[2][KF_M8_N / 2];
        const unsigned long long dk = kf_gmma_desc(sK, 16, 1024), dq = kf_gmma_desc(sQ, 16, 1024);
        kf_wgmma_fence();
        kf_wgmma_e4m3_ss(sacc[0], dk, dq, 0);
        kf_wgmma_commit();
#pragma unroll
        for (int ks = 0; ks < KF_M8_KS; ++ks) {
            if (ks + 1 < KF_M8_KS) {
                const int np = (ks + 1) >> 2, nk = (ks + 1) & 3;
                kf_wgmma_fence();
                /* a descriptor's address field is the byte address / 16 (shared addresses < 2^18: no carry) */
                kf_wgmma_e4m3_ss(sacc[(ks + 1) & 1], dk + ((np * 64 * 128 + nk * 32) >> 4),
                                 dq + ((np * KF_M8_N * 128 + nk * 32) >> 4), 0);
                kf_wgmma_commit();
                kf_wgmma_wait<1>();
            } else {
                kf_wgmma_wait<0>();
            }
            kf_wg_fence_regs(sacc[ks & 1]);
#pragma unroll
            for (int jg = 0; jg < KF_M8_NG; ++jg)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
                    s[jg][hh] += sacc[ks & 1][4 * jg + 2 * hh] + sacc[ks & 1][4 * jg + 2 * hh + 1];
        }
        /* scores of keys 16 warp + g + 8 hh (times the token's scale and 2^-e), packed rows 4 jg + t; the mask: keys
         * at or past kend (the split's or the sequence's end), past each row's causal bound */
        const float c0 = sc[16 * warp + g], c1 = sc[16 * warp + g + 8];
#pragma unroll
        for (int jg = 0; jg < KF_M8_NG; ++jg) {
            s[jg][0] *= c0 * qinv;
            s[jg][1] *= c1 * qinv;
        }
        if (j0 + 64 > kmask) {
#pragma unroll
            for (int jg = 0; jg < KF_M8_NG; ++jg)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int j = j0 + 16 * warp + g + 8 * hh, i = qi[jg];
                    if (j >= kend || (KF_CAUSAL && j > i + coff)) // KF_MUTANT_W8CAUSAL
                        s[jg][hh] = KF_NEG_INF;
                }
        }
        /* the block's row maxima: over the lane's keys, the warp's (g), then the four warps'; the same for the
         * block's largest scale (P^T's columns carry c_j / cmax; the scales of keys past kend were zero-filled) */
#pragma unroll
        for (int jg = 0; jg < KF_M8_NG; ++jg) {
            const float x = kf_w8_gmax(fmaxf(s[jg][0], s[jg][1]));
            if (g == 0)
                red[warp * KF_TM + 4 * jg + t] = x;
        }
        {
            const float x = kf_w8_gmax(fmaxf(c0, c1));
            if (lane == 0)
                red[4 * KF_TM + warp] = x;
        }
        __syncthreads();                                  /* (B) */
        const float cmax = fmaxf(fmaxf(red[4 * KF_TM], red[4 * KF_TM + 1]), fmaxf(red[4 * KF_TM + 2], red[4 * KF_TM + 3]));
        const float pf = cmax > 0.f ? 256.f / cmax : 0.f;
        /* O (units of): of_new = cmax / 256, unchanged when the block has no positive scale (its P is zero) */
        const float of_new = cmax > 0.f ? cmax * (1.f / 256.f) : of, ofr = of / of_new;
        of = of_new;
        float corr[KF_M8_NG];
#pragma unroll
        for (int jg = 0; jg < KF_M8_NG; ++jg) {
            const int r = 4 * jg + t;
            const float mx = fmaxf(fmaxf(rmax[jg], fmaxf(red[r], red[KF_TM + r])),
                                   fmaxf(red[2 * KF_TM + r], red[3 * KF_TM + r]));
            const float mu = (mx == KF_NEG_INF) ? 0.f : mx * sl2;   /* no -inf - -inf */
            corr[jg] = kf_exp2(rmax[jg] * sl2 - mu);       /* times ofr below, for O's unit */
            rmax[jg] = mx;
            const float e0 = kf_exp2(s[jg][0] * sl2 - mu), e1 = kf_exp2(s[jg][1] * sl2 - mu);
            rsum[jg] = rsum[jg] * corr[jg] + (e0 + e1);  /* a per-thread partial; reduced at the end */
            corr[jg] *= ofr;
            /* 256 p c_j / cmax as two e4m3 terms (through fp16, as attn/decode_wg8.cuh) into P^T rows 2r, 2r + 1 */
            kf_u32 hi, lo;
            kf_w8_pterms(e0 * c0 * pf, e1 * c1 * pf, hi, lo);
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int kl = 16 * warp + g + 8 * hh, k = kl & 31;
                const int slot = (kl & ~31) + 16 * (k & 1) + 4 * ((k >> 1) & 3) + (k >> 3); // KF_MUTANT_W8SLOT
                kf_w8_sts8(kf_w8_at(sP, 2 * r, slot), (hi >> (8 * hh)) & 0xffu);
                kf_w8_sts8(kf_w8_at(sP, 2 * r + 1, slot), (lo >> (8 * hh)) & 0xffu);
            }
        }
        kf_fence_proxy_async();                           /* P^T's stores, then wgmma's reads */
        __syncthreads();                                  /* (C) */

        /* O^T partial = V^T P^T, a value panel at a time (its two tiles, both k32 steps, from zero), then
         * O = O corr + partial in fp32 (O in units of cmax / 256) */
#pragma unroll
        for (int q = 0; q < KF_M8_VP; ++q) {
            kf_u32 va[2][2][4];                           /* [k32 step][tile jd][register] */
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {
                kf_u32 w[2][4], tr[2][4];
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
                    for (int i = 0; i < 4; ++i)           /* key 8 i + 2 t + hh of the step: slot 16 hh + 4 t + i */
                        w[hh][i] = kf_w8_lds(sK + voff[hh] + q * 64 * 128 + (32 * ks + 8 * i) * 128);
                    kf_tr4x4(w[hh], tr[hh]);              /* tr[hh][c]: d col + c of those four keys */
                }
                kf_w8_vfrag(tr, va[ks]);                  /* tile jd's rows g, g + 8: d col + 2 jd, + 1 */
            }
            float oc[2][KF_M8_N / 2];
            kf_w8_pv(oc, va, sP);
#pragma unroll
            for (int jd = 0; jd < 2; ++jd)
#pragma unroll
                for (int e = 0; e < KF_M8_N / 2; ++e)
                    o[q][jd][e] = fmaf(o[q][jd][e], corr[e >> 2], oc[jd][e]);
        }
    }

    /* ---- the row sums over the warpgroup (every thread holds the same row maxima) */
    kf_w8_row_sums<KF_M8_NG, KF_TM>(rsum, red, warp, g, t);

    /* ---- epilogue: O / sum -> o (split 1, with lse) or the split's fp32 partial and lse; a thread's four d
     * (vrow .. vrow + 3) of each value panel, each the sum of the two P-term columns */
#pragma unroll
    for (int jg = 0; jg < KF_M8_NG; ++jg) {
        const int r = 4 * jg + t;
        int i, hh;
        kf_pd_row(row0, r, h, i, hh);
        if (i >= n_q)
            continue;
        const float l = red[r] + red[KF_TM + r] + red[2 * KF_TM + r] + red[3 * KF_TM + r];
        const float inv = l > 0.f ? of / l : 0.f;         /* O's unit of / the row sum */
        const float lse = l > 0.f ? rmax[jg] * p.scale + logf(l) : KF_NEG_INF;
        float v[KF_M8_VP][4];
#pragma unroll
        for (int q = 0; q < KF_M8_VP; ++q)
#pragma unroll
            for (int c = 0; c < 4; ++c)                   /* d vrow + c: tile jd = c / 2, row half c % 2 */
                v[q][c] = (o[q][c >> 1][4 * jg + 2 * (c & 1)] + o[q][c >> 1][4 * jg + 2 * (c & 1) + 1]) * inv;
        if (nsplit == 1) {
            const kf_parts_tensor ot = p.o[0];
            kf_u16 *og = (kf_u16 *)ot.p + (long long)b * ot.sb + (long long)i * ot.ss + (long long)hh * ot.sh + vrow;
#pragma unroll
            for (int q = 0; q < KF_M8_VP; ++q)
                *(uint2 *)(og + 128 * q) = make_uint2(kf_pack2(v[q][0], v[q][1]), kf_pack2(v[q][2], v[q][3]));
            if (p.lse[0] && warp == 0 && g == 0)
                p.lse[0][(long long)b * p.lse_sb + (long long)hh * p.lse_sh + i] = lse;
        } else {
            const long long rid = ((long long)b * p.sq + i) * (long long)p.hq + hh;
            const long long wrow = (long long)split * p.ws_rows * p.hq + rid;
            float *wo = p.ws_o[0] + wrow * KF_DV + vrow;
#pragma unroll
            for (int q = 0; q < KF_M8_VP; ++q)
                *(float4 *)(wo + 128 * q) = make_float4(v[q][0], v[q][1], v[q][2], v[q][3]);
            if (warp == 0 && g == 0)
                p.ws_lse[0][wrow] = lse;
        }
    }
#undef KF_M8_PAGE
}

#endif
