/* attn/fwd_sm90.cuh: GQA flash-attention forward for prefill on Hopper (sm_90a): wgmma, warp-specialised producer, mbarrier pipeline */
#ifndef KF_ATTN_FWD_SM90_CUH
#define KF_ATTN_FWD_SM90_CUH

/*
 * Compile-time constants (defined by the template): KF_D head dim (= Dv, 64, 128 or 256), KF_G = hq / hkv, KF_CAUSAL,
 * KF_BN keys per block (128; 64 or 80 at head dim 256: FlashAttention-3's 128 x 80 tile, O 128 + S 40 + P 20
 * registers, 224 KB of shared memory with two stages), KF_STAGES K/V stages (2 or 3), KF_SM90_OVERLAP (1: S of block n+1 and P V of
 * block n in flight together, the softmax overlapping P V; 0: each GEMM waited for), KF_SM90_PINGPONG (1:
 * the consumer warpgroups take turns issuing GEMMs; needs KF_SM90_OVERLAP), KF_SM90_BM (128, or 192: see
 * Threads), KF_FWD_NAME kernel name.
 * Needs common/types.cuh, common/mma.cuh (cp.async), common/wgmma.cuh.
 *
 * Same contract as attn/fwd.cuh with KF_DECODE 0 (common/attn_params.h): grid (cdiv(sq, BM), hq, b), a CTA
 * owns query rows row0 .. row0+BM-1 of head h (longest causal tiles first), kv head h / G, varlen, kv_len,
 * paged K/V, strides, bottom-right causal, o = 0 / lse = -inf for rows that see no key. No split-KV.
 *
 * Threads: 1 + NWG warpgroups (KF_SM90_BM = 64 NWG query rows; 128, or 192 at head dim 64 as FlashAttention-3's
 * tile there, where the exponentials are as many cycles as the GEMMs and a third consumer gives the softmax two
 * warpgroups' GEMMs to hide under). Warpgroup 0 is the producer: its 128 threads copy Q once and then K and V of
 * each key block with cp.async (16 bytes per copy, zero-fill past the key range so K/V tails are never read)
 * straight into the 128-byte-swizzled layout wgmma reads, and signal each copy's landing with
 * cp.async.mbarrier.arrive (no thread waits for its own copies). Warpgroups 1 .. NWG are consumers, 64 query
 * rows each: S = Q K^T (wgmma m64nBNk16, A = Q and B = K from shared memory, both K-major), mask, online
 * softmax in base 2 with the scale folded, then O += P V (A = P from registers, B = V from shared memory as an
 * MN-major operand: V is stored like K, keys as rows, so no transpose is needed). setmaxnreg moves registers
 * from the producer (40; 32 with three consumers) to the consumers (232; 160).
 *
 * Why cp.async by default: a tensor map is built on the host per tensor base and stride (cuTensorMapEncodeTiled);
 * the producer's cp.async needs no second argument and also covers paged K/V and per-row zero fill.
 *
 * KF_SM90_TMA (impl wgmma_tma; needs KF_SM90_PINGPONG): the producer is one warp, and one elected lane of it
 * issues the copy engine's loads (cp.async.bulk.tensor.4d, after FlashAttention-3's producer): Q once, K and V
 * of each key block, one box per 64-column panel, straight into the same 128-byte-swizzled layout (the map's
 * CU_TENSOR_MAP_SWIZZLE_128B is this layout for a 1024-byte aligned panel), completing on the full barriers by
 * transaction count (mbarrier.arrive.expect_tx, count 1). The maps come as a second kernel argument
 * (kf_attn_tmaps, __grid_constant__), encoded by the host per call (runtime/attn_tmap.c). A map bounds rows
 * only at the tensor's end, not at a sequence's key length: a key block that reaches past kend (the last one
 * of a ragged length) is copied by the warp's 32 lanes with cp.async and zero fill instead, so keys past the
 * length are never read (masking S is not enough: P = 0 times a NaN of V is NaN). Q boxes past n_q read the
 * next sequence's rows (packed) or zeros (the tensor's end): rows that are never written out. Warps 1-3 of
 * the producer warpgroup exit after setmaxnreg. Paged K/V (session 7): the maps are over the page pools, a page
 * their batch coordinate; the warp's lanes each look up one page of the block and issue its boxes
 * (kf_sm90_tma_kv_paged), and with a window the first block starts on a multiple of BN so that no box straddles
 * a page. H200, causal 32/8 D128, sustained: page 64 1.034x the contiguous time at 4K and 1.053x at 16K, page 16
 * 1.22x at 4K (the cp.async producer: 2.3x).
 *
 * Pipeline: KF_STAGES slots, each K [BN][D] + V [BN][D]. Barriers per slot: full_k, full_v (128 producer
 * arrivals, each fired when that thread's copies have landed), empty_k (128 NWG consumer arrivals once S = Q K^T
 * has completed), empty_v (once P V has completed): K of a later block may land while P V still reads V.
 * Use u of a slot waits parity u & 1. The consumers fence the async proxy after each wait, before wgmma
 * reads what cp.async wrote. A wait that never completes traps (common/wgmma.cuh) rather than hanging.
 *
 * Shared memory (1024-byte aligned): Q [D/64 panels][BM rows][64] | stages x (K [D/64][BN][64], V [D/64][BN][64]) |
 * mbarriers. A panel holds 64 columns of every row (128 bytes), rows in 8-row atoms of 1024 bytes, 16-byte
 * chunk c of row r at chunk c ^ (r & 7) (the 128-byte swizzle).
 *
 * Mutation-test hooks as in attn/fwd.cuh: KF_MUTANT_KVHEAD, KF_MUTANT_CAUSAL, KF_MUTANT_SPLIT lines.
 *
 * Model features as in attn/fwd.cuh (KF_WIN: the key range starts at the tile's first visible key and blocks
 * starting before imax + coff - W mask each row's lower bound before kf_wg_softmax; KF_CAP: S capped right
 * after Q K^T completes, the softmax at scale 1; KF_SINK: the sink joins the denominator in the epilogue).
 * FP8 K/V is not served here (the template refuses it). Hooks KF_MUTANT_WINDOW, KF_MUTANT_SINK.
 */
#ifndef KF_SM90_BM
#define KF_SM90_BM 128                              /* query rows per CTA: 64 per consumer warpgroup */
#endif
#define KF_SM90_NWG (KF_SM90_BM / 64)               /* consumer warpgroups: 2, or 3 (bm 192, head dim 64, TMA) */
#define KF_SM90_THREADS (128 * (1 + KF_SM90_NWG))
#define KF_SM90_PANEL (KF_SM90_BM * 128)            /* bytes of one 64-column panel of Q */
#define KF_SM90_KPANEL (KF_BN * 128)                /* bytes of one 64-column panel of K or V */
#define KF_SM90_Q_BYTES (KF_SM90_BM * KF_D * 2)
#define KF_SM90_KV_BYTES (KF_BN * KF_D * 2)
#define KF_SM90_STAGE_BYTES (2 * KF_SM90_KV_BYTES)
#define KF_SM90_BAR_OFF (KF_SM90_Q_BYTES + KF_STAGES * KF_SM90_STAGE_BYTES)
#define KF_SM90_CH (KF_D / 8)                       /* 16-byte chunks per row */

#ifndef KF_SM90_PINGPONG
#define KF_SM90_PINGPONG 0
#endif
#if KF_SM90_PINGPONG && !KF_SM90_OVERLAP
#error "kforge attn fwd_sm90: pingpong needs the overlapped loop"
#endif
/* Registers (setmaxnreg): the producer lowers to PRODREG, the consumers rise to CONSREG, 128 PRODREG + 128 NWG
 * CONSREG <= 65536. Three consumers (FlashAttention-3's 192 x 128 tile of head dim 64): 32 and 160. */
#if KF_SM90_NWG == 3
#define KF_SM90_PRODREG 32
#define KF_SM90_CONSREG 160
#else
#define KF_SM90_PRODREG 40
#define KF_SM90_CONSREG 232
#endif
/* Pingpong (FA3): the consumers take turns issuing their GEMMs, round robin (named barriers 1 .. NWG, 256
 * threads: 128 wait on their own, the 128 of the warpgroup before arrive on it), so a warpgroup's softmax runs
 * under the others' GEMMs. Per tile: nblk + 1 issue points per warpgroup; the turns run on from tile to tile of
 * a persistent CTA; the last warpgroup passes once up front (its first tile), warpgroup 0 takes the extra pass at
 * the end (after its last tile), so every barrier phase sees 128 + 128 threads. */
#if KF_SM90_PINGPONG
#define KF_PP_TURN() asm volatile("bar.sync %0, 256;\n" :: "r"(1 + wg) : "memory")
#define KF_PP_PASS() asm volatile("bar.arrive %0, 256;\n" :: "r"(1 + (wg + 1) % KF_SM90_NWG) : "memory")
#else
#define KF_PP_TURN() do { } while (0)
#define KF_PP_PASS() do { } while (0)
#endif

#ifndef KF_SM90_TMA
#define KF_SM90_TMA 0
#endif
#ifndef KF_SM90_PERSIST
#define KF_SM90_PERSIST 0
#endif
#if KF_SM90_PERSIST && !KF_SM90_TMA
#error "kforge attn fwd_sm90: the persistent schedule comes with the TMA producer (one warp reloads Q per tile)"
#endif
#if KF_SM90_TMA
#if !KF_SM90_PINGPONG
#error "kforge attn fwd_sm90: the TMA producer comes with the pingpong consumers"
#endif
/* A K or V block by map: the D/64 panels of rows row .. row+BN-1 (lane 0 of the producer warp only) */
__device__ __forceinline__ void kf_sm90_tma_kv(kf_u32 sdst, const kf_tmap *map, int row, int kh, int bb, kf_u32 bar)
{
    kf_mbar_expect_tx(bar, KF_SM90_KV_BYTES);
#pragma unroll
    for (int c = 0; c < KF_D / 64; ++c)
        kf_tma_load4(sdst + c * KF_SM90_KPANEL, map, c * 64, row, kh, bb, bar);
}

/* A whole K or V block over pages, by the producer warp: lane l copies rows l pb .. l pb + pb - 1 of the block,
 * pb = min(BN, page size) (a multiple of 8, BN and the page size multiples of one another: the host checks,
 * runtime/attn_tmap.c), so a box never crosses a page and lands on whole 1024-byte swizzle atoms of the panel.
 * The map's dims are (head dim, row in page, head, page): a page is its batch coordinate. pg is the lane's page and
 * row its first row in it (0 when pages are no longer than a block), both tracked by the caller without a division
 * (kf_sm90_pages). Lane 0 expects the whole block's bytes first; the lanes issue their boxes in parallel (one lane
 * issuing 8 or 16 boxes in turn made pages of 16 keys 1.8x slower than contiguous, H200, session 7). */
__device__ __forceinline__ void kf_sm90_tma_kv_paged(kf_u32 sdst, const kf_tmap *map, int pb, int pg, int row, int kh,
                                                     kf_u32 bar, int lane)
{
    if (lane == 0)
        kf_mbar_expect_tx(bar, KF_SM90_KV_BYTES);
    __syncwarp();
    const int sub = lane * pb;
    if (sub < KF_BN) {
#pragma unroll
        for (int c = 0; c < KF_D / 64; ++c)
            kf_tma_load4(sdst + c * KF_SM90_KPANEL + sub * 128, map, c * 64, row, kh, pg, bar);
    }
}

/* The pages of a tile's whole key blocks, for the producer warp, block after block from kbeg (a multiple of BN:
 * kf_sm90_tile_at): the block table read 32 entries a load (one a lane, the next window's loaded a window ahead),
 * each block's entries taken by a shuffle, the entry and the row in the page advanced by adds. The division and
 * the table load of every block before it cost ~120 producer instructions a block, on the scheduler the producer
 * shares with two consumer warps: paged 4K 1.076x the contiguous time (H200, session 21). */
struct kf_sm90_pages {
    const int *bt;
    int ps, ppb, win;      /* page size; table entries a block (pages no longer than a block; else 1); entries a window */
    int last, base;        /* the last entry the tile reads; the window's first */
    int off, row;          /* this block's first entry in the window, and its row in its page */
    int cur, nxt;          /* the lane's entry of this window and of the next */

    __device__ __forceinline__ int load(int i, int lane) const { return i + lane <= last ? bt[i + lane] : 0; }
    __device__ __forceinline__ void start(const int *t, int page, int kbeg, int kend, int lane)
    {
        bt = t, ps = page;
        ppb = ps <= KF_BN ? KF_BN / ps : 1;
        win = 32 / ppb * ppb;                        /* a block's entries never straddle two windows */
        last = (kend - 1) / ps, base = kbeg / ps;
        off = 0, row = kbeg - base * ps;
        cur = load(base, lane), nxt = load(base + win, lane);
    }
    /* the lane's page for this block (lanes past the block's pages: any) */
    __device__ __forceinline__ int page(int lane)
    {
        if (off + ppb > win) {                       /* uniform: the next window */
            base += win, off -= win;
            cur = nxt; // KF_MUTANT_PAGEWIN
            nxt = load(base + win, lane);
        }
        return __shfl_sync(0xffffffffu, cur, (off + (ps <= KF_BN ? lane : 0)) & 31);
    }
    __device__ __forceinline__ void next()
    {
        if (ps <= KF_BN)
            off += ppb;
        else if ((row += KF_BN) >= ps)
            row -= ps, ++off; // KF_MUTANT_PAGEROW
    }
};

/* The last, partial key block by the producer warp's 32 lanes: cp.async, zero fill from kend on, all copies
 * landed before lane 0 arrives (count 1) on bar. Paged (bt set): row j at page bt[j / ps], row j % ps of it,
 * base the pool at this kv head, sb the page stride. */
__device__ __forceinline__ void kf_sm90_tail_kv(kf_u32 sdst, const kf_u16 *base, long long ss, int j0, int kend,
                                                int lane, kf_u32 bar, const int *bt, int ps, long long sb)
{
#pragma unroll 4
    for (int it = 0; it < KF_BN * KF_SM90_CH / 32; ++it) {
        const int idx = it * 32 + lane, r = idx / KF_SM90_CH, c = idx % KF_SM90_CH;
        const int j = j0 + r;
        const bool ok = j < kend;
        long long off = (long long)j * ss;
        if (bt && ok) {
            const int q = j / ps;
            off = (long long)bt[q] * sb + (long long)(j - q * ps) * ss;
        }
        kf_cp_async16(sdst + kf_wg_swz(KF_BN, r, c), ok ? base + off + c * 8 : base, ok);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncwarp();
    if (lane == 0)
        kf_mbar_arrive(bar);
}
#define KF_SM90_FULL_COUNT 1
#else
#define KF_SM90_FULL_COUNT 128
#endif

#if !(((KF_D == 64 || KF_D == 128) && KF_BN == 128) || (KF_D == 256 && (KF_BN == 64 || KF_BN == 80))) ||         \
    KF_STAGES < 2 || KF_STAGES > 3
#error "kforge attn fwd_sm90: head dim 64 or 128 with 128-key blocks, 256 with 64- or 80-key blocks; 2..3 stages"
#endif
#if !(KF_SM90_BM == 128 || (KF_SM90_BM == 192 && KF_D == 64 && KF_SM90_TMA))
#error "kforge attn fwd_sm90: 128 query rows a CTA, or 192 at head dim 64 with the TMA producer"
#endif
#define KF_SM90_OR (KF_D / 2)                       /* O accumulators per thread: 64 rows x D per warpgroup */
#define KF_SM90_SN (KF_BN / 2)                      /* S accumulators per thread: 64 rows x BN per warpgroup */

/* The producer's copies of one K or V block (keys j0 .. j0+BN-1, zero-fill from kend on). Thread t copies
 * chunk t % 16 of rows t / 16 + 8 it. */
__device__ __forceinline__ void kf_sm90_load_kv(kf_u32 sdst, const kf_u16 *base, long long sb, long long ss,
                                                const int *bt, kf_u32 spt, int j0, int kend, int t)
{
    const int c = t % KF_SM90_CH, rr = t / KF_SM90_CH;
    constexpr int STEP = 128 / KF_SM90_CH;
    if (!bt) {
        const kf_u16 *src = base + (long long)(j0 + rr) * ss + c * 8;
        const long long step = (long long)STEP * ss;
#pragma unroll
        for (int it = 0; it < KF_BN / STEP; ++it) {
            const int r = rr + it * STEP;
            const bool ok = j0 + r < kend;
            kf_cp_async16(sdst + kf_wg_swz(KF_BN, r, c), ok ? src : base, ok);
            src += step;
        }
    } else {   /* row r's page and row inside it: the block's table in shared memory (kf_sm90_page_table) */
#pragma unroll 4   /* fully unrolled, the producer spills at its 40 registers (setmaxnreg) */
        for (int it = 0; it < KF_BN / STEP; ++it) {
            const int r = rr + it * STEP;
            const bool ok = j0 + r < kend;
            int pg, in;
            asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];" : "=r"(pg), "=r"(in) : "r"(spt + 8 * r));
            kf_cp_async16(sdst + kf_wg_swz(KF_BN, r, c), ok ? base + (long long)pg * sb + (long long)in * ss + c * 8 : base,
                          ok);
        }
    }
}

/* Paged K/V: the page (block-table entry) and the row inside it of each row of the block at j0, for both of its
 * loads, at spt (BN x 8 bytes): producer thread t looks up row t, one division (rows from kend on look up the last
 * row: their copies zero-fill). Before it, each copy loaded its table entry and divided by the runtime page size
 * (a load after a cp.async waits for it: a memory clobber): a paged block took 3.6x the contiguous time (4K
 * causal, the default then, H200). With this table, one 8-byte shared load a copy: 2.2x at every page size (16,
 * 64, 256), measured with the table filled after the slot wait; this form fills it before (not yet timed on a
 * GPU). The SASS shows ~25 instructions a copy (bench/NOTES.md, session 6). Named barrier 3 (the producer's 128
 * threads) before (every copy of the previous block is issued) and after. */
__device__ __forceinline__ void kf_sm90_page_table(kf_u32 spt, const int *bt, int ps, int j0, int kend, int t)
{
    asm volatile("bar.sync 3, 128;\n" ::: "memory");
    if (t < KF_BN) {
        const unsigned j = (unsigned)min(j0 + t, kend - 1), q = j / (unsigned)ps;   /* j0 < kend */
        asm volatile("st.shared.v2.s32 [%0], {%1, %2};" :: "r"(spt + 8 * t), "r"(bt[q]), "r"((int)(j - q * (unsigned)ps))
                     : "memory");
    }
    asm volatile("bar.sync 3, 128;\n" ::: "memory");
}

/* S = Q K^T for this warpgroup's 64 rows (issue only: commit and wait are the caller's). Q and K K-major. */
__device__ __forceinline__ void kf_sm90_qk(float (&sc)[KF_SM90_SN], kf_u32 qa, kf_u32 sK)
{
    kf_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KF_D / 16; ++kk) {
        const kf_u32 off = (kk & 3) * 32;                   /* k16 step inside a 64-column panel */
        kf_wgmma_ss(sc, kf_gmma_desc(qa + (kk >> 2) * KF_SM90_PANEL + off, 16, 1024),
                    kf_gmma_desc(sK + (kk >> 2) * KF_SM90_KPANEL + off, 16, 1024), kk > 0);   /* n = KF_BN */
    }
}

/* O += P V (issue only). P from registers, V MN-major: 64-column panels KF_SM90_KPANEL apart (LBO), 8-key
 * atoms 1024 bytes apart (SBO), 16 keys (2048 bytes) per k step. */
__device__ __forceinline__ void kf_sm90_pv(float (&o)[KF_SM90_OR], kf_u32 (&pa)[KF_BN / 16][4], kf_u32 sV)
{
    kf_wg_fence_regs(o);
    kf_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KF_BN / 16; ++kk)
        kf_wgmma_rs(o, pa[kk], kf_gmma_desc(sV + kk * 16 * 128, KF_SM90_KPANEL, 1024));   /* n = KF_D */
}

/* The features' work on a block's raw scores before kf_wg_softmax: the cap, then the window's lower mask. */
__device__ __forceinline__ void kf_sm90_feat(float (&sc)[KF_SM90_SN], const kf_attn_params &p, int j0, int kwmask,
                                             int coff, int wwin, int qi0, int qi1, int lane)
{
#if KF_CAP
    const float m = p.scale / p.softcap;
#pragma unroll
    for (int e = 0; e < KF_SM90_SN; ++e)
        sc[e] = kf_softcap(sc[e], m, p.softcap);
#endif
#if KF_WIN
    if (j0 < kwmask) {
#pragma unroll
        for (int c = 0; c < KF_BN / 8; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = j0 + c * 8 + 2 * (lane & 3) + (e & 1);
                const int i = (e >> 1) ? qi1 : qi0;
                if (j < i + coff - wwin)
                    sc[4 * c + e] = KF_NEG_INF;
            }
    }
#endif
    (void)p, (void)j0, (void)kwmask, (void)coff, (void)wwin, (void)qi0, (void)qi1, (void)lane;
}
#if KF_WIN || KF_CAP
#define KF_SM90_FEAT(j0) kf_sm90_feat(sc, p, j0, kwmask, coff, wwin, qi0, qi1, lane)
#else
#define KF_SM90_FEAT(j0) do { } while (0)
#endif

/* One tile of the kernel's work: query rows row0 .. row0+BM-1 of head h of sequence b, and its key range. */
struct kf_sm90_tile {
    int b, h, kvh, r0, n_q, k0, row0, coff, wwin, kwmask, kbeg, kend, kmask, nblk;
};

/* The tile at index tile (KF_SM90_PERSIST; else the CTA's own, from blockIdx): false when it holds no rows (past a
 * shorter sequence of a packed or ragged batch, or the second half of an odd middle pair). Persistent work comes in
 * units of two tiles of one head, query blocks m and nmb-1-m, so that every causal unit costs nmb + 1 key blocks
 * and units dealt round robin (CTA c: c, c + grid, ...) balance within one unit: dealing tiles ordered longest
 * first balanced too, but not once they were also grouped for L2 (below), where a section's lengths restart;
 * that static deal was 25% over the mean on causal D 256 16/16 8 x 2K (H200, session 20). Units are ordered by
 * sections of hs (batch, head) pairs, then pair, then batch and head (the G heads of one kv head side by side),
 * so the units running at once read the K/V of about one section, which L2 holds: ordering every head's tiles by
 * length first read each head's K/V from DRAM once a tile (the same row 36% slower than one CTA a tile;
 * FlashAttention-3's scheduler groups heads for L2 likewise). A section is the fewest whole kv heads whose units
 * outnumber the CTAs, as one CTA a tile's neighbours span about one head: sections of 32 MB of K/V
 * (FlashAttention-3's figure) left the long rows 7-10% slower than one CTA a tile. Still 5-14% slower on the long
 * rows than one CTA a tile (bench/NOTES.md, session 20): sched persist is a knob, not the default. */
__device__ __forceinline__ bool kf_sm90_tile_at(const kf_attn_params &p, int tile, kf_sm90_tile &T)
{
#if KF_SM90_PERSIST
    const int nbh = p.hq * p.b, nmb = (p.sq + KF_SM90_BM - 1) / KF_SM90_BM, npair = (nmb + 1) / 2;
    const int hs = min(nbh, ((int)gridDim.x / npair + 1 + KF_G - 1) / KF_G * KF_G);
    const int tl = tile; // KF_MUTANT_SCHED2
    const int unit = tl >> 1, half = tl & 1;
    const int sec = unit / (hs * npair), r = unit - sec * hs * npair, hsec = min(hs, nbh - sec * hs);
    const int k = r / hsec, bh = sec * hs + (r - k * hsec);
    const int b = bh / p.hq;
    const int mblk = half ? k : nmb - 1 - k;                        /* the long tile first */
    if (half && k == nmb - 1 - k)
        return false;                                               /* the middle of an odd count: once */
    const int h = bh - b * p.hq; // KF_MUTANT_SCHEDHEAD
#else
    (void)tile;
    const int b = blockIdx.z;
    const int mblk = KF_CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;  /* long tiles first */
    const int h = blockIdx.y;
#endif
    const int split = 0, nsplit = 1;
    const int kvh = h / KF_G; // KF_MUTANT_KVHEAD

    const int r0 = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
    const int n_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - r0 : p.sq;
    const int k0 = p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0;
    const int n_kv = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - k0 : (p.kv_len ? p.kv_len[b] : p.skv);
    const int row0 = mblk * KF_SM90_BM;
    if (row0 >= n_q)
        return false;
    const int imin = row0, imax = min(row0 + KF_SM90_BM, n_q) - 1;
    const int coff = n_kv - n_q; // KF_MUTANT_CAUSAL
#if KF_WIN
    const int wwin = p.window_left; // KF_MUTANT_WINDOW
    int wlo = max(0, imin + coff - wwin);              /* keys before wlo are outside every row's window */
#if KF_SM90_TMA
    if (p.block_table)   /* page maps: blocks start on multiples of BN, a box never straddles a page (the mask */
        wlo -= wlo % KF_BN;                            /* below covers the keys before the window) */
#endif
    const int kwmask = imax + coff - wwin;
    const int bps = ((n_kv - wlo + KF_BN - 1) / KF_BN + nsplit - 1) / nsplit;
    const int kbeg = wlo + split * bps * KF_BN, kend = min(n_kv, kbeg + bps * KF_BN); // KF_MUTANT_SPLIT
#else
    const int wwin = 0, kwmask = 0;
    const int bps = ((n_kv + KF_BN - 1) / KF_BN + nsplit - 1) / nsplit;
    const int kbeg = split * bps * KF_BN, kend = min(n_kv, kbeg + bps * KF_BN); // KF_MUTANT_SPLIT
#endif
    const int kstop = KF_CAUSAL ? min(kend, imax + coff + 1) : kend;
    const int kmask = KF_CAUSAL ? min(kend, imin + coff + 1) : kend;
    const int nblk = kstop > kbeg ? (kstop - kbeg + KF_BN - 1) / KF_BN : 0;

    T = kf_sm90_tile{b, h, kvh, r0, n_q, k0, row0, coff, wwin, kwmask, kbeg, kend, kmask, nblk};
    return true;
}

/* The tile's values as the kernel's locals */
#define KF_SM90_TILE_LOCALS(T)                                                                                      \
    const int b = T.b, h = T.h, kvh = T.kvh, r0 = T.r0, n_q = T.n_q, k0 = T.k0, row0 = T.row0, wwin = T.wwin;        \
    const int kwmask = T.kwmask, kbeg = T.kbeg, kend = T.kend, kmask = T.kmask, coff = T.coff, nblk = T.nblk;       \
    (void)b, (void)h, (void)kvh, (void)r0, (void)n_q, (void)k0, (void)row0, (void)wwin, (void)kwmask, (void)kbeg;    \
    (void)kend, (void)kmask, (void)coff, (void)nblk

extern "C" __global__ void __launch_bounds__(KF_SM90_THREADS, 1)
#if KF_SM90_TMA
KF_FWD_NAME(const kf_attn_params p, const __grid_constant__ kf_attn_tmaps tm)
#else
KF_FWD_NAME(const kf_attn_params p)
#endif
{
    extern __shared__ __attribute__((aligned(1024))) unsigned char kf_smem[];
    const int tid = threadIdx.x;
    /* 1024-byte aligned base (the swizzle pattern is a function of the address bits) */
    const kf_u32 sbase = (kf_smem_u32(kf_smem) + 1023u) & ~1023u;
    const kf_u32 sQ = sbase, sKV = sbase + KF_SM90_Q_BYTES;
    const kf_u32 bar_q = sbase + KF_SM90_BAR_OFF;
    const kf_u32 bar_k = bar_q + 8, bar_v = bar_k + 8 * KF_STAGES;
    const kf_u32 bar_ek = bar_v + 8 * KF_STAGES, bar_ev = bar_ek + 8 * KF_STAGES;
    const kf_u32 bar_qe = bar_ev + 8 * KF_STAGES;          /* Q may be refilled: every consumer's last Q K^T is done */
    const kf_u32 spt = bar_qe + 8;                         /* paged K/V: the block's page table (not with TMA) */

    if (tid == 0) {
        kf_mbar_init(bar_q, KF_SM90_FULL_COUNT);
#pragma unroll
        for (int s = 0; s < KF_STAGES; ++s) {
            kf_mbar_init(bar_k + 8 * s, KF_SM90_FULL_COUNT);
            kf_mbar_init(bar_v + 8 * s, KF_SM90_FULL_COUNT);
            kf_mbar_init(bar_ek + 8 * s, 128 * KF_SM90_NWG);
            kf_mbar_init(bar_ev + 8 * s, 128 * KF_SM90_NWG);
        }
        kf_mbar_init(bar_qe, 128 * KF_SM90_NWG);
    }
    __syncthreads();
#if KF_SM90_PERSIST
    /* persistent: CTA c takes units c, c + grid, c + 2 grid, ..., two tiles each (grid = min(units, SMs):
     * runtime/attn_launch.c) */
    const int nunits = ((p.sq + KF_SM90_BM - 1) / KF_SM90_BM + 1) / 2 * p.hq * p.b;
    const int ufirst = blockIdx.x, ustep = gridDim.x; // KF_MUTANT_SCHED
#define KF_SM90_TILES(tile)                                                                                        \
    for (int kf_k = 0, tile; (tile = 2 * (ufirst + (kf_k >> 1) * ustep) + (kf_k & 1)) < 2 * nunits; ++kf_k)
#else
#define KF_SM90_TILES(tile) for (int tile = 0; tile < 1; ++tile)
#endif

    if (tid < 128) {
        /* ---------------- producer warpgroup */
        kf_setmaxnreg_dec<KF_SM90_PRODREG>();
#if KF_SM90_TMA
        if (tid >= 32)
            return;                                        /* one producer warp */
        int gn = 0, tq = 0;                                /* key blocks and tiles with blocks so far */
#pragma unroll 1
        KF_SM90_TILES(tile) {
            kf_sm90_tile T;
            if (!kf_sm90_tile_at(p, tile, T) || T.nblk == 0)
                continue;                                  /* (no block: the consumers never wait for Q) */
            KF_SM90_TILE_LOCALS(T);
            const int *ck = p.cu_seqlens_k;
            const int qrow = r0 + row0, qb = p.cu_seqlens_q ? 0 : b;   /* packed: one batch of every row */
            const int krow = k0, kb = ck ? 0 : b;
            /* paged: the maps' batch is the page, k/v the pools (no batch or k0 offset) */
            const int *bt = p.block_table ? p.block_table + (long long)b * p.bt_sb : 0;
            const int ps = p.page_size, pb = min(KF_BN, ps);
            kf_sm90_pages pgs;
            if (bt && nblk > 0)
                pgs.start(bt, ps, kbeg, kend, tid);
            const long long kbo = bt ? 0 : (ck ? 0 : (long long)b * p.k_sb) + (long long)k0 * p.k_ss;
            const long long vbo = bt ? 0 : (ck ? 0 : (long long)b * p.v_sb) + (long long)k0 * p.v_ss;
            const kf_u16 *kg = (const kf_u16 *)p.k + (long long)kvh * p.k_sh + kbo;
            const kf_u16 *vg = (const kf_u16 *)p.v + (long long)kvh * p.v_sh + vbo;
            if (tid == 0 && tq == 0) {
                kf_tma_prefetch(&tm.q);
                kf_tma_prefetch(&tm.k);
                kf_tma_prefetch(&tm.v);
            }
#pragma unroll 1
            for (int n = 0; n < nblk; ++n) {
                const int s = (gn + n) % KF_STAGES, u = (gn + n) / KF_STAGES;
                const kf_u32 sK = sKV + s * KF_SM90_STAGE_BYTES;
                const int j0 = kbeg + n * KF_BN;
                const bool whole = j0 + KF_BN <= kend;       /* else the last block of a ragged length */
                /* paged: this lane's page, before the slot wait */
                const int pg = bt && whole ? pgs.page(tid) : 0;
                if (u > 0)
                    kf_mbar_wait(bar_ek + 8 * s, (u - 1) & 1);
                if (!whole)
                    kf_sm90_tail_kv(sK, kg, p.k_ss, j0, kend, tid, bar_k + 8 * s, bt, ps, p.k_sb);
                else if (bt)
                    kf_sm90_tma_kv_paged(sK, &tm.k, pb, pg, pgs.row, kvh, bar_k + 8 * s, tid);
                else if (tid == 0)
                    kf_sm90_tma_kv(sK, &tm.k, krow + j0, kvh, kb, bar_k + 8 * s);
                if (n == 0 && tid == 0) {   /* Q after the tile's first K: that K may land under the last tile */
                    if (tq > 0)
                        kf_mbar_wait(bar_qe, (tq - 1) & 1);   /* the previous tile's Q K^T are done */
                    kf_mbar_expect_tx(bar_q, KF_SM90_Q_BYTES);
#pragma unroll
                    for (int c = 0; c < KF_D / 64; ++c)
                        kf_tma_load4(sQ + c * KF_SM90_PANEL, &tm.q, c * 64, qrow, h, qb, bar_q);
                }
                if (u > 0)
                    kf_mbar_wait(bar_ev + 8 * s, (u - 1) & 1);
                if (!whole)
                    kf_sm90_tail_kv(sK + KF_SM90_KV_BYTES, vg, p.v_ss, j0, kend, tid, bar_v + 8 * s, bt, ps, p.v_sb);
                else if (bt)
                    kf_sm90_tma_kv_paged(sK + KF_SM90_KV_BYTES, &tm.v, pb, pg, pgs.row, kvh, bar_v + 8 * s, tid);
                else if (tid == 0)
                    kf_sm90_tma_kv(sK + KF_SM90_KV_BYTES, &tm.v, krow + j0, kvh, kb, bar_v + 8 * s);
                if (bt)
                    pgs.next();
                __syncwarp();
            }
            gn += nblk;
            ++tq;
        }
#else
        kf_sm90_tile T;
        if (!kf_sm90_tile_at(p, 0, T))
            return;
        KF_SM90_TILE_LOCALS(T);
        const kf_u16 *qg = (const kf_u16 *)p.q + (p.cu_seqlens_q ? 0 : (long long)b * p.q_sb) + (long long)r0 * p.q_ss
                           + (long long)h * p.q_sh;
        const int *bt = p.block_table ? p.block_table + (long long)b * p.bt_sb : 0;
        const long long kvb = p.cu_seqlens_k ? 0 : (long long)b;
        const kf_u16 *kg = (const kf_u16 *)p.k + (long long)kvh * p.k_sh + (bt ? 0 : kvb * p.k_sb + (long long)k0 * p.k_ss);
        const kf_u16 *vg = (const kf_u16 *)p.v + (long long)kvh * p.v_sh + (bt ? 0 : kvb * p.v_sb + (long long)k0 * p.v_ss);
        {   /* Q tile, rows past n_q zero-filled */
            const int c = tid % KF_SM90_CH, rr = tid / KF_SM90_CH;
#pragma unroll 4
            for (int it = 0; it < KF_SM90_BM / (128 / KF_SM90_CH); ++it) {
                const int r = rr + it * (128 / KF_SM90_CH);
                const bool ok = row0 + r < n_q;
                const kf_u16 *src = ok ? qg + (long long)(row0 + r) * p.q_ss + c * 8 : qg;
                kf_cp_async16(sQ + kf_wg_swz(KF_SM90_BM, r, c), src, ok);
            }
            kf_mbar_arrive_cp_async(bar_q);
        }
#pragma unroll 1
        for (int n = 0; n < nblk; ++n) {
            const int s = n % KF_STAGES, u = n / KF_STAGES;
            const kf_u32 sK = sKV + s * KF_SM90_STAGE_BYTES;
            const int j0 = kbeg + n * KF_BN;
            if (bt)   /* the block's pages first: the lookup's round trip runs under the wait for the slot */
                kf_sm90_page_table(spt, bt, p.page_size, j0, kend, tid);
            if (u > 0)
                kf_mbar_wait(bar_ek + 8 * s, (u - 1) & 1);     /* both consumers are done with K of use u-1 */
            kf_sm90_load_kv(sK, kg, p.k_sb, p.k_ss, bt, spt, j0, kend, tid);
            kf_mbar_arrive_cp_async(bar_k + 8 * s);
            if (u > 0)
                kf_mbar_wait(bar_ev + 8 * s, (u - 1) & 1);     /* ... and with V */
            kf_sm90_load_kv(sK + KF_SM90_KV_BYTES, vg, p.v_sb, p.v_ss, bt, spt, j0, kend, tid);
            kf_mbar_arrive_cp_async(bar_v + 8 * s);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
    } else {
        /* ---------------- consumer warpgroups: 64 rows each */
        kf_setmaxnreg_inc<KF_SM90_CONSREG>();
        const int ct = tid - 128, wg = ct >> 7, lane = tid & 31, wl = (ct >> 5) & 3;
        const int rbase = wg * 64 + wl * 16 + (lane >> 2);     /* tile row of accumulator half 0 (half 1: +8) */
#if KF_CAP
        const float sl2 = 1.4426950408889634f, snat = 1.f;   /* capped scores are already scaled */
#else
        const float sl2 = p.scale_log2, snat = p.scale;
#endif
        int gn = 0, tq = 0;                                    /* as the producer's */
#pragma unroll 1
        KF_SM90_TILES(tile) {
            kf_sm90_tile T;
            if (!kf_sm90_tile_at(p, tile, T))
                continue;
            KF_SM90_TILE_LOCALS(T);
            const int qi0 = row0 + rbase, qi1 = qi0 + 8;

            float o[KF_SM90_OR];
#pragma unroll
            for (int i = 0; i < KF_SM90_OR; ++i)
                o[i] = 0.f;
            float rmax0 = KF_NEG_INF, rmax1 = KF_NEG_INF, rsum0 = 0.f, rsum1 = 0.f;

            /* descriptors: Q (A, K-major) rows wg*64.., K (B, K-major), V (B, MN-major: LBO = panel stride) */
            const kf_u32 qa = sQ + wg * 64 * 128;
            float sc[KF_SM90_SN];
            kf_u32 pa[KF_BN / 16][4];
            float corr0, corr1;

            if (nblk > 0)
                kf_mbar_wait(bar_q, tq & 1);
#if !KF_SM90_OVERLAP
#pragma unroll 1
            for (int n = 0; n < nblk; ++n) {
                const int s = (gn + n) % KF_STAGES, ph = ((gn + n) / KF_STAGES) & 1;
                const kf_u32 sK = sKV + s * KF_SM90_STAGE_BYTES, sV = sK + KF_SM90_KV_BYTES;
                kf_mbar_wait(bar_k + 8 * s, ph);
                kf_fence_proxy_async();
                kf_sm90_qk(sc, qa, sK);
                kf_wgmma_commit();
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(sc);
                kf_mbar_arrive(bar_ek + 8 * s);
                KF_SM90_FEAT(kbeg + n * KF_BN);
                kf_wg_softmax<KF_BN / 8, KF_CAUSAL>(sc, kbeg + n * KF_BN, kmask, kend, coff, qi0, qi1, lane, sl2, rmax0,
                                                    rmax1, rsum0, rsum1, corr0, corr1);
                kf_wg_pack_p(pa, sc);
                kf_wg_scale_rows(o, corr0, corr1);
                kf_mbar_wait(bar_v + 8 * s, ph);
                kf_fence_proxy_async();
                kf_sm90_pv(o, pa, sV);
                kf_wgmma_commit();
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(o);
                kf_mbar_arrive(bar_ev + 8 * s);                  /* this slot's V may be refilled */
            }
#else
            /* S(n+1) = Q K(n+1)^T and O += P(n) V(n) are issued back to back; the softmax of block n+1 runs
             * while P(n) V(n) is on the tensor cores. O is rescaled by block n's correction right before
             * P(n) V(n) is issued. */
            if (KF_SM90_PINGPONG && wg == KF_SM90_NWG - 1 && nblk > 0 && tq == 0)
                asm volatile("bar.arrive 1, 256;\n" ::: "memory");   /* warpgroup 0 issues first */
            if (nblk > 0) {
                const int s = gn % KF_STAGES, ph = (gn / KF_STAGES) & 1;
                kf_mbar_wait(bar_k + 8 * s, ph);
                kf_fence_proxy_async();
                KF_PP_TURN();
                kf_sm90_qk(sc, qa, sKV + s * KF_SM90_STAGE_BYTES);
                kf_wgmma_commit();
                KF_PP_PASS();
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(sc);
                kf_mbar_arrive(bar_ek + 8 * s);
                KF_SM90_FEAT(kbeg);
                kf_wg_softmax<KF_BN / 8, KF_CAUSAL>(sc, kbeg, kmask, kend, coff, qi0, qi1, lane, sl2, rmax0, rmax1,
                                                    rsum0, rsum1, corr0, corr1);
                kf_wg_pack_p(pa, sc);
            }
#pragma unroll 1
            for (int n = 1; n < nblk; ++n) {
                const int s = (gn + n) % KF_STAGES, ph = ((gn + n) / KF_STAGES) & 1;
                const int sp = (gn + n - 1) % KF_STAGES, php = ((gn + n - 1) / KF_STAGES) & 1;
                const kf_u32 sK = sKV + s * KF_SM90_STAGE_BYTES;
                const kf_u32 sVp = sKV + sp * KF_SM90_STAGE_BYTES + KF_SM90_KV_BYTES;
                kf_mbar_wait(bar_k + 8 * s, ph);
                kf_mbar_wait(bar_v + 8 * sp, php);
                kf_fence_proxy_async();
                KF_PP_TURN();
                kf_sm90_qk(sc, qa, sK);
                kf_wgmma_commit();
                kf_wg_scale_rows(o, corr0, corr1);
                kf_sm90_pv(o, pa, sVp);
                kf_wgmma_commit();
                KF_PP_PASS();
                kf_wgmma_wait<1>();                              /* S(n) has landed; P(n-1) V(n-1) may still run */
                kf_wg_fence_regs(sc);
                kf_mbar_arrive(bar_ek + 8 * s);
                KF_SM90_FEAT(kbeg + n * KF_BN);
                kf_wg_softmax<KF_BN / 8, KF_CAUSAL>(sc, kbeg + n * KF_BN, kmask, kend, coff, qi0, qi1, lane, sl2, rmax0,
                                                    rmax1, rsum0, rsum1, corr0, corr1);
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(o);
                kf_wg_fence_frags(pa);                           /* pa was read by the wgmma until here */
                kf_mbar_arrive(bar_ev + 8 * sp);                 /* V of block n-1 may be refilled */
                kf_wg_pack_p(pa, sc);
            }
            if (nblk > 0) {
                kf_mbar_arrive(bar_qe);                      /* every Q K^T of the tile is done: Q may be refilled */
                const int sp = (gn + nblk - 1) % KF_STAGES, php = ((gn + nblk - 1) / KF_STAGES) & 1;
                kf_mbar_wait(bar_v + 8 * sp, php);
                kf_fence_proxy_async();
                kf_wg_scale_rows(o, corr0, corr1);
                KF_PP_TURN();
                kf_sm90_pv(o, pa, sKV + sp * KF_SM90_STAGE_BYTES + KF_SM90_KV_BYTES);
                kf_wgmma_commit();
                KF_PP_PASS();
                kf_wgmma_wait<0>();
                kf_wg_fence_regs(o);
                kf_wg_fence_frags(pa);
                kf_mbar_arrive(bar_ev + 8 * sp);
            }
#endif

            rsum0 += __shfl_xor_sync(0xffffffffu, rsum0, 1);
            rsum0 += __shfl_xor_sync(0xffffffffu, rsum0, 2);
            rsum1 += __shfl_xor_sync(0xffffffffu, rsum1, 1);
            rsum1 += __shfl_xor_sync(0xffffffffu, rsum1, 2);

            /* ---- epilogue: O / sum -> o, lse = max*scale + log(sum) */
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int i = hf ? qi1 : qi0;
                if (i >= n_q)
                    continue;
                const float l = hf ? rsum1 : rsum0, m = hf ? rmax1 : rmax0;
#if KF_SINK || KF_CAP
                float inv = l > 0.f ? 1.f / l : 0.f;
                float lse = l > 0.f ? m * snat + logf(l) : KF_NEG_INF;
#if KF_SINK
                {   /* the sink joins the denominator: lse = log(e^lse + e^sink), o scaled by e^(lse0 - lse) */
                    const float sk = p.sinks[h], lse0 = lse;
                    const float mm = fmaxf(lse0, sk);
                    lse = mm + logf(expf(lse0 - mm) + expf(sk - mm));
                    inv *= expf(lse0 - lse); // KF_MUTANT_SINK
                }
#endif
#else
                (void)snat;
                const float inv = l > 0.f ? 1.f / l : 0.f;
                const float lse = l > 0.f ? m * p.scale + logf(l) : KF_NEG_INF;
#endif
                kf_u16 *og = (kf_u16 *)p.o + (p.cu_seqlens_q ? 0 : (long long)b * p.o_sb) + (long long)(r0 + i) * p.o_ss
                             + (long long)h * p.o_sh + 2 * (lane & 3);
#pragma unroll
                for (int c = 0; c < KF_D / 8; ++c)
                    *(kf_u32 *)(og + c * 8) = kf_pack2(o[4 * c + 2 * hf] * inv, o[4 * c + 2 * hf + 1] * inv);
                if (p.lse && (lane & 3) == 0)
                    p.lse[(p.cu_seqlens_q ? 0 : (long long)b * p.lse_sb) + (long long)h * p.lse_sh + r0 + i] = lse;
            }
            if (nblk > 0) {
                gn += nblk;
                ++tq;
            }
        }   /* tiles */
#if KF_SM90_OVERLAP
        /* the turns run on from tile to tile (warpgroup 0's first of a tile takes the last one's last pass of the
         * tile before): warpgroup 0 takes the last pass of all once its tiles are done */
        if (KF_SM90_PINGPONG && wg == 0 && tq > 0)
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
#endif
    }
}

#endif
