/* parts/decode_sm90.cuh: absorbed-MLA split-score decode on Hopper (sm_90a): wgmma, a cp.async producer warpgroup, two consumers sharing the QK reduction */
#ifndef KF_PARTS_DECODE_SM90_CUH
#define KF_PARTS_DECODE_SM90_CUH

/*
 * Compile-time constants: those of parts/decode.cuh (templates/attn_parts_decode.lua, impl "wgmma"), restricted
 * to KF_L 1, KF_TM 64, KF_WN 1, KF_BN 32 or 64, KF_STAGES >= 2, a value that aliases the first KF_DV columns of
 * key part 0 (KF_VALIAS_OFF8 is the first 8-column chunk of V in the tile row: 0), KF_DQ = KF_DQP = KF_W a multiple
 * of 64 (Q columns and tile columns in the same order), KF_DV a multiple of 128 up to 512, page size 0 or a
 * multiple of KF_BN. Needs common/types.cuh, common/mma.cuh (cp.async), common/wgmma.cuh, common/parts_params.h and
 * parts/decode_sm90_common.cuh (what it shares with parts/decode_sm90_ks.cuh: the CTA's rows and key range, the
 * mbarriers' set-up, the copy of Q, the epilogue).
 *
 * Same contract as parts/decode.cuh (common/parts_params.h): grid (splits, hkv * cdiv(G * sq, 64), b); the CTA
 * owns packed rows pr = row0 .. row0+63 (pr = i * G + g: query row i, head h0 + g) of one kv head and the key
 * range of its split; split 1 writes o and lse, splits > 1 write the fp32 partials that kf_attn_combine merges.
 *
 * Threads: 3 warpgroups (384), as attn/fwd_sm90.cuh (after FlashAttention-3's warp specialisation). Warpgroup 0
 * is the producer: its 128 threads copy Q once and then each key block of every cache (paged: one block-table
 * lookup per block, a block lies in one page) with cp.async straight into the 128-byte-swizzled panels wgmma
 * reads, zero-filling keys at or past the key end (NaN tails and unused pages are never read), and signal each
 * copy's landing with cp.async.mbarrier.arrive. setmaxnreg moves registers from it (40) to the consumers (232).
 *
 * Warpgroups 1 and 2 are consumers, both on the same 64 rows; they split the QK reduction (the idea of
 * FlashMLA's two warpgroups sharing one 64-row tile): consumer c computes a partial S_c (64 x BN, fp32) over
 * k16 steps c * KS .. c * KS + KS - 1 of the KF_DQ columns (wgmma m64nBNk16, A = Q and B = K from shared memory,
 * both K-major). Each writes S_c to shared memory, a named barrier, each reads the other's and adds: S_0 + S_1
 * and S_1 + S_0 are the same fp32 value (addition is commutative), so both hold bit-identical S and compute
 * the same mask, row max and row sum with no further exchange. Then consumer c does O_c += P V_c over value
 * columns c * DV/2 .. +DV/2 (wgmma m64n(DV/2)k16 in chunks of 256, 128 or 64 columns; A = P from registers,
 * the FA3 accumulator-to-fragment conversion; B = V read from the same key tile as an MN-major operand: keys
 * as rows, value columns contiguous, so V is read from shared memory once and never transposed). Online
 * softmax in base 2 with the scale folded, masking as parts/decode.cuh: keys past kend -inf, causal keys
 * j > i + n_kv - n_q -inf, a row with no visible key writes o = 0 and lse = -inf.
 *
 * Pipeline: KF_STAGES slots, each one key tile. Barriers per slot: full (128 producer arrivals, each fired when
 * that thread's copies have landed) and empty (256 consumer arrivals once P V of the slot has completed: V is
 * the tile, so the slot is free only then). Use u of a slot waits parity u & 1. The consumers fence the async
 * proxy after each full wait, before wgmma reads what cp.async wrote. bar_q: Q landed (128 arrivals). The S
 * exchange uses named barrier 1 (the 256 consumer threads) and two buffers by block parity: a consumer writes
 * buffer n & 1 of block n only after passing block n-1's barrier, which the other consumer reaches only after
 * reading buffer (n-2) & 1 = n & 1: one barrier per block suffices. A wait that never completes traps
 * (kf_mbar_wait) rather than hanging.
 *
 * Shared memory (1024-byte aligned): Q [DQ/64 panels][64 rows][64] | STAGES x tile [W/64 panels][BN rows][64] |
 * S exchange [2 parities][2 consumers][BN/8][128 threads] float4 | mbarriers (q; full, empty per stage). A
 * panel holds 64 columns (128 bytes) of every row, 8-row atoms of 1024 bytes, 16-byte chunk c of row r at
 * c ^ (r & 7) (the 128-byte swizzle); a k16 step kk of the reduction starts at panel kk / 4, byte (kk % 4) * 32.
 *
 * Mutation-test hooks as parts/decode.cuh: KF_VALIAS_OFF8 (KF_MUTANT_VALUE) places V, KF_MUTANT_PAGE the
 * in-page offset. KF_SCORE_PARTS (base + delta) does not apply: every key part is in the score.
 */
#define KF_PD_QPANEL (64 * 128)                     /* bytes of one 64-column panel of Q (64 rows) */
#define KF_PD_KPANEL (KF_BN * 128)                  /* bytes of one 64-column panel of a key tile */
#define KF_PD_Q_BYTES ((KF_DQ / 64) * KF_PD_QPANEL)
#define KF_PD_TILE_BYTES ((KF_W / 64) * KF_PD_KPANEL)
#define KF_PD_X_OFF (KF_PD_Q_BYTES + KF_STAGES * KF_PD_TILE_BYTES)
#define KF_PD_X_BYTES (64 * KF_BN * 4)              /* one consumer's partial S */
#define KF_PD_BAR_OFF (KF_PD_X_OFF + 4 * KF_PD_X_BYTES)
#define KF_PD_KS (KF_DQ / 32)                       /* k16 steps per consumer: half of KF_DQ / 16 */
#define KF_PD_SN (KF_BN / 2)                        /* S accumulators per thread */
#define KF_PD_DVH (KF_DV / 2)                       /* value columns per consumer */
#define KF_PD_NV (KF_PD_DVH == 256 ? 256 : (KF_PD_DVH % 128 == 0 ? 128 : 64))   /* columns per P V wgmma */
#define KF_PD_NVC (KF_PD_DVH / KF_PD_NV)

#if KF_L != 1 || KF_TM != 64 || KF_WN != 1 || (KF_BN != 32 && KF_BN != 64) || KF_STAGES < 2 || KF_DQ % 64 != 0 \
    || KF_DQP != KF_DQ || KF_W != KF_DQ || KF_DV % 128 != 0 || KF_DV > 512 || KF_VALIAS_OFF8 % 8 != 0         \
    || (KF_PS && KF_PS % KF_BN != 0)
#error "kforge parts decode sm90: invalid configuration (see the header of parts/decode_sm90.cuh)"
#endif

/* The producer's copies of cache CI (DIM columns) for keys j0 .. j0+BN-1 into tile chunks OFF8 ..; zero-fill
 * from kend on (nothing is read there). pg: the block's page (paged caches), t: thread of the producer. (Not shared
 * with parts/decode_sm90_ks.cuh's kf_ks_load_cache: see parts/decode_sm90_common.cuh.) */
template <int CI, int OFF8, int DIM>
__device__ __forceinline__ void kf_pd_load_cache(kf_u32 stile, const kf_parts_params &p, int pg, int b, int kvh, int j0,
                                                 int kend, int t)
{
    constexpr int C8 = DIM / 8, N = KF_BN * C8;
    const kf_u16 *base = (const kf_u16 *)p.c[CI].p + (long long)kvh * p.c[CI].sh;
    const long long ss = p.c[CI].ss;
#if KF_PS
    base += (long long)pg * p.c[CI].sb;
#else
    base += (long long)b * p.c[CI].sb;
#endif
#pragma unroll 2
    for (int it = 0; it < (N + 127) / 128; ++it) {
        const int idx = t + it * 128;
        if (N % 128 == 0 || idx < N) {
            const int r = idx / C8, c = idx % C8;
            const int j = j0 + r;
            const bool ok = j < kend;
#if KF_PS
            /* the block lies in one page (blocks start at multiples of BN, BN divides the page size) */
            const kf_u16 *src = ok ? base + (long long)(j % KF_PS) * ss + c * 8 : base; // KF_MUTANT_PAGE
#else
            const kf_u16 *src = ok ? base + (long long)j * ss + c * 8 : base;
#endif
            kf_cp_async16(stile + kf_wg_swz(KF_BN, r, OFF8 + c), src, ok);
        }
    }
}

/* S (+)= Q K^T over this consumer's k16 steps kk0 .. kk0+KS-1 (issue only: commit and wait are the caller's) */
__device__ __forceinline__ void kf_pd_qk(float (&sc)[KF_PD_SN], kf_u32 sQ, kf_u32 sT, int kk0)
{
    kf_wgmma_fence();
#pragma unroll
    for (int k = 0; k < KF_PD_KS; ++k) {
        const int kk = kk0 + k;
        const kf_u32 off = (kk & 3) * 32;               /* k16 step inside a 64-column panel */
        kf_wgmma_ss(sc, kf_gmma_desc(sQ + (kk >> 2) * KF_PD_QPANEL + off, 16, 1024),
                       kf_gmma_desc(sT + (kk >> 2) * KF_PD_KPANEL + off, 16, 1024), k > 0);
    }
}

/* O_c += P V_c (issue only). sV: the tile's panel of this consumer's first value column. V MN-major: 64-column
 * panels KF_PD_KPANEL apart (LBO), 8-key atoms 1024 bytes apart (SBO), 16 keys (2048 bytes) per k step. */
__device__ __forceinline__ void kf_pd_pv(float (&o)[KF_PD_NVC][KF_PD_NV / 2], kf_u32 (&pa)[KF_BN / 16][4], kf_u32 sV)
{
#pragma unroll
    for (int t = 0; t < KF_PD_NVC; ++t)
        kf_wg_fence_regs(o[t]);
    kf_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KF_BN / 16; ++kk)
#pragma unroll
        for (int t = 0; t < KF_PD_NVC; ++t)
            kf_wgmma_rs(o[t], pa[kk],
                           kf_gmma_desc(sV + t * (KF_PD_NV / 64) * KF_PD_KPANEL + kk * 16 * 128, KF_PD_KPANEL, 1024));
}

extern "C" __global__ void __launch_bounds__(384, 1)
kf_parts_decode(const kf_parts_params p)
{
    KF_PD_CTA(KF_BN)   /* tid, b, kvh, h, split, n_q, n_kv, row0; kbeg .. kend, kstop, kmask, nblk; sbase, gbase */
    const kf_u32 sQ = sbase, sTa = sbase + KF_PD_Q_BYTES;
    const kf_u32 bar_q = sbase + KF_PD_BAR_OFF;
    const kf_u32 bar_f = bar_q + 8, bar_e = bar_f + 8 * KF_STAGES;

    kf_pd_init_bars<KF_STAGES, 256>(tid, bar_q, bar_f, bar_e);

    if (tid < 128) {
        /* ---------------- producer warpgroup */
        kf_setmaxnreg_dec<40>();
#if KF_PS
        const int *bt = p.block_table + (long long)b * p.bt_sb;
#endif
        if (nblk > 0) {   /* Q, rows past n_q zero-filled */
            kf_pd_load_q(sQ, bar_q, p, row0, h, b, n_q, tid);
        }
#pragma unroll 1
        for (int n = 0; n < nblk; ++n) {
            const int s = n % KF_STAGES, u = n / KF_STAGES;
            const kf_u32 sT = sTa + s * KF_PD_TILE_BYTES;
            const int j0 = kbeg + n * KF_BN;
#if KF_PS
            const int pg = bt[j0 / KF_PS];                  /* j0 < kend: a page of the sequence */
#else
            const int pg = 0;
#endif
            if (u > 0)
                kf_mbar_wait(bar_e + 8 * s, (u - 1) & 1);   /* both consumers are done with use u-1 of the slot */
#define KF_PD_LOAD_ONE(CI, OFF8, DIM) kf_pd_load_cache<CI, OFF8, DIM>(sT, p, pg, b, kvh, j0, kend, tid);
            KF_FOR_CACHES(KF_PD_LOAD_ONE)
#undef KF_PD_LOAD_ONE
            kf_mbar_arrive_cp_async(bar_f + 8 * s);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else {
        /* ---------------- consumer warpgroups: the same 64 rows, half of the reduction / of the value columns each */
        kf_setmaxnreg_inc<232>();
        const int ct = tid - 128, wg = ct >> 7, lane = tid & 31, w = (ct >> 5) & 3;
        const int xt = ct & 127;                           /* thread in the consumer warpgroup */
        int qi0, qi1, hh;
        kf_pd_row(row0, w * 16 + (lane >> 2), h, qi0, hh);       /* query rows of accumulator halves 0 and 1 */
        kf_pd_row(row0, w * 16 + (lane >> 2) + 8, h, qi1, hh);
        const float sl2 = p.scale_log2;
        const int kk0 = wg * KF_PD_KS;
        /* first tile panel of this consumer's value columns */
        const int vpanel = KF_VALIAS_OFF8 / 8 + wg * (KF_PD_DVH / 64);

        float o[KF_PD_NVC][KF_PD_NV / 2];
#pragma unroll
        for (int t = 0; t < KF_PD_NVC; ++t)
#pragma unroll
            for (int e = 0; e < KF_PD_NV / 2; ++e)
                o[t][e] = 0.f;
        float rmax0 = KF_NEG_INF, rmax1 = KF_NEG_INF, rsum0 = 0.f, rsum1 = 0.f;
        float sc[KF_PD_SN];
        kf_u32 pa[KF_BN / 16][4];

        if (nblk > 0)
            kf_mbar_wait(bar_q, 0);
#pragma unroll 1
        for (int n = 0; n < nblk; ++n) {
            const int s = n % KF_STAGES, ph = (n / KF_STAGES) & 1;
            const kf_u32 sT = sTa + s * KF_PD_TILE_BYTES;
            const int j0 = kbeg + n * KF_BN;
            kf_mbar_wait(bar_f + 8 * s, ph);
            kf_fence_proxy_async();
            kf_pd_qk(sc, sQ, sT, kk0);
            kf_wgmma_commit();
            kf_wgmma_wait<0>();
            kf_wg_fence_regs(sc);

            /* S = S_0 + S_1: this consumer's partial out, the other's in (buffer n & 1, see the header) */
            {
                float4 *xm = (float4 *)(gbase + KF_PD_X_OFF + (2 * (n & 1) + wg) * KF_PD_X_BYTES) + xt;
                const float4 *xo = (const float4 *)(gbase + KF_PD_X_OFF + (2 * (n & 1) + 1 - wg) * KF_PD_X_BYTES) + xt;
#pragma unroll
                for (int q = 0; q < KF_PD_SN / 4; ++q)
                    xm[q * 128] = make_float4(sc[4 * q], sc[4 * q + 1], sc[4 * q + 2], sc[4 * q + 3]);
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
                for (int q = 0; q < KF_PD_SN / 4; ++q) {
                    const float4 v = xo[q * 128];
                    sc[4 * q] += v.x;
                    sc[4 * q + 1] += v.y;
                    sc[4 * q + 2] += v.z;
                    sc[4 * q + 3] += v.w;
                }
            }

            /* mask, online softmax (rows qi0: sc[4c], sc[4c+1]; qi1: sc[4c+2], sc[4c+3]), O_c *= corr, P -> A fragments */
            float corr0, corr1;
            KF_WG_SOFTMAX(KF_BN / 8, KF_CAUSAL, sc, j0, kmask, kend, coff, qi0, qi1, lane, sl2, rmax0, rmax1, rsum0,
                          rsum1, corr0, corr1);
#pragma unroll
            for (int t = 0; t < KF_PD_NVC; ++t)
                kf_wg_scale_rows(o[t], corr0, corr1);
            kf_wg_pack_p(pa, sc);

            kf_pd_pv(o, pa, sT + vpanel * KF_PD_KPANEL);
            kf_wgmma_commit();
            kf_wgmma_wait<0>();
#pragma unroll
            for (int t = 0; t < KF_PD_NVC; ++t)
                kf_wg_fence_regs(o[t]);
            kf_wg_fence_frags(pa);                          /* pa was read by the wgmma until here */
            kf_mbar_arrive(bar_e + 8 * s);                  /* the slot (K and V) may be refilled */
        }

        rsum0 += __shfl_xor_sync(0xffffffffu, rsum0, 1);
        rsum0 += __shfl_xor_sync(0xffffffffu, rsum0, 2);
        rsum1 += __shfl_xor_sync(0xffffffffu, rsum1, 1);
        rsum1 += __shfl_xor_sync(0xffffffffu, rsum1, 2);

        /* ---- epilogue: O_c / sum -> o (or the split's fp32 partial), lse = max*scale + log(sum) (consumer 0) */
        KF_PD_EPILOGUE(w * 16 + (lane >> 2) + 8 * hf, wg);
    }
}

#endif
