/* parts/decode_sm90_ks.cuh: absorbed-MLA decode on Hopper (sm_90a), keys split between two consumer warpgroups (64-key blocks, P exchanged) */
#ifndef KF_PARTS_DECODE_SM90_KS_CUH
#define KF_PARTS_DECODE_SM90_KS_CUH

/*
 * impl "wgmma_ks" of attn_parts_decode (templates/attn_parts_decode.lua). Same contract as parts/decode.cuh
 * (common/parts_params.h): grid (splits, hkv * cdiv(G * sq, 64), b); the CTA owns packed rows pr = row0 ..
 * row0+63 (pr = i * G + g: query row i, head h0 + g; rows past G * sq are zero and never written) of one kv
 * head and the key range of its split; split 1 writes o and lse, splits > 1 the fp32 partials of kf_attn_combine.
 * Compile-time: KF_L 1, KF_TM 64, KF_WN 1, KF_BN 64, KF_STAGES 2, value = the first KF_DV columns of key part 0
 * (KF_VALIAS_OFF8: the first 8-column chunk of V, 0), KF_DQ = KF_DQP = KF_W a multiple of 64 with at least one
 * 64-column panel past the value (MLA: 576 = 512 latent + 64 rope), KF_DV 256 or 512, page size 0 or a multiple
 * of 64. Needs common/types.cuh, common/mma.cuh (cp.async), common/wgmma.cuh, common/parts_params.h and
 * parts/decode_sm90_common.cuh (what it shares with parts/decode_sm90.cuh: the CTA's rows and key range, the
 * mbarriers' set-up, the copy of Q, the epilogue).
 *
 * The idea (FlashMLA's Hopper decode kernel, deepseek-ai/FlashMLA csrc/sm90/decode/dense: two warpgroups on
 * one 64-row tile, each owning its own 64-key block and half of the value columns, P exchanged through shared
 * memory; written here from that design, not from its code). The previous impl (parts/decode_sm90.cuh) split
 * the QK reduction of 32-key blocks and re-read Q (72 KB) from shared memory for every 32 keys, which bound it.
 *
 * Threads: 3 warpgroups (384). Warpgroup 0, the producer (setmaxnreg 40), copies Q once and then every key
 * block with cp.async into 128-byte-swizzled panels (one block-table lookup per block: a block lies in one
 * page), zero-filling keys at or past kstop (NaN tails and unused pages are never read). Consumers 1 and 2
 * (setmaxnreg 232), c = 0, 1, run pairs of blocks: in pair t consumer c owns block n = 2t + c, held in slot c.
 * Per pair, consumer c:
 *   1. S_c = Q K_n^T (64 x 64, fp32; wgmma m64n64k16, A = Q and B = K from shared memory, 36 k16 steps at 576),
 *      its panels in the order they are refilled (below);
 *   2. masks S_c (keys >= kend, causal j > i + n_kv - n_q), takes its row max mx_c and exchanges it: both
 *      consumers then compute m' = max(m, max(mx_0, mx_1)), in the order (mx_0, mx_1) on both sides, so they hold
 *      the same fp32 m' bit for bit; corr = 2^((m - m') sl2);
 *   3. P_c = 2^(S_c sl2 - m' sl2) (rows: each consumer's partial sum l_c over its own keys, scaled by corr),
 *      O_c *= corr, P_c (bf16) to shared memory over the slot's first key-only panel (panel DV/64: MLA's rope
 *      columns, which only step 1 reads and which step 1 has finished with), fence.proxy.async;
 *   4. O_c += P_c V_n[c half] (wgmma m64n(DV/2)k16, A = P_c from registers, the accumulator-to-fragment
 *      conversion of FlashAttention-3; B = V read from the key tile as an MN-major operand);
 *   5. named barrier (P ready), O_c += P_c' V_n'[c half] (A = P_c' from shared memory, slot c' = 1 - c);
 *   O_c then holds sum over both blocks of P V for value columns c * DV/2 .. +DV/2 at the common max.
 * The sum of the row is l_0 + l_1 (each consumer's l_c is over its own keys at the same max), exchanged once
 * at the end; the empty tail (an odd number of blocks) is a phantom block the producer zero-fills and the
 * mask removes (all of its keys are >= kstop).
 *
 * Pipeline: two slots (Q 72 KB + 2 x 72 KB of 64-key tiles = 216 KB; three do not fit 227 KB), each in three
 * panel groups with their own full and empty mbarriers (128 arrivals each):
 *   group c of slot c ("own"): value panels of consumer c; last read by consumer c's step 4 -> freed mid-pair;
 *   group c' of slot c ("other"): value panels of consumer c'; last read by consumer c' step 5 -> end of pair;
 *   group 2 ("key-only" panels DV/64 .. DQ/64-1): rope, then P_c; last read by consumer c' step 5.
 * (Every read of step 1 precedes the creation of P_c, which precedes steps 4-5, so each group's last reader
 * above is also the last reader of its step-1 data.) The producer refills in the order the groups are freed
 * (own group of slot 0, own group of slot 1, then the rest), and step 1 of the next pair consumes the own group
 * first, so the early half of the next tiles streams in while the consumers finish the current pair (FlashMLA
 * orders its per-panel TMA barriers the same way). Use t of a slot waits full parity t & 1; the producer waits
 * empty parity (t - 1) & 1 before use t >= 1. The consumers fence the async proxy after each full wait (wgmma
 * reads what cp.async wrote) and after writing P. Named barriers (256 consumer threads): 1 after the row-max
 * writes, 2 after the P writes, 3 for the final sums. The max buffer of pair t+1 is written only after barrier 2
 * of pair t, which the other consumer passes only after reading pair t's maxima: one buffer suffices.
 *
 * Shared memory (1024-byte aligned): Q [DQ/64 panels][64][64] | 2 slots x [DQ/64 panels][64 keys][64] |
 * red: row maxima [2][64] and row sums [2][64] fp32 | mbarriers (q; full [2][3]; empty [2][3]). A panel is 64
 * columns (128 bytes) of every row, 8-row atoms of 1024 bytes, 16-byte chunk c of row r at c ^ (r & 7).
 *
 * Mutation hooks: KF_VALIAS_OFF8 (KF_MUTANT_VALUE: V one panel to the right), KF_MUTANT_PAGE (in-page offset),
 * KF_MUTANT_KSP (the exchanged P read from the consumer's own slot), KF_MUTANT_KSCAUSAL (the causal bound +1),
 * KF_MUTANT_KSLAG (wgmma_ksl: P_0 not brought to the pair's common max before consumer 1 reads it).
 *
 * KF_KS_LAG 1 (impl wgmma_ksl): the same producer, slots and panel groups; the consumers chain the row max instead
 * of exchanging it, so consumer 1 runs half a block behind consumer 0 (FlashMLA's order; see the lagged loop).
 *
 * KF_PARTS_TMA 1 (impl wgmma_tma, with KF_KS_LAG): the producer loads every block whose 64 keys lie below kstop by
 * the copy engine, one box a 64-column panel from the key caches' tensor maps (the kernel's second argument,
 * kf_parts_tmaps, encoded per call by runtime/parts_tmap.c), thread 0 expecting the panel group's bytes on its full
 * barrier, as FlashMLA's per-tile TMA barriers do; the block that reaches kstop keeps the cp.async path and its zero
 * fill. cp.async moved each 72 KB block as 4,608 16-byte requests through the load pipe; ncu of wgmma_ksl at
 * B128 Hq128 4K (H200, session 12): tensor pipe 33% active, 42% of warp stalls on the long scoreboard.
 */
#ifndef KF_KS_LAG
#define KF_KS_LAG 0                                   /* 1: impl wgmma_ksl, the lagged schedule */
#endif
#ifndef KF_PARTS_TMA
#define KF_PARTS_TMA 0                                /* 1: impl wgmma_tma, whole blocks by tensor map */
#endif
#define KF_KS_PANEL 8192                              /* bytes of one 64-column panel of 64 rows */
#define KF_KS_NP (KF_DQ / 64)                         /* panels of a Q row / tile row */
#define KF_KS_SLOT (KF_KS_NP * KF_KS_PANEL)
#define KF_KS_DVH (KF_DV / 2)                         /* value columns per consumer */
#define KF_KS_HP (KF_KS_DVH / 64)                     /* value panels per consumer */
#define KF_KS_PP (KF_DV / 64)                         /* the panel that receives P (first key-only panel) */
#define KF_KS_RED_OFF (3 * KF_KS_SLOT)
#define KF_KS_BAR_OFF (KF_KS_RED_OFF + 1024)

#if KF_L != 1 || KF_TM != 64 || KF_WN != 1 || KF_BN != 64 || KF_STAGES != 2 || KF_DQ % 64 != 0 || KF_DQP != KF_DQ \
    || KF_W != KF_DQ || (KF_DV != 256 && KF_DV != 512) || KF_DQ < KF_DV + 64 || KF_VALIAS_OFF8 % 8 != 0             \
    || (KF_PS && KF_PS % 64 != 0)
#error "kforge parts decode sm90 ks: invalid configuration (see the header of parts/decode_sm90_ks.cuh)"
#endif
#if KF_PARTS_TMA && !KF_KS_LAG
#error "kforge parts decode sm90 ks: the tensor-map producer (impl wgmma_tma) comes with the lagged schedule"
#endif

/* The producer's copies of tile chunks LO8 .. HI8-1 that cache CI (tile chunks OFF8 .. OFF8 + DIM/8 - 1) holds,
 * keys j0 .. j0+63, into the slot at stile; zero-fill from kfill on. pg: the block's page (paged caches). The same
 * copy as parts/decode_sm90.cuh's kf_pd_load_cache, over a range of chunks: not one function for both, since
 * either kernel compiles to another cubin from the other's form of the address arithmetic. */
template <int CI, int OFF8, int DIM, int LO8, int HI8>
__device__ __forceinline__ void kf_ks_load_cache(kf_u32 stile, const kf_parts_params &p, int pg, int b, int kvh,
                                                 int j0, int kfill, int t)
{
    constexpr int A8 = OFF8 > LO8 ? OFF8 : LO8;
    constexpr int B8 = (OFF8 + DIM / 8) < HI8 ? (OFF8 + DIM / 8) : HI8;
    constexpr int W8 = B8 > A8 ? B8 - A8 : 0, N = 64 * W8, WD = W8 ? W8 : 1;
    const kf_u16 *base = (const kf_u16 *)p.c[CI].p + (long long)kvh * p.c[CI].sh;
    const long long ss = p.c[CI].ss;
#if KF_PS
    base += (long long)pg * p.c[CI].sb;
#else
    base += (long long)b * p.c[CI].sb;
#endif
#pragma unroll 4
    for (int it = 0; it < (N + 127) / 128; ++it) {
        const int idx = t + it * 128;
        if (N % 128 == 0 || idx < N) {
            const int r = idx / WD, c = A8 + idx % WD;     /* key row of the block, tile chunk */
            const int j = j0 + r;
            const bool ok = j < kfill;
#if KF_PS
            const kf_u16 *src = ok ? base + (long long)(j % KF_PS) * ss + (c - OFF8) * 8 : base; // KF_MUTANT_PAGE
#else
            const kf_u16 *src = ok ? base + (long long)j * ss + (c - OFF8) * 8 : base;
#endif
            kf_cp_async16(stile + kf_wg_swz(64, r, c), src, ok);
        }
    }
}

/* The producer's refill of panel group G of a slot (0 and 1: the value panels of consumer 0 and 1, 2: the key-only
 * panels) for pair t: waits until the consumers have freed it (its empty barrier e, parity pe; pair 0 waits for
 * nothing), copies keys j0 .. of page pg into the slot at stile, zero-filled from kfill on, and has its full
 * barrier f fire when the copies land. */
template <int G>
__device__ __forceinline__ void kf_ks_refill(kf_u32 e, kf_u32 f, int t, int pe, kf_u32 stile, const kf_parts_params &p,
                                             int pg, int b, int kvh, int j0, int kfill, int tid)
{
    constexpr int LO8 = G == 0 ? 0 : G == 1 ? KF_KS_DVH / 8 : KF_DV / 8;
    constexpr int HI8 = G == 0 ? KF_KS_DVH / 8 : G == 1 ? KF_DV / 8 : KF_DQ / 8;
    if (t > 0) kf_mbar_wait(e, pe);
#define KF_KS_LOAD_ONE(CI, OFF8, DIM) kf_ks_load_cache<CI, OFF8, DIM, LO8, HI8>(stile, p, pg, b, kvh, j0, kfill, tid);
    KF_FOR_CACHES(KF_KS_LOAD_ONE)
#undef KF_KS_LOAD_ONE
    kf_mbar_arrive_cp_async(f);
}

#if KF_PARTS_TMA
/* every cache of the tile is whole 64-column panels: a panel is one box of one cache's map */
#define KF_KS_WHOLE_PANELS(CI, OFF8, DIM) static_assert((OFF8) % 8 == 0 && (DIM) % 64 == 0, "a cache that is not whole panels");
KF_FOR_CACHES(KF_KS_WHOLE_PANELS)
#undef KF_KS_WHOLE_PANELS

/* impl wgmma_tma: the refill of panel group G (as kf_ks_refill) by the copy engine when the block's 64 keys all lie
 * below kfill: thread 0 expects the group's bytes and issues one box a panel (map tm.c[CI] of the cache that holds
 * it: columns from the panel's first within the cache, 64 keys from j0, kv head kvh, batch b or page pg), the other
 * producer threads arrive (the full barrier's 128). A block reaching kfill (the range's last, the phantom of an odd
 * count) takes kf_ks_refill's cp.async path, whose zero fill keeps NaN tails and unused pages out (a map would read
 * them: the rows exist). */
template <int G>
__device__ __forceinline__ void kf_ks_refill_tma(kf_u32 e, kf_u32 f, int t, int pe, kf_u32 stile,
                                                 const kf_parts_params &p, const kf_parts_tmaps &tm, int pg, int b,
                                                 int kvh, int j0, int kfill, int tid)
{
    if (j0 + 64 > kfill) {
        kf_ks_refill<G>(e, f, t, pe, stile, p, pg, b, kvh, j0, kfill, tid);
        return;
    }
    constexpr int P0 = G == 0 ? 0 : G == 1 ? KF_KS_HP : 2 * KF_KS_HP;
    constexpr int P1 = G == 0 ? KF_KS_HP : G == 1 ? 2 * KF_KS_HP : KF_KS_NP;
    if (t > 0) kf_mbar_wait(e, pe);
    if (tid != 0) {
        kf_mbar_arrive(f);
        return;
    }
    const int j = j0;
#if KF_PS
    const int row = (j % KF_PS), bb = pg; // KF_MUTANT_PAGE
#else
    const int row = j, bb = b;
#endif
    kf_mbar_expect_tx(f, (P1 - P0) * KF_KS_PANEL);
#pragma unroll
    for (int q = P0; q < P1; ++q) {
#define KF_KS_TMA_ONE(CI, OFF8, DIM)                                                                                \
        if (8 * q >= (OFF8) && 8 * q < (OFF8) + (DIM) / 8)                                                          \
            kf_tma_load4(stile + q * KF_KS_PANEL, &tm.c[CI], (8 * q - (OFF8)) * 8, row, kvh, bb, f);
        KF_FOR_CACHES(KF_KS_TMA_ONE)
#undef KF_KS_TMA_ONE
    }
}
/* the producer's refill of group G of the slot at ST (barriers E, F) with the block at J, page PG (in its loop) */
#define KF_KS_REFILL(G, E, F, ST, PG, J) kf_ks_refill_tma<G>(E, F, t, pe, ST, p, tm, PG, b, kvh, J, kstop, tid)
#else
#define KF_KS_REFILL(G, E, F, ST, PG, J) kf_ks_refill<G>(E, F, t, pe, ST, p, PG, b, kvh, J, kstop, tid)
#endif

/* Waits for panel group G of the slot (parity ph) and orders the async proxy after the cp.async writes. */
__device__ __forceinline__ void kf_ks_wait_full(kf_u32 bar, int ph)
{
    kf_mbar_wait(bar, ph);
    kf_fence_proxy_async();
}

/* 1. S (+)= Q K^T over panels P0 .. P1-1 (4 k16 steps each), one commit group: waits for the panel group (full
 * barrier bar, parity ph; kf_ks_wait_full), issues and commits. first: the step that overwrites S. */
template <int P0, int P1>
__device__ __forceinline__ void kf_ks_qk(float (&sc)[32], kf_u32 sQ, kf_u32 sT, kf_u32 bar, int ph, bool first)
{
    kf_ks_wait_full(bar, ph);
    /* Two base descriptors, the k16 steps as additions to their address field (bits 0-13: address / 16; shared
     * addresses stay below 256 KB, so no carry leaves the field). The bases are opaque to the compiler: hoisted
     * out of the key loop, the 2 x 36 descriptors of a block took 144 registers and the consumers spilled. */
    asm volatile("" : "+r"(sQ), "+r"(sT));
    const unsigned long long dq = kf_gmma_desc(sQ, 16, 1024), dk = kf_gmma_desc(sT, 16, 1024);
    kf_wgmma_fence();
#pragma unroll
    for (int kk = 4 * P0; kk < 4 * P1; ++kk) {
        const kf_u32 off = (kk >> 2) * KF_KS_PANEL + (kk & 3) * 32;   /* k16 step kk: panel kk/4, byte 32 (kk%4) */
        kf_wgmma_ss(sc, dq + (off >> 4), dk + (off >> 4), (first && kk == 4 * P0) ? 0 : 1);
    }
    kf_wgmma_commit();
}

/* Masks S of the block at j0 (keys >= kend, causal j > i + coff: only blocks reaching kmask) and returns the row
 * maxima of accumulator rows r0 (mx0) and r1 (mx1), reduced over the quad. */
__device__ __forceinline__ void kf_ks_mask_max(float (&sc)[32], int j0, int kmask, int kend, int coff, int qi0, int qi1,
                                               int lane, float &mx0, float &mx1)
{
    if (j0 + 64 > kmask) {
#pragma unroll
        for (int k = 0; k < 8; ++k)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = j0 + k * 8 + 2 * (lane & 3) + (e & 1);
                const int i = (e >> 1) ? qi1 : qi0;
                if (j >= kend || (KF_CAUSAL && j > i + coff)) // KF_MUTANT_KSCAUSAL
                    sc[4 * k + e] = KF_NEG_INF;
            }
    }
    mx0 = KF_NEG_INF, mx1 = KF_NEG_INF;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        mx0 = fmaxf(mx0, fmaxf(sc[4 * k], sc[4 * k + 1]));
        mx1 = fmaxf(mx1, fmaxf(sc[4 * k + 2], sc[4 * k + 3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
}

/* P times f0 on rows r0 and f1 on rows r1 -> A fragments (the layout of kf_wg_pack_p): the lagged schedule's P_0 at
 * the pair's common max */
__device__ __forceinline__ void kf_ks_pack(const float (&sc)[32], float f0, float f1, kf_u32 (&pa)[4][4])
{
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        pa[kk][0] = kf_pack2(sc[8 * kk + 0] * f0, sc[8 * kk + 1] * f0);
        pa[kk][1] = kf_pack2(sc[8 * kk + 2] * f1, sc[8 * kk + 3] * f1);
        pa[kk][2] = kf_pack2(sc[8 * kk + 4] * f0, sc[8 * kk + 5] * f0);
        pa[kk][3] = kf_pack2(sc[8 * kk + 6] * f1, sc[8 * kk + 7] * f1);
    }
}

/* P (A fragments) to its panel, K-major swizzled like Q: row r, keys 8k .. 8k+7 in chunk k ^ (r & 7); this thread's two
 * keys at byte 4 (lane % 4) of the chunk. The 8 rows of a warp's store hit 8 distinct chunks: no conflict. */
__device__ __forceinline__ void kf_ks_store_p(unsigned char *pp, const kf_u32 (&pa)[4][4], int r0, int r1, int lane)
{
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const kf_u32 v0 = (k & 1) ? pa[k >> 1][2] : pa[k >> 1][0];
        const kf_u32 v1 = (k & 1) ? pa[k >> 1][3] : pa[k >> 1][1];
        *(kf_u32 *)(pp + r0 * 128 + ((k ^ (r0 & 7)) << 4) + 4 * (lane & 3)) = v0;
        *(kf_u32 *)(pp + r1 * 128 + ((k ^ (r1 & 7)) << 4) + 4 * (lane & 3)) = v1;
    }
}

/* Steps 4 and 5 and the release after them are statement macros: written as functions (the same statements), their
 * address arithmetic compiles to other code in the lagged loops (other cubins). So is steps 3-4 (KF_KS_P_PV_OWN),
 * which moves the loop-carried row max and sum as KF_WG_ONLINE does. */

/* 4. O_c += P_c V of the own slot sT, this consumer's value panels from vpanel on (A = P from registers; MN-major B:
 * 64-column panels 8 KB apart, 8-key atoms 1 KB): issue and commit. */
#define KF_KS_PV_OWN(o, pa, sT, vpanel)                                                                             \
    {                                                                                                               \
        kf_wgmma_fence();                                                                                           \
        kf_u32 sv = (sT) + (vpanel) * KF_KS_PANEL;                                                                  \
        asm volatile("" : "+r"(sv)); /* not hoisted (see kf_ks_qk) */                                               \
        const unsigned long long dv = kf_gmma_desc(sv, KF_KS_PANEL, 1024);                                          \
        _Pragma("unroll") for (int kk = 0; kk < 4; ++kk)                                                            \
            kf_wgmma_rs(o, pa[kk], dv + kk * (2048 >> 4));                                                          \
        kf_wgmma_commit();                                                                                          \
    }

/* 5. O_c += P_c' V of the other slot sT (A = the other consumer's P, its panel at sP): issue and commit. */
#define KF_KS_PV_OTHER(o, sP, sT, vpanel)                                                                           \
    {                                                                                                               \
        kf_wgmma_fence();                                                                                           \
        kf_u32 sp = (sP), sv = (sT) + (vpanel) * KF_KS_PANEL;                                                       \
        asm volatile("" : "+r"(sp), "+r"(sv));                                                                      \
        const unsigned long long dp = kf_gmma_desc(sp, 16, 1024), dv = kf_gmma_desc(sv, KF_KS_PANEL, 1024);         \
        _Pragma("unroll") for (int kk = 0; kk < 4; ++kk)                                                            \
            kf_wgmma_ss_mn(o, dp + kk * (32 >> 4), dv + kk * (2048 >> 4));                                          \
        kf_wgmma_commit();                                                                                          \
    }

/* Steps 3 and 4 of the exchanged schedule, and of consumer 1 in the lagged one: at the row maxima mx, S_c (sc)
 * becomes P_c with the partial sums and O_c brought to them (KF_WG_ONLINE), P_c -> the A fragments pa and the
 * slot's P panel at pp (fenced for wgmma), then O_c += P_c V of the own slot sT (KF_KS_PV_OWN). */
#define KF_KS_P_PV_OWN(sc, sl2, mx0, mx1, rmax0, rmax1, rsum0, rsum1, o, pa, pp, r0, r1, lane, sT, vpanel)          \
    {                                                                                                               \
        float corr0, corr1;                                                                                         \
        KF_WG_ONLINE(8, sc, sl2, mx0, mx1, rmax0, rmax1, rsum0, rsum1, corr0, corr1);                               \
        kf_wg_scale_rows(o, corr0, corr1);                                                                          \
        kf_wg_pack_p(pa, sc);                                                                                       \
        kf_ks_store_p(pp, pa, r0, r1, lane);                                                                        \
        kf_fence_proxy_async();                                                                                     \
        kf_wg_fence_regs(o);                                                                                        \
        KF_KS_PV_OWN(o, pa, sT, vpanel);                                                                            \
    }

/* After step 5 (the own slot's P V, then the other slot's, in flight): frees the own slot's value panels of this
 * consumer (e_own) once the first is done, then, once both are, the other slot's (e_val) and its P and key-only
 * panels (e_key). */
#define KF_KS_RELEASE(o, pa, e_own, e_val, e_key)                                                                   \
    {                                                                                                               \
        kf_wgmma_wait<1>();                                                                                         \
        kf_mbar_arrive(e_own);             /* own slot, own value panels: step 4 is done */                         \
        kf_wgmma_wait<0>();                                                                                         \
        kf_wg_fence_regs(o);                                                                                        \
        kf_wg_fence_frags(pa);             /* pa was read by the wgmma until here */                                \
        kf_mbar_arrive(e_val);             /* other slot, this consumer's value panels */                           \
        kf_mbar_arrive(e_key);             /* other slot's P panel (and key-only panels) */                         \
    }

extern "C" __global__ void __launch_bounds__(384, 1)
#if KF_PARTS_TMA
kf_parts_decode(const kf_parts_params p, const __grid_constant__ kf_parts_tmaps tm)
#else
kf_parts_decode(const kf_parts_params p)
#endif
{
    KF_PD_CTA(64)   /* tid, b, kvh, h, split, n_q, n_kv, row0; kbeg .. kend, kstop, kmask, nblk; sbase, gbase */
    const int npair = (nblk + 1) / 2;
    const kf_u32 sQ = sbase, sS0 = sbase + KF_KS_SLOT;                /* slot s at sS0 + s * KF_KS_SLOT */
    float *const red = (float *)(gbase + KF_KS_RED_OFF);              /* [0..127] maxima, [128..255] sums */
    const kf_u32 bar_q = sbase + KF_KS_BAR_OFF;
    const kf_u32 bar_f = bar_q + 8, bar_e = bar_f + 8 * 6;            /* full / empty of slot s, group g: +8 (3s + g) */

    kf_pd_init_bars<6, 128>(tid, bar_q, bar_f, bar_e);

    if (tid < 128) {
        /* ---------------- producer */
        kf_setmaxnreg_dec<40>();
#if KF_PS
        const int *bt = p.block_table + (long long)b * p.bt_sb;
#endif
        if (npair > 0) {   /* Q, rows past n_q zero-filled */
#if KF_PARTS_TMA
            if (tid == 0) {
#define KF_KS_TMA_PREFETCH(CI, OFF8, DIM) kf_tma_prefetch(&tm.c[CI]);
                KF_FOR_CACHES(KF_KS_TMA_PREFETCH)
#undef KF_KS_TMA_PREFETCH
            }
#endif
            kf_pd_load_q(sQ, bar_q, p, row0, h, b, n_q, tid);
        }
#pragma unroll 1
        for (int t = 0; t < npair; ++t) {
            const int j00 = kbeg + 2 * t * 64, j01 = j00 + 64;
#if KF_PS
            /* a block at or past kstop is the phantom of an odd count (or causal-invisible): nothing is read */
            const int pg0 = j00 < kstop ? bt[j00 / KF_PS] : 0, pg1 = j01 < kstop ? bt[j01 / KF_PS] : 0;
#else
            const int pg0 = 0, pg1 = 0;
#endif
            const kf_u32 sT0 = sS0, sT1 = sS0 + KF_KS_SLOT;
            const int pe = (t - 1) & 1;
            /* the order the groups are freed in: own groups (mid-pair), then the rest (end of pair) */
            KF_KS_REFILL(0, bar_e + 8 * 0, bar_f + 8 * 0, sT0, pg0, j00);
            KF_KS_REFILL(1, bar_e + 8 * 4, bar_f + 8 * 4, sT1, pg1, j01);
            KF_KS_REFILL(1, bar_e + 8 * 1, bar_f + 8 * 1, sT0, pg0, j00);
            KF_KS_REFILL(2, bar_e + 8 * 2, bar_f + 8 * 2, sT0, pg0, j00);
            KF_KS_REFILL(0, bar_e + 8 * 3, bar_f + 8 * 3, sT1, pg1, j01);
            KF_KS_REFILL(2, bar_e + 8 * 5, bar_f + 8 * 5, sT1, pg1, j01);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else {
        /* ---------------- consumers: c owns block 2t + c of pair t (slot c) and value columns c * DV/2 .. */
        kf_setmaxnreg_inc<232>();
        const int ct = tid - 128, c = ct >> 7, lane = tid & 31, w = (ct >> 5) & 3;
        const int r0 = w * 16 + (lane >> 2), r1 = r0 + 8;          /* tile rows of accumulator halves 0 and 1 */
        int qi0, qi1, hh;
        kf_pd_row(row0, r0, h, qi0, hh);
        kf_pd_row(row0, r1, h, qi1, hh);
        const float sl2 = p.scale_log2;
        const kf_u32 sMine = sS0 + c * KF_KS_SLOT, sOther = sS0 + (1 - c) * KF_KS_SLOT;
        const kf_u32 fMine = bar_f + 8 * 3 * c, fOther = bar_f + 8 * 3 * (1 - c);
        const kf_u32 eMine = bar_e + 8 * 3 * c, eOther = bar_e + 8 * 3 * (1 - c);
        /* the exchanged P: this consumer's in its own slot, the other's in the other slot (panel KF_KS_PP) */
        const kf_u32 pMine = sMine + KF_KS_PP * KF_KS_PANEL;
        const kf_u32 pOther = sOther + KF_KS_PP * KF_KS_PANEL; // KF_MUTANT_KSP
        /* this consumer's value panels in a slot (MN-major B: 64-column panels 8 KB apart, 8-key atoms 1 KB) */
        const int vpanel = KF_VALIAS_OFF8 / 8 + c * KF_KS_HP;

        float o[KF_KS_DVH / 2];
#pragma unroll
        for (int e = 0; e < KF_KS_DVH / 2; ++e)
            o[e] = 0.f;
        float rmax0 = KF_NEG_INF, rmax1 = KF_NEG_INF, rsum0 = 0.f, rsum1 = 0.f;
        float sc[32];
        kf_u32 pa[4][4];

        if (npair > 0)
            kf_mbar_wait(bar_q, 0);
#if KF_KS_LAG
        /* The lagged schedule (impl wgmma_ksl; FlashMLA's order): the row max is chained, not exchanged, so consumer 1
         * runs half a block behind consumer 0 and one's softmax runs under the other's wgmma. Per pair t:
         *   consumer 0                                   consumer 1
         *   S_0, m0 = max(m, mx_0) -> red[0..63]         S_1
         *   P_0, O_0 *= 2^(m - m0), arrive A            sync A: m0; m1 = max(m0, mx_1) -> red[64..127]
         *   O_0 += P_0 V_0 (own slot, P in registers)   P_1, O_1 *= 2^(m - m1), arrive B
         *   sync B: m1; s = 2^(m0 - m1)                 P_1 -> slot 1's P panel, O_1 += P_1 V_1, arrive C
         *   (wait O_0 += P_0 V_0) P_0 s -> slot 0's      sync D
         *   P panel, arrive D; O_0 *= s
         *   sync C; O_0 += P_1 V_1 (other slot)         O_1 += P_0 s V_0 (other slot)
         *   S_0 of pair t+1 (its first panel group
         *   issued before the wait for P_1 V_1)
         * Both then hold the common max m1 (consumer 0 reads it, so m is the same bits on both) and O and l at it.
         * Named barriers A..D = 1..4 (256 threads: one side arrives, the other syncs), 5 for the final sums. A barrier
         * is never arrived at twice before it completes: each side's arrival of pair t+1 follows, in its own
         * program order, its passing a barrier that the other side arrives at only after its sync of pair t (A t+1
         * after B t, B t+1 after A t+1, D t+1 after B t+1 after C... each chain checked in bench/NOTES.md's list).
         * No wait is circular: the producer's empty waits of pair t+1 need only pair-t work of the consumers (every
         * consumer step of pair t waits on pair-t loads or on the other consumer's pair-t steps), and every wait
         * (mbarrier or named) is on something issued earlier in that order; an mbarrier wait that never completes
         * traps (kf_mbar_wait). red[0..63] (m0) is rewritten at pair t+1 only after sync B of t, which consumer 1
         * arrives at after reading it; red[64..127] after sync A of t+1, after consumer 0's read in pair t. */
        if (c == 0) {
#pragma unroll 1
            for (int t = 0; t < npair; ++t) {
                const int ph = t & 1;
                const int j0 = kbeg + (2 * t + c) * 64;
                /* 1. S_c = Q K^T: own value panels, the other consumer's, then the key-only panels */
                kf_ks_qk<0, KF_KS_HP>(sc, sQ, sMine, fMine + 0, ph, true);
                /* the previous pair's O_0 += P_1 V_1 is done: its slot-1 panels are free. The wait is unconditional
                 * (at t = 0 it waits for nothing older), and each consumer has its own loop: behind a run-time branch
                 * (a flag, or one loop for both consumers) ptxas sees a path that touches O while this P V is in
                 * flight and serialises every wgmma of the kernel (C7514, C7515 in ptxas -v; none now) */
                kf_wgmma_wait<1>();
                if (t > 0) {
                    kf_mbar_arrive(eOther + 0);
                    kf_mbar_arrive(eOther + 16);
                }
                kf_ks_qk<KF_KS_HP, 2 * KF_KS_HP>(sc, sQ, sMine, fMine + 8, ph, false);
                kf_ks_qk<2 * KF_KS_HP, KF_KS_NP>(sc, sQ, sMine, fMine + 16, ph, false);
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(sc);
                kf_wg_fence_regs(o);

                float mx0, mx1;
                kf_ks_mask_max(sc, j0, kmask, kend, coff, qi0, qi1, lane, mx0, mx1);
                /* 2-3. m0 = max(m, mx_0) to consumer 1; P_0 and O_0 at m0 */
                mx0 = fmaxf(rmax0, mx0);
                mx1 = fmaxf(rmax1, mx1);
                if ((lane & 3) == 0) {
                    red[r0] = mx0;
                    red[r1] = mx1;
                }
                asm volatile("bar.arrive 1, 256;\n" ::: "memory");
                float corr0, corr1;
                KF_WG_ONLINE(8, sc, sl2, mx0, mx1, rmax0, rmax1, rsum0, rsum1, corr0, corr1);
                kf_wg_scale_rows(o, corr0, corr1);
                kf_wg_pack_p(pa, sc);
                /* 4. O_0 += P_0 V_0 (own slot, own value panels), under consumer 1's softmax */
                kf_wg_fence_regs(o);
                KF_KS_PV_OWN(o, pa, sMine, vpanel);
                /* consumer 1's max: the pair's common max m1, and s = 2^(m0 - m1) for P_0 and O_0 */
                asm volatile("bar.sync 2, 256;\n" ::: "memory");
                const float n0 = red[64 + r0], n1 = red[64 + r1];
                float nu0, nu1, s0, s1;
                KF_WG_REBASE(sl2, n0, n1, rmax0, rmax1, nu0, nu1, s0, s1);
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(o);
                kf_wg_fence_frags(pa);                     /* pa was read by the wgmma until here */
                kf_mbar_arrive(eMine + 0);                 /* own slot, own value panels: step 4 is done */
                kf_ks_pack(sc, s0, s1, pa); // KF_MUTANT_KSLAG
                kf_ks_store_p(gbase + (pMine - sbase), pa, r0, r1, lane);
                kf_fence_proxy_async();
                asm volatile("bar.arrive 4, 256;\n" ::: "memory");
                rsum0 *= s0;
                rsum1 *= s1;
                kf_wg_scale_rows(o, s0, s1);
                /* 5. O_0 += P_1 V_1 (other slot, own value panels); waited for under the next pair's first S group */
                asm volatile("bar.sync 3, 256;\n" ::: "memory");
                kf_ks_wait_full(fOther + 0, ph);
                kf_wg_fence_regs(o);
                KF_KS_PV_OTHER(o, pOther, sOther, vpanel);
            }
        } else {
#pragma unroll 1
            for (int t = 0; t < npair; ++t) {
                const int ph = t & 1;
                const int j0 = kbeg + (2 * t + c) * 64;
                /* 1. S_c = Q K^T: own value panels, the other consumer's, then the key-only panels */
                kf_ks_qk<KF_KS_HP, 2 * KF_KS_HP>(sc, sQ, sMine, fMine + 8, ph, true);
                kf_ks_qk<0, KF_KS_HP>(sc, sQ, sMine, fMine + 0, ph, false);
                kf_ks_qk<2 * KF_KS_HP, KF_KS_NP>(sc, sQ, sMine, fMine + 16, ph, false);
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(sc);
                kf_wg_fence_regs(o);

                float mx0, mx1;
                kf_ks_mask_max(sc, j0, kmask, kend, coff, qi0, qi1, lane, mx0, mx1);
                /* 2-3. m0 from consumer 0, m1 = max(m0, mx_1) back; P_1 and O_1 at m1 */
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
                mx0 = fmaxf(red[r0], mx0);
                mx1 = fmaxf(red[r1], mx1);
                if ((lane & 3) == 0) {
                    red[64 + r0] = mx0;
                    red[64 + r1] = mx1;
                }
                asm volatile("bar.arrive 2, 256;\n" ::: "memory");
                /* 3-4. P_1 -> its panel, O_1 += P_1 V_1 (own slot), then P_1 is announced */
                KF_KS_P_PV_OWN(sc, sl2, mx0, mx1, rmax0, rmax1, rsum0, rsum1, o, pa, gbase + (pMine - sbase), r0, r1,
                               lane, sMine, vpanel);
                asm volatile("bar.arrive 3, 256;\n" ::: "memory");
                /* 5. O_1 += (P_0 s) V_0 (other slot) */
                asm volatile("bar.sync 4, 256;\n" ::: "memory");
                kf_ks_wait_full(fOther + 8, ph);
                KF_KS_PV_OTHER(o, pOther, sOther, vpanel);
                KF_KS_RELEASE(o, pa, eMine + 8, eOther + 8, eOther + 16);
            }
        }
        kf_wgmma_wait<0>();   /* consumer 0's last O_0 += P_1 V_1 */
        kf_wg_fence_regs(o);
#else
#pragma unroll 1
        for (int t = 0; t < npair; ++t) {
            const int ph = t & 1;
            const int j0 = kbeg + (2 * t + c) * 64;
            /* 1. S_c = Q K^T: own value panels, the other consumer's, then the key-only panels */
            /* (a commit group per panel group, as FlashMLA's per-tile batches: no wgmma stays uncommitted across
             * the waits) */
            if (c == 0) {
                kf_ks_qk<0, KF_KS_HP>(sc, sQ, sMine, fMine + 0, ph, true);
                kf_ks_qk<KF_KS_HP, 2 * KF_KS_HP>(sc, sQ, sMine, fMine + 8, ph, false);
            } else {
                kf_ks_qk<KF_KS_HP, 2 * KF_KS_HP>(sc, sQ, sMine, fMine + 8, ph, true);
                kf_ks_qk<0, KF_KS_HP>(sc, sQ, sMine, fMine + 0, ph, false);
            }
            kf_ks_qk<2 * KF_KS_HP, KF_KS_NP>(sc, sQ, sMine, fMine + 16, ph, false);
            kf_wgmma_wait<0>();
            kf_wg_fence_regs(sc);

            /* 2. mask, the block's row max, exchanged */
            float mx0, mx1;
            kf_ks_mask_max(sc, j0, kmask, kend, coff, qi0, qi1, lane, mx0, mx1);
            if ((lane & 3) == 0) {
                red[64 * c + r0] = mx0;
                red[64 * c + r1] = mx1;
            }
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            {   /* max(m, max(mx_0, mx_1)) in the same order on both consumers: the same m' bit for bit */
                const float a0 = red[r0], b0 = red[64 + r0], a1 = red[r1], b1 = red[64 + r1];
                mx0 = fmaxf(rmax0, fmaxf(a0, b0));
                mx1 = fmaxf(rmax1, fmaxf(a1, b1));
            }

            /* 3. P_c, the partial sums, O_c *= corr; P_c (bf16) -> registers (A fragments) and the slot's P panel;
             * 4. O_c += P_c V (own slot, this consumer's value panels) */
            KF_KS_P_PV_OWN(sc, sl2, mx0, mx1, rmax0, rmax1, rsum0, rsum1, o, pa, gbase + (pMine - sbase), r0, r1, lane,
                           sMine, vpanel);

            /* 5. the other consumer's P, then O_c += P_c' V (other slot). The other slot's group of this consumer's
             * value panels has landed (the other consumer waited for it before its S); this consumer waits for the
             * phase too (already complete: the slot is refilled only after this consumer's arrival below) so that
             * its own proxy fence orders the cp.async writes before its wgmma reads. */
            asm volatile("bar.sync 2, 256;\n" ::: "memory");
            kf_ks_wait_full(fOther + 8 * c, ph);
            KF_KS_PV_OTHER(o, pOther, sOther, vpanel);
            KF_KS_RELEASE(o, pa, eMine + 8 * c, eOther + 8 * c, eOther + 16);
        }

#endif

        /* ---- row sums: the quad, then l_0 + l_1 (same order on both consumers) */
        rsum0 += __shfl_xor_sync(0xffffffffu, rsum0, 1);
        rsum0 += __shfl_xor_sync(0xffffffffu, rsum0, 2);
        rsum1 += __shfl_xor_sync(0xffffffffu, rsum1, 1);
        rsum1 += __shfl_xor_sync(0xffffffffu, rsum1, 2);
        if ((lane & 3) == 0) {
            red[128 + 64 * c + r0] = rsum0;
            red[128 + 64 * c + r1] = rsum1;
        }
        /* the lagged schedule's barrier 3 may still hold consumer 1's last arrival: a barrier of its own */
#if KF_KS_LAG
        asm volatile("bar.sync 5, 256;\n" ::: "memory");
#else
        asm volatile("bar.sync 3, 256;\n" ::: "memory");
#endif
        rsum0 = red[128 + r0] + red[192 + r0];
        rsum1 = red[128 + r1] + red[192 + r1];

        /* ---- epilogue: O_c / l -> o (or the split's fp32 partial), lse = m * scale + log(l) (consumer 0) */
        KF_PD_EPILOGUE(hf ? r1 : r0, c);
    }
}

#endif
