/* attn/decode_wg8.cuh: GQA decode with FP8 (e4m3) K/V on Hopper's FP8 tensor cores, the keys as wgmma's rows (attn_decode impl=wg8, sm_90a) */
#ifndef KF_ATTN_DECODE_WG8_CUH
#define KF_ATTN_DECODE_WG8_CUH

/*
 * Compile-time constants (defined by the template): KF_BF16 (1: bf16 queries), KF_KV8 (1), KF_D (128), KF_G = hq /
 * hkv, KF_CAUSAL, KF_TM packed rows a CTA (4, 8, 16), KF_BN keys a block (64, 128: the split granularity),
 * KF_STAGES cp.async stages
 * (2..4), KF_FWD_NAME; the model features of common/attn_features.cuh.
 *
 * Why this kernel. attn/decode_direct.cuh feeds the e4m3 bytes to mma.sync m16n8k32 e4m3, which sm_90a does not
 * have: ptxas unpacks every K, V, Q and P byte to fp16 (F2FP) and issues two HMMA.16816 a product, ~0.5 integer
 * instruction a byte, and the power-limited clock then bounds the kernel (bench/NOTES.md, sessions 13 and 22).
 * wgmma on e4m3 is native (QGMMA): K's bytes are the A operand straight from shared memory, no instruction a byte.
 *
 * Products (one warpgroup of 128 threads; common/wgmma_fp8.cuh):
 *   S^T (64 keys x N) = K (64 keys x D, shared, K-major: a K row is d-contiguous) Q^T (D x N, shared), D / 32 k32
 *     steps a 64-key tile. N = 2 TM: column 2r + t is term t of packed row r's Q, scaled by 2^e so the tile's
 *     largest finite |q| lies in [128, 256) and split into two e4m3 terms q = t0 + t1 (exact for bf16 q >= 2^-2,
 *     the rest below 2^-10 of the largest: attn/decode_direct.cuh's rule). A thread's accumulator columns 2c, 2c+1
 *     are both terms of one packed row, so a score is the sum of its own two accumulators.
 *   O^T (D x N) += V^T (D x 64 keys) P^T (64 keys x N): P (scaled by 256) as two e4m3 terms, the columns of P^T in
 *     shared memory; V^T from registers. e4m3 wgmma has no transposed operand, and V^T's A fragment needs four keys'
 *     bytes of one d in a register while a V row holds d contiguous, so each thread reads one 32-bit word (4 d) of
 *     16 keys a 64-key tile from shared memory and transposes them 4 x 4 by byte permutes (8 a 16 bytes).
 *   Orders chosen so that works: O^T's rows (d) are free to permute (undone at the store): tile jd's row
 *     16w + g + 8h is d 4 (8w + g) + 2 jd + h, so a thread's four d are one word of a V row. The order of the keys
 *     inside a k32 step is free too, if P^T uses the same one: slot 16 h + 4 c + i (h 0..1, c 0..3, i 0..3) is key
 *     8 i + 2 c + h, which puts a lane's four words of an instruction in four rows whose words fall in distinct
 *     banks (rows 144 bytes apart: bank 8c + 4h + 8w + g).
 *   Hopper's FP8 tensor cores accumulate with fewer bits than fp32 (DeepSeek-V3's report: ~14), so no product
 *   chains in their accumulators: each k32 step of S^T and each 64-key tile's O^T is its own product (from zero),
 *   summed in fp32. k_scale * 2^-e joins the score scale, v_scale / 256 the epilogue.
 *
 * Tiling. Packed row pr = i G + g (query row i, head h0 + g), grid (splits, hkv * cdiv(G sq, TM), b), as
 * attn/decode_direct.cuh. The CTA walks its split's keys in blocks of 64 NB keys, K and V of a block landing in a
 * cp.async stage (KF_STAGES - 1 blocks in flight); the softmax max of a block is the warpgroup's (the four warps
 * hold different keys of the same rows), exchanged through shared memory: three barriers a block.
 *
 * Loads. Thread t copies 16-byte chunk t % 8 of rows t / 8 + 16 m (m = 0, 1, ... over the split), K to the
 * 128-byte-swizzled tile wgmma reads, V to rows of 144 bytes. Keys at or past kend are zero-filled, no byte past
 * a length read (NaN there cannot leak, and a zero V times P = 0 adds nothing). Paged K/V: the thread's row
 * walks the block table by adds (16 rows a step), one table read a page.
 *
 * Masking, empty rows, sinks, splits, the epilogue: as attn/decode_direct.cuh (the same KF_MUTANT_ lines).
 */
#define KF_CAP_BEFORE_MAX 1 // KF_MUTANT_CAPORDER
#define KF_NB (KF_BN / 64)                               /* 64-key tiles a block */
#define KF_W8_N (2 * KF_TM)                              /* wgmma columns */
#define KF_W8_NG (KF_TM / 4)                             /* 8-column groups: packed rows 4 jg + c */
#define KF_W8_VP (KF_D + 16)                             /* V row pitch in shared memory (bytes) */
#define KF_W8_QB (KF_W8_N * 128)                         /* Q^T (and P^T): N rows of 128 bytes */
#define KF_W8_KB (KF_BN * KF_D)                          /* K bytes a stage */
#define KF_W8_STAGE (KF_W8_KB + KF_BN * KF_W8_VP)        /* K | V, a multiple of 1024 */
#define KF_W8_RED (2 * KF_W8_QB + KF_STAGES * KF_W8_STAGE)   /* [4 warps][TM] fp32: block maxima, then sums */
#define KF_W8_CPR (KF_D / 16)                            /* 16-byte chunks a row */
#define KF_W8_RPI (128 / KF_W8_CPR)                      /* rows a copy round */

#if !KF_BF16 || !KF_KV8 || KF_D != 128 || (KF_TM != 4 && KF_TM != 8 && KF_TM != 16) || (KF_NB != 1 && KF_NB != 2) \
    || KF_STAGES < 2 || KF_STAGES > 4
#error "kforge attn decode_wg8: invalid configuration (bf16 Q, FP8 K/V, head dim 128, tm 4/8/16, nb 1/2, 2..4 stages)"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
#error "kforge attn decode_wg8: needs sm_90a (wgmma)"
#endif

extern "C" __global__ void __launch_bounds__(128, 1)
KF_FWD_NAME(const kf_attn_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __attribute__((aligned(1024))) unsigned char kf_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z;
    const kf_u32 sbase = (kf_smem_u32(kf_smem) + 1023u) & ~1023u;   /* the swizzle is a function of address bits */
    const kf_u32 sQ = sbase, sP = sbase + KF_W8_QB, sKV = sbase + 2 * KF_W8_QB;
    float *red = (float *)(kf_smem + (sbase - kf_smem_u32(kf_smem)) + KF_W8_RED);

    /* ---- this CTA's packed rows and key range (attn/decode_rows.cuh) */
    kf_dec_rows x;
    if (!kf_dec_rows_of(p, x))
        return;
    const int h = x.h, kvh = x.kvh, r0 = x.r0, n_q = x.n_q, k0 = x.k0, row0 = x.row0;
    const int kbeg = x.kbeg, kend = x.kend, kstop = x.kstop, nsplit = p.splits, split = blockIdx.x;
    const int nblk = kstop > kbeg ? (kstop - kbeg + KF_BN - 1) / KF_BN : 0;

    /* ---- global bases (bytes of K/V) */
    const kf_u16 *qg = (const kf_u16 *)p.q + (p.cu_seqlens_q ? 0 : (long long)b * p.q_sb) + (long long)r0 * p.q_ss;
    const int *bt = p.block_table ? p.block_table + (long long)b * p.bt_sb : 0;
    const long long kvb = p.cu_seqlens_k ? 0 : (long long)b;
    const int lr = tid / KF_W8_CPR, lc = tid % KF_W8_CPR;   /* this thread's first row and its chunk */
    const unsigned char *kg = (const unsigned char *)p.k + (long long)kvh * p.k_sh + lc * 16
                              + (bt ? 0 : kvb * p.k_sb + (long long)k0 * p.k_ss);
    const unsigned char *vg = (const unsigned char *)p.v + (long long)kvh * p.v_sh + lc * 16
                              + (bt ? 0 : kvb * p.v_sb + (long long)k0 * p.v_ss);

    /* ---- Q^T: the two e4m3 terms of each packed row into shared memory (rows 2r, 2r + 1), 4 d a thread a round */
    float qinv;                                           /* q = the terms' sum * 2^-e */
    {
        float qf[KF_TM / 4][4];
        float m = 0.f;                                    /* the largest finite |q| of the tile */
#pragma unroll
        for (int it = 0; it < KF_TM / 4; ++it) {
            const int idx = tid + 128 * it, r = idx >> 5, d4 = idx & 31;
            const int pr = row0 + r, i = pr / KF_G, hh = h + pr % KF_G;
            kf_u32 w0 = 0, w1 = 0;
            if (i < n_q) {
                const uint2 v = *(const uint2 *)(qg + (long long)i * p.q_ss + (long long)hh * p.q_sh + 4 * d4);
                w0 = v.x, w1 = v.y;
            }
            qf[it][0] = kf_to_float((kf_u16)(w0 & 0xffffu)), qf[it][1] = kf_to_float((kf_u16)(w0 >> 16));
            qf[it][2] = kf_to_float((kf_u16)(w1 & 0xffffu)), qf[it][3] = kf_to_float((kf_u16)(w1 >> 16));
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float a = fabsf(qf[it][e]);
                m = fmaxf(m, a <= 3.4028235e38f ? a : 0.f);
            }
        }
        float qsc;
        kf_w8_qscale_wg(m, red, warp, lane, qsc, qinv);
#pragma unroll
        for (int it = 0; it < KF_TM / 4; ++it) {
            const int idx = tid + 128 * it, r = idx >> 5, d4 = idx & 31;
            float (&x)[4] = qf[it];
#pragma unroll
            for (int e = 0; e < 4; ++e)
                x[e] *= qsc;                              /* exact: a power of two, in range */
            kf_u32 t0, t1;
            kf_w8_qterms(x, t0, t1);
            kf_w8_sts32(kf_w8_at(sQ, 2 * r, 4 * d4), t0);
            kf_w8_sts32(kf_w8_at(sQ, 2 * r + 1, 4 * d4), t1);
        }
        kf_fence_proxy_async();                           /* Q^T (generic stores) before wgmma reads it; the first
                                                           * block's barrier orders it across threads */
    }

    const int sh8 = kvh; // KF_MUTANT_FP8HEAD
    /* scores = fragment * k_scale * 2^-e (q scaled by 2^e); O = fragment * v_scale / 256 (P scaled by 256) */
    const float kq = p.k_scale[sh8] * qinv, vq = p.v_scale[sh8] * (1.f / 256.f); // KF_MUTANT_QSCALE
    KF_SCORE_SCALES(p, kq);   /* sl2, snat (capm): common/attn_features.cuh */

    /* this thread's packed rows 4 jg + t: query row */
    int qi[KF_W8_NG];
#pragma unroll
    for (int jg = 0; jg < KF_W8_NG; ++jg)
        qi[jg] = (row0 + 4 * jg + t) / KF_G;
    float o[2][KF_W8_N / 2];                              /* O^T d-tiles 0, 1 */
    float rmax[KF_W8_NG], rsum[KF_W8_NG];
#pragma unroll
    for (int jg = 0; jg < KF_W8_NG; ++jg)
        rmax[jg] = KF_NEG_INF, rsum[jg] = 0.f;
#pragma unroll
    for (int e = 0; e < KF_W8_N / 2; ++e)
        o[0][e] = o[1][e] = 0.f;

    /* ---- loads: this thread's rows kbeg + lr + 16 m, m = 0, 1, ... in order; paged: the walk's page and row */
    const int ps = p.page_size;
    int wq = 0, win = 0, wpg = 0;                         /* table index, row in the page, the page */
    if (bt && kbeg + lr < kend) {
        wq = (kbeg + lr) / ps;
        win = kbeg + lr - wq * ps;
        wpg = bt[wq];
    }
    auto load_block = [&](int blk, int st, auto pg) {
        constexpr bool PG = decltype(pg)::value;
        const kf_u32 sK = sKV + st * KF_W8_STAGE, sV = sK + KF_W8_KB;
#pragma unroll
        for (int it = 0; it < KF_BN / KF_W8_RPI; ++it) {
            const int rr = lr + KF_W8_RPI * it, j = kbeg + blk * KF_BN + rr;
            const bool ok = j < kend;
            long long ko, vo;
            if constexpr (PG) {
                ko = (long long)wpg * p.k_sb + (long long)win * p.k_ss;
                vo = (long long)wpg * p.v_sb + (long long)win * p.v_ss;
                win += KF_W8_RPI;                         /* the next row of this thread */
                if (win >= ps) {
                    do {
                        win -= ps, ++wq;
                    } while (win >= ps);
                    if (j + KF_W8_RPI < kend)
                        wpg = bt[wq];
                }
            } else {
                ko = (long long)j * p.k_ss;
                vo = (long long)j * p.v_ss;
            }
            kf_cp_async16(sK + rr * 128 + (((lc ^ rr) & 7) << 4), ok ? kg + ko : kg, ok);
            kf_cp_async16(sV + rr * KF_W8_VP + lc * 16, ok ? vg + vo : vg, ok);
        }
    };

    /* ---- the key loop (one instantiation for paged K/V, one for contiguous) */
    const kf_u32 vrow = 4 * (8 * warp + g);               /* this thread's word of a V row: d vrow .. vrow + 3 */
    auto keys = [&](auto pg) {
#pragma unroll 1
        for (int s = 0; s < KF_STAGES - 1; ++s) {
            if (s < nblk)
                load_block(s, s, pg);
            kf_cp_async_commit();
        }
#pragma unroll 1
        for (int blk = 0; blk < nblk; ++blk) {
            const int st = blk % KF_STAGES;
            const kf_u32 sK = sKV + st * KF_W8_STAGE, sV = sK + KF_W8_KB;
            const int j0 = kbeg + blk * KF_BN;
            kf_cp_async_wait<KF_STAGES - 2>();
            kf_fence_proxy_async();                       /* this thread's copies, then wgmma's (async proxy) reads */
            __syncthreads();                              /* (A) the block landed; block blk - 1's stage is free */
            if (blk + KF_STAGES - 1 < nblk)
                load_block(blk + KF_STAGES - 1, (blk + KF_STAGES - 1) % KF_STAGES, pg);
            kf_cp_async_commit();

            /* S^T = K Q^T: NB 64-key tiles, D / 32 k32 steps each */
            float sacc[KF_NB][KF_D / 32][KF_W8_N / 2] = {};
            kf_wgmma_fence();
#pragma unroll
            for (int m = 0; m < KF_NB; ++m)
#pragma unroll
                for (int kk = 0; kk < KF_D / 32; ++kk)   /* each k32 step its own product (fp32 sums below) */
                    kf_wgmma_e4m3_ss(sacc[m][kk], kf_gmma_desc(sK + m * 64 * 128 + kk * 32, 16, 1024),
                                     kf_gmma_desc(sQ + kk * 32, 16, 1024), 0);
            kf_wgmma_commit();
            kf_wgmma_wait<0>();
#pragma unroll
            for (int m = 0; m < KF_NB; ++m)
#pragma unroll
                for (int kk = 0; kk < KF_D / 32; ++kk)
                    kf_wg_fence_regs(sacc[m][kk]);

            /* scores of keys 64 m + 16 warp + g + 8 hh, packed rows 4 jg + t: the sum of the two Q terms' columns
             * over the k32 steps */
            float s[KF_NB][KF_W8_NG][2];
#pragma unroll
            for (int m = 0; m < KF_NB; ++m)
#pragma unroll
                for (int jg = 0; jg < KF_W8_NG; ++jg)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        float x = 0.f;
#pragma unroll
                        for (int kk = 0; kk < KF_D / 32; ++kk)
                            x += sacc[m][kk][4 * jg + 2 * hh] + sacc[m][kk][4 * jg + 2 * hh + 1];
#if KF_CAP && KF_CAP_BEFORE_MAX
                        x = kf_softcap(x, capm, p.softcap);
#endif
                        s[m][jg][hh] = x;
                    }
            /* mask: keys past the split / sequence end, past each row's causal bound, before its window */
            if (kf_dec_needs_mask(x, j0, KF_BN)) {
#pragma unroll
                for (int m = 0; m < KF_NB; ++m)
#pragma unroll
                    for (int jg = 0; jg < KF_W8_NG; ++jg)
#pragma unroll
                        for (int hh = 0; hh < 2; ++hh)
                            if (kf_dec_hidden(x, j0 + 64 * m + 16 * warp + g + 8 * hh, qi[jg]))
                                s[m][jg][hh] = KF_NEG_INF;
            }
            /* the block's row maxima: over the lane's keys, the warp's (g), then the four warps' */
            float mx[KF_W8_NG];
#pragma unroll
            for (int jg = 0; jg < KF_W8_NG; ++jg) {
                float x = KF_NEG_INF;
#pragma unroll
                for (int m = 0; m < KF_NB; ++m)
                    x = fmaxf(x, fmaxf(s[m][jg][0], s[m][jg][1]));
                x = kf_w8_gmax(x);
                if (g == 0)
                    red[warp * KF_TM + 4 * jg + t] = x;
            }
            __syncthreads();                                  /* (B) */
            float corr[KF_W8_NG];
#pragma unroll
            for (int jg = 0; jg < KF_W8_NG; ++jg) {
                const int r = 4 * jg + t;
                mx[jg] = fmaxf(fmaxf(rmax[jg], fmaxf(red[r], red[KF_TM + r])),
                               fmaxf(red[2 * KF_TM + r], red[3 * KF_TM + r]));
#if KF_CAP && !KF_CAP_BEFORE_MAX
                /* the planted bug: the max taken over the raw scaled scores, the cap applied after it */
                mx[jg] = (mx[jg] == KF_NEG_INF) ? mx[jg] : mx[jg] * p.scale * kq;
#pragma unroll
                for (int m = 0; m < KF_NB; ++m)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh)
                        if (s[m][jg][hh] != KF_NEG_INF)
                            s[m][jg][hh] = kf_softcap(s[m][jg][hh], capm, p.softcap);
#endif
                const float mu = (mx[jg] == KF_NEG_INF) ? 0.f : mx[jg] * sl2;   /* no -inf - -inf */
                corr[jg] = kf_exp2(rmax[jg] * sl2 - mu);
                rmax[jg] = mx[jg];
                float psum = 0.f;
#pragma unroll
                for (int m = 0; m < KF_NB; ++m) {
                    s[m][jg][0] = kf_exp2(s[m][jg][0] * sl2 - mu);
                    s[m][jg][1] = kf_exp2(s[m][jg][1] * sl2 - mu);
                    psum += s[m][jg][0] + s[m][jg][1];
                    /* P x 256 as two e4m3 terms (through fp16, as attn/decode_direct.cuh) into P^T rows 2r, 2r + 1 */
                    kf_u32 hi, lo;
                    kf_w8_pterms(256.f * s[m][jg][0], 256.f * s[m][jg][1], hi, lo);
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int kl = 64 * m + 16 * warp + g + 8 * hh, k = kl & 31;
                        const int slot = (kl & ~31) + 16 * (k & 1) + 4 * ((k >> 1) & 3) + (k >> 3);
                        kf_w8_sts8(kf_w8_at(sP, 2 * r, slot), (hi >> (8 * hh)) & 0xffu);
                        kf_w8_sts8(kf_w8_at(sP, 2 * r + 1, slot), (lo >> (8 * hh)) & 0xffu);
                    }
                }
                rsum[jg] = rsum[jg] * corr[jg] + psum;        /* a per-thread partial; reduced at the end */
            }
            kf_fence_proxy_async();                           /* P^T's stores, then wgmma's reads */
            __syncthreads();                                  /* (C) */

            /* O^T partial = V^T P^T over the block's 2 NB k32 steps (from zero), then O = O corr + partial in fp32 */
            float oc[2][KF_W8_N / 2] = {};
            kf_u32 va[2 * KF_NB][2][4];
#pragma unroll
            for (int ks = 0; ks < 2 * KF_NB; ++ks) {
                kf_u32 w[2][4], tr[2][4];
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
                    for (int i = 0; i < 4; ++i)               /* key 8 i + 2 t + hh of the step: slot 16 hh + 4 t + i */
                        w[hh][i] = kf_w8_lds(sV + (32 * ks + 8 * i + 2 * t + hh) * KF_W8_VP + vrow);
                    kf_tr4x4(w[hh], tr[hh]);                  /* tr[hh][c]: d vrow + c of those four keys */
                }
                kf_w8_vfrag(tr, va[ks]);                      /* tile jd's rows g, g + 8: d vrow + 2 jd, + 1 */
            }
            kf_w8_pv(oc, va, sP);
#pragma unroll
            for (int jd = 0; jd < 2; ++jd)
#pragma unroll
                for (int e = 0; e < KF_W8_N / 2; ++e)
                    o[jd][e] = fmaf(o[jd][e], corr[e >> 2], oc[jd][e]);
        }
    };
    if (bt)
        keys(kf_dec_flag<true>());
    else
        keys(kf_dec_flag<false>());

    /* ---- the row sums over the warpgroup (every thread holds the same row maxima) */
    kf_w8_row_sums<KF_W8_NG, KF_TM>(rsum, red, warp, g, t);

    /* ---- epilogue: O / sum -> o (or the split's fp32 partial), lse = max * scale + log(sum); a thread's four d
     * (vrow .. vrow + 3) of its packed rows 4 jg + t, each the sum of the two P-term columns */
#pragma unroll
    for (int jg = 0; jg < KF_W8_NG; ++jg) {
        const int r = 4 * jg + t, pr = row0 + r, i = pr / KF_G, hh = h + pr % KF_G;
        if (i >= n_q)
            continue;
        const float l = red[r] + red[KF_TM + r] + red[2 * KF_TM + r] + red[3 * KF_TM + r];
        float lse;
        const float inv = kf_attn_finish(p, rmax[jg], l, snat, hh, nsplit, lse) * vq;
        kf_dec_put4(p, b, r0 + i, hh, vrow, o[0][4 * jg] + o[0][4 * jg + 1], o[0][4 * jg + 2] + o[0][4 * jg + 3],
                    o[1][4 * jg] + o[1][4 * jg + 1], o[1][4 * jg + 2] + o[1][4 * jg + 3], inv, lse, split, nsplit);
    }
}

#endif
