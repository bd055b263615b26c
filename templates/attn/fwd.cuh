/* attn/fwd.cuh: GQA flash-attention forward; one body for prefill tiles (attn_prefill) and packed decode tiles with split-KV (attn_decode) */
#ifndef KF_ATTN_FWD_CUH
#define KF_ATTN_FWD_CUH

/*
 * Compile-time constants (defined by the template):
 *   KF_D head dim (= Dv), KF_G = hq / hkv, KF_CAUSAL, KF_DECODE, KF_TM tile rows, KF_BN keys per block,
 *   KF_WM x KF_WN warps (row groups x key slices), KF_STAGES cp.async stages, KF_QREG (Q fragments in
 *   registers), KF_MINB (min blocks per SM), KF_FWD_NAME kernel name.
 *
 * Tiling. A CTA owns KF_TM query rows:
 *   prefill (KF_DECODE 0): rows i = row0 .. row0+TM-1 of one query head h; grid (cdiv(sq, TM), hq, b).
 *   decode  (KF_DECODE 1): the G heads x Sq rows that share one KV head are packed, packed row
 *     pr = i * G + g (query row i, head h0 + g); grid (splits, hkv * cdiv(G*sq, TM), b), so each
 *     K/V byte is read once per (row tile, split).
 * The CTA walks its key range in blocks of KF_BN keys, K and V of a block landing in a cp.async stage
 * (KF_STAGES deep; K and V are separate commit groups so Q.K^T starts before V has arrived). With
 * KF_STAGES >= 2 block n + STAGES - 1 is issued right after the barrier that publishes K of block n
 * (every warp is then done with block n - 1, whose stage it reuses): two barriers per block.
 * Warp (wm, wn) computes rows wm*MW .. +MW (MW = TM/WM, MT = MW/16 m16 tiles) against keys
 * wn*KW .. +KW of the block (KW = BN/WN): S = Q K^T and O += P V with mma.m16n8k16, P kept in
 * registers as the A operand. Each warp keeps its own running max / sum / O (fp32); when WN > 1
 * (decode, few rows) the warps' states are merged through shared memory at the end.
 *
 * Mutation-test hooks: the kv-head, causal-offset and split-range computations are each one line,
 * each ending in a KF_MUTANT_ marker comment (KVHEAD, CAUSAL, SPLIT); p.hkv is in scope there.
 *
 * Masking. Keys at or past kend (end of this split, <= n_kv) are zero-filled by cp.async (K and V rows
 * past n_kv are never read, so NaN there cannot leak) and their scores set to -inf; causal keys
 * j > i + n_kv - n_q are set to -inf. Only blocks that reach past the first masked key pay for the mask;
 * blocks wholly past the causal bound of the tile's last row are never loaded. A row with no visible
 * key keeps max -inf / sum 0 and writes o = 0, lse = -inf.
 *
 * Shared memory: Q [TM][D] | KF_STAGES x (K [BN][D], V [BN][D]), 16-bit elements, rows of 16-byte
 * chunks XOR-swizzled by (row & 7) so ldmatrix and cp.async are bank-conflict free. The fp32 merge
 * buffer (WN > 1) reuses the K/V area after the key loop.
 *
 * Model features (each 0 unless the template defines it: common/attn_features.cuh; common/attn_params.h has the
 * definitions):
 *   KF_WIN  sliding window: the key range starts at the tile's first visible key, max(0, imin + coff - W)
 *           (earlier blocks are never loaded: skipped, not masked); blocks starting before imax + coff - W
 *           mask each row's lower bound.
 *   KF_CAP  softcap: S <- cap * tanh(S * scale / cap) right after Q K^T, before the mask and the max; the
 *           softmax then runs on the capped scores (scale 1).
 *   KF_SINK sink logit: added to the denominator in the epilogue when the CTA writes o (one split); split
 *           partials carry none (attn/combine.cuh adds it).
 *   KF_KV8  FP8 (e4m3) K/V: each stage holds the blocks' bytes (K8 [BN][D], V8 [BN][D], unswizzled) and the
 *           block in use is converted into one 16-bit tile after the stages, K then V (value / 256,
 *           exact: the 256 and k_scale are folded into the score scale, v_scale into the epilogue), each warp
 *           column converting the keys it reads and waiting for its own warps only. Needs KF_STAGES >= 2.
 *           Decode (KF_V8FRAG): no 16-bit tile at all. V's B fragments of P V come from the fp8 stage by
 *           ldmatrix.trans on byte pairs and byte permutes, converted to fp16 in registers; P V runs on the fp16
 *           MMA (P packed to fp16, finer than bf16 on [0, 1]) whatever the dtype, with the head-dim columns of
 *           each 16 split even / odd between two n tiles (undone in the epilogue's stores).
 *           K16 (bf16 decode): Q K^T on the fp16 MMA too, so K's bytes take the fp16 rule (a shift and a mask
 *           per pair, no multiply) instead of the bf16 one. Q is scaled by 2^e into fp16 once (e from the CTA's
 *           largest finite |q|, so that it lands in [2^14, 2^15): no overflow, bf16's 8 bits kept down to
 *           2^-28 of that largest value) and 2^-e joins k_scale in the score scale.
 * Mutation-test hooks of the features: KF_MUTANT_WINDOW, KF_MUTANT_CAPORDER, KF_MUTANT_SINK, KF_MUTANT_FP8HEAD.
 */
#define KF_CAP_BEFORE_MAX 1 // KF_MUTANT_CAPORDER
#define KF_THREADS (32 * KF_WM * KF_WN)
#define KF_MW (KF_TM / KF_WM)
#define KF_MT (KF_MW / 16)
#define KF_KW (KF_BN / KF_WN)
#define KF_NT (KF_KW / 8)
#define KF_DT (KF_D / 8)
#define KF_DK (KF_D / 16)
#define KF_CH (KF_D / 8)
#define KF_Q_BYTES (KF_TM * KF_D * 2)
#define KF_KV_BYTES (KF_BN * KF_D * 2)
#if KF_KV8
#define KF_KV8_BYTES (KF_BN * KF_D)                 /* one fp8 K or V block */
#define KF_STAGE_BYTES (2 * KF_KV8_BYTES)
#define KF_CVT_OFF (KF_STAGES * KF_STAGE_BYTES)     /* the converted 16-bit tile after the stages: K, then V */
#if KF_STAGES < 2
#error "kforge attn fwd: FP8 K/V needs 2 or more stages"
#endif
#define KF_V8FRAG KF_DECODE                         /* decode: V's fragments straight from the fp8 stage, no tile */
#define KF_K16 (KF_V8FRAG && KF_BF16)               /* bf16 decode: Q scaled into fp16, Q K^T on the fp16 MMA */
#else
#define KF_STAGE_BYTES (2 * KF_KV_BYTES)
#endif
#define KF_OPAD (KF_D + 8)

#if KF_MT < 1 || KF_MW % 16 != 0 || KF_KW % 16 != 0 || (KF_BN * KF_CH) % KF_THREADS != 0 || KF_THREADS % KF_CH != 0 || KF_D % 64 != 0
#error "kforge attn fwd: invalid tile configuration"
#endif

/* element offset of (row, 16-byte chunk c) in a swizzled [rows][KF_D] tile */
__device__ __forceinline__ int kf_swz(int row, int c) { return row * KF_D + ((c ^ (row & 7)) << 3); }

/* tile row r -> query row i (within the sequence) and query head hh */
__device__ __forceinline__ void kf_row(int row0, int r, int h, int &i, int &hh)
{
#if KF_DECODE
    const int pr = row0 + r;
    i = pr / KF_G;
    hh = h + pr % KF_G;
#else
    i = row0 + r;
    hh = h;
#endif
}

/* Paged K/V: the block's page lookups of this thread's lane (common/mma.cuh, kf_page_lookup), for both of its
 * loads; taken before the wait that precedes the copies, so the lookup's round trip runs under the wait. */
__device__ __forceinline__ kf_pagerow kf_kv_pages(const int *bt, int ps, int j0, int kend, int tid)
{
    constexpr int RW = 32 / KF_CH, STEP = KF_THREADS / KF_CH;
    static_assert(KF_BN * KF_CH / KF_THREADS * RW <= 32, "kf_kv_pages: one lookup a lane");
    const kf_pagerow none = {0, 0};
    return bt ? kf_page_lookup(bt, ps, j0, kend, tid % 32, tid / 32, RW, STEP) : none;
}

/* Issue the cp.async copies of one K or V block: keys j0 .. j0+BN-1, zero-fill from kend on.
 * Thread tid copies chunk c = tid % CH of rows tid / CH + it * (THREADS / CH). */
__device__ __forceinline__ void kf_load_kv(kf_u32 sdst, const kf_u16 *base, long long sb, long long ss,
                                           const int *bt, kf_pagerow x, int j0, int kend, int tid)
{
    const int c = tid % KF_CH, rr = tid / KF_CH;
    if (!bt) {
        const kf_u16 *src = base + (long long)(j0 + rr) * ss + c * 8;
        const long long step = (long long)(KF_THREADS / KF_CH) * ss;
#pragma unroll
        for (int it = 0; it < KF_BN * KF_CH / KF_THREADS; ++it) {
            const int r = rr + it * (KF_THREADS / KF_CH);
            const bool ok = j0 + r < kend;
            kf_cp_async16(sdst + kf_swz(r, c) * 2, ok ? src : base, ok);
            src += step;
        }
    } else {   /* through the block's page lookups x (kf_kv_pages) */
        constexpr int RW = 32 / KF_CH, STEP = KF_THREADS / KF_CH;
#pragma unroll
        for (int it = 0; it < KF_BN * KF_CH / KF_THREADS; ++it) {
            const int r = rr + it * STEP;
            const bool ok = j0 + r < kend;
            const long long off = kf_page_off(x, it, (tid % 32) / KF_CH, RW, sb, ss);
            kf_cp_async16(sdst + kf_swz(r, c) * 2, ok ? base + off + c * 8 : base, ok);
        }
    }
}

#if KF_KV8
#define KF_CH8 (KF_D / 16)   /* 16-byte chunks of an fp8 row */
/* Byte offset of 16-byte chunk c of row r of an fp8 stage block: the chunks XOR-swizzled so that the eight rows an
 * ldmatrix reads at one chunk fall in distinct banks (D 64: rows of 64 bytes, two a 128-byte line) */
__device__ __forceinline__ int kf_swz8(int r, int c)
{
    return r * KF_D + ((c ^ (KF_D >= 128 ? (r & 7) : ((r >> 1) & 3))) << 4);
}
/* Two 8x8 b16 matrices (lanes 0-15 give the rows); here each b16 element is a pair of e4m3 bytes */
__device__ __forceinline__ void kf_ldsm_x2(kf_u32 (&r)[2], kf_u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
/* kf_kv_pages for the fp8 loads' mapping (16-byte chunks of D bytes) */
__device__ __forceinline__ kf_pagerow kf_kv8_pages(const int *bt, int ps, int j0, int kend, int tid)
{
    constexpr int RW = 32 / KF_CH8, STEP = KF_THREADS / KF_CH8;
    static_assert(KF_BN * KF_CH8 / KF_THREADS * RW <= 32, "kf_kv8_pages: one lookup a lane");
    const kf_pagerow none = {0, 0};
    return bt ? kf_page_lookup(bt, ps, j0, kend, tid % 32, tid / 32, RW, STEP) : none;
}

/* FP8: the cp.async copies of one K8 or V8 block (keys j0 .. j0+BN-1, D bytes each, zero-fill from kend on) */
__device__ __forceinline__ void kf_load_kv8(kf_u32 sdst, const unsigned char *base, long long sb, long long ss,
                                            const int *bt, kf_pagerow x, int j0, int kend, int tid)
{
    constexpr int CH8 = KF_CH8, RW = 32 / CH8, STEP = KF_THREADS / CH8, IT = KF_BN * CH8 / KF_THREADS;
    static_assert(KF_THREADS % CH8 == 0 && (KF_BN * CH8) % KF_THREADS == 0, "kf_load_kv8: geometry");
    const int c = tid % CH8, rr = tid / CH8;
#pragma unroll
    for (int it = 0; it < IT; ++it) {
        const int r = rr + it * STEP, j = j0 + r;
        const bool ok = j < kend;
        const long long off = bt ? kf_page_off(x, it, (tid % 32) / CH8, RW, sb, ss) : (long long)j * ss;
        kf_cp_async16(sdst + kf_swz8(r, c), ok ? base + off + c * 16 : base, ok);
    }
}

/* kf_e4m3x4 (4 e4m3 bytes -> 4 16-bit values / 256): common/fp8.cuh, rendered before this file with KF_KV8 */

#if KF_V8FRAG
/* kf_pack2_h, kf_mma16816_h (P V on the fp16 MMA): common/fp8.cuh */
/* V's B fragments of one k16 step (keys 2t, 2t+1 | 2t+8, 2t+9, t = lane % 4) for the 16 fp8 columns of one chunk,
 * from ldmatrix.trans's words on byte pairs: lo (keys 0-7) holds bytes V[2t][2g], V[2t][2g+1], V[2t+1][2g],
 * V[2t+1][2g+1] (g = lane / 4), hi the same 8 keys on. Even columns 2g -> (e0, e1), odd 2g+1 -> (o0, o1). */
__device__ __forceinline__ void kf_v8_frag(kf_u32 lo, kf_u32 hi, kf_u32 &e0, kf_u32 &e1, kf_u32 &o0, kf_u32 &o1)
{
    kf_u32 a, b, c, d;
    asm("prmt.b32 %0, %1, 0, 0x2404;" : "=r"(a) : "r"(lo));   /* bytes 0, 2 -> bits 8..15, 24..31 */
    asm("prmt.b32 %0, %1, 0, 0x2404;" : "=r"(b) : "r"(hi));
    asm("prmt.b32 %0, %1, 0, 0x3414;" : "=r"(c) : "r"(lo));   /* bytes 1, 3 */
    asm("prmt.b32 %0, %1, 0, 0x3414;" : "=r"(d) : "r"(hi));
    e0 = kf_e4m3x2_h(a);
    e1 = kf_e4m3x2_h(b);
    o0 = kf_e4m3x2_h(c);
    o1 = kf_e4m3x2_h(d);
}
#endif

/* The K or V rows of the block that the warps of column wn read (keys wn KW .. wn KW + KW - 1), converted by those
 * KF_WM warps alone (t: the thread's index among them), then a barrier of those warps only: no warp waits for the
 * conversion of rows it never reads. The CTA barrier before (the copies landed; every warp done with the tile's
 * previous use) stays. */
__device__ __forceinline__ void kf_cvt_kv8_rows(kf_u32 dst, kf_u32 src, int r0, int t)
{
    for (int idx = t; idx < KF_KW * (KF_D / 16); idx += 32 * KF_WM) {
        const int r = r0 + idx / (KF_D / 16), c = idx % (KF_D / 16);
        kf_e4m3x16_smem(src + kf_swz8(r, c), dst + kf_swz(r, 2 * c) * 2, dst + kf_swz(r, 2 * c + 1) * 2);
    }
#if KF_WN == 1
    __syncthreads();                                        /* one column: every warp reads every key */
#elif KF_WM == 1
    __syncwarp();
#else
    asm volatile("bar.sync %0, %1;" :: "r"(1 + r0 / KF_KW), "n"(32 * KF_WM) : "memory");   /* barrier 1 + wn */
#endif
}
#if KF_WN == 1   /* one column (wn 0): constants, so the extra index costs no register */
#define KF_CVT_ROWS(dst, src) kf_cvt_kv8_rows(dst, src, 0, tid)
#else
#define KF_CVT_ROWS(dst, src) kf_cvt_kv8_rows(dst, src, wn * KF_KW, tid - wn * KF_WM * 32)
#endif
#define KF_PAGES(j0) kf_kv8_pages(bt, p.page_size, j0, kend, tid)
#define KF_LOAD_K(sdst, j0, x) kf_load_kv8(sdst, kg8, p.k_sb, p.k_ss, bt, x, j0, kend, tid)
#define KF_LOAD_V(sdst, j0, x) kf_load_kv8(sdst, vg8, p.v_sb, p.v_ss, bt, x, j0, kend, tid)
#define KF_KV_STEP KF_KV8_BYTES
#else
#define KF_PAGES(j0) kf_kv_pages(bt, p.page_size, j0, kend, tid)
#define KF_LOAD_K(sdst, j0, x) kf_load_kv(sdst, kg, p.k_sb, p.k_ss, bt, x, j0, kend, tid)
#define KF_LOAD_V(sdst, j0, x) kf_load_kv(sdst, vg, p.v_sb, p.v_ss, bt, x, j0, kend, tid)
#define KF_KV_STEP KF_KV_BYTES
#endif

extern "C" __global__ void __launch_bounds__(KF_THREADS, KF_MINB)
KF_FWD_NAME(const kf_attn_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __attribute__((aligned(128))) unsigned char kf_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % KF_WM, wn = warp / KF_WM;
    const int b = blockIdx.z;

    /* ---- this CTA's rows and key range */
#if KF_DECODE
    const int ntiles = (KF_G * p.sq + KF_TM - 1) / KF_TM;
    const int tile = blockIdx.y % ntiles;
    const int h = (blockIdx.y / ntiles) * KF_G;            /* first query head of the group */
    const int split = blockIdx.x, nsplit = p.splits;
#else
    const int mblk = KF_CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;  /* long tiles first */
    const int h = blockIdx.y;
    const int split = 0, nsplit = 1;
#endif
    const int kvh = h / KF_G; // KF_MUTANT_KVHEAD

    const int r0 = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
    const int n_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - r0 : p.sq;
    const int k0 = p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0;
    const int n_kv = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - k0 : (p.kv_len ? p.kv_len[b] : p.skv);
#if KF_DECODE
    const int row0 = tile * KF_TM;
    if (row0 >= KF_G * n_q)
        return;                                           /* tile wholly past this sequence's rows */
    const int imin = row0 / KF_G, imax = (min(row0 + KF_TM, KF_G * n_q) - 1) / KF_G;
#else
    const int row0 = mblk * KF_TM;
    if (row0 >= n_q)
        return;
    const int imin = row0, imax = min(row0 + KF_TM, n_q) - 1;
#endif
    const int coff = n_kv - n_q; // KF_MUTANT_CAUSAL
#if KF_WIN
    const int wwin = p.window_left; // KF_MUTANT_WINDOW
    const int wlo = max(0, imin + coff - wwin);        /* keys before wlo are outside every row's window */
    const int kwmask = imax + coff - wwin;              /* blocks starting before it need the window's mask */
    const int bps = ((n_kv - wlo + KF_BN - 1) / KF_BN + nsplit - 1) / nsplit;     /* key blocks per split */
    const int kbeg = wlo + split * bps * KF_BN, kend = min(n_kv, kbeg + bps * KF_BN); // KF_MUTANT_SPLIT
#else
    const int bps = ((n_kv + KF_BN - 1) / KF_BN + nsplit - 1) / nsplit;     /* key blocks per split */
    const int kbeg = split * bps * KF_BN, kend = min(n_kv, kbeg + bps * KF_BN); // KF_MUTANT_SPLIT
#endif
    /* keys from kstop on are invisible to every row of the tile; blocks reaching past kmask need the mask */
    const int kstop = KF_CAUSAL ? min(kend, imax + coff + 1) : kend;
    const int kmask = KF_CAUSAL ? min(kend, imin + coff + 1) : kend;
    const int nblk = kstop > kbeg ? (kstop - kbeg + KF_BN - 1) / KF_BN : 0;

    /* ---- global bases */
    const kf_u16 *qg = (const kf_u16 *)p.q + (p.cu_seqlens_q ? 0 : (long long)b * p.q_sb) + (long long)r0 * p.q_ss;
    const int *bt = p.block_table ? p.block_table + (long long)b * p.bt_sb : 0;
    const long long kvb = p.cu_seqlens_k ? 0 : (long long)b;
    const kf_u16 *kg = (const kf_u16 *)p.k + (long long)kvh * p.k_sh + (bt ? 0 : kvb * p.k_sb + (long long)k0 * p.k_ss);
    const kf_u16 *vg = (const kf_u16 *)p.v + (long long)kvh * p.v_sh + (bt ? 0 : kvb * p.v_sb + (long long)k0 * p.v_ss);
#if KF_KV8
    const unsigned char *kg8 = (const unsigned char *)p.k + (long long)kvh * p.k_sh + (bt ? 0 : kvb * p.k_sb + (long long)k0 * p.k_ss);
    const unsigned char *vg8 = (const unsigned char *)p.v + (long long)kvh * p.v_sh + (bt ? 0 : kvb * p.v_sb + (long long)k0 * p.v_ss);
    (void)kg, (void)vg;
#endif

    const kf_u32 sQa = kf_smem_u32(kf_smem);
    const kf_u32 sKVa = sQa + KF_Q_BYTES;

    /* ---- Q tile -> shared (rows past n_q zero-filled) */
    for (int idx = tid; idx < KF_TM * KF_CH; idx += KF_THREADS) {
        const int r = idx / KF_CH, c = idx % KF_CH;
        int i, hh;
        kf_row(row0, r, h, i, hh);
        const bool ok = i < n_q;
        const kf_u16 *src = ok ? qg + (long long)i * p.q_ss + (long long)hh * p.q_sh + c * 8 : qg;
        kf_cp_async16(sQa + kf_swz(r, c) * 2, src, ok);
    }
    kf_cp_async_commit();

    /* ---- prologue: the first KF_STAGES-1 blocks */
#pragma unroll
    for (int s = 0; s < KF_STAGES - 1; ++s) {
        const kf_u32 sK = sKVa + s * KF_STAGE_BYTES;
        if (s < nblk) {
            const kf_pagerow x = KF_PAGES(kbeg + s * KF_BN);
            KF_LOAD_K(sK, kbeg + s * KF_BN, x);
            kf_cp_async_commit();
            KF_LOAD_V(sK + KF_KV_STEP, kbeg + s * KF_BN, x);
            kf_cp_async_commit();
        } else {
            kf_cp_async_commit();
            kf_cp_async_commit();
        }
    }

    /* per-lane ldmatrix coordinates (row & 7 == lane & 7 for every tile, so the swizzle term is lane & 7) */
    const int sw = lane & 7;
    const int q_row = wm * KF_MW + ((lane >> 3) & 1) * 8 + (lane & 7), q_chk = lane >> 4;
    const int k_row = wn * KF_KW + (lane >> 4) * 8 + (lane & 7), k_chk = (lane >> 3) & 1;
    const int v_row = wn * KF_KW + ((lane >> 3) & 1) * 8 + (lane & 7), v_chk = lane >> 4;

    /* query row of each accumulator row this thread holds (rows lane/4 and lane/4 + 8 of each m tile) */
    int qi[KF_MT][2];
#pragma unroll
    for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            int i, hh;
            kf_row(row0, wm * KF_MW + mt * 16 + (lane >> 2) + hf * 8, h, i, hh);
            qi[mt][hf] = i;
        }

#if KF_K16
    __shared__ unsigned kf_qmax_s;                          /* the CTA's largest finite |q| (bf16 bits) */
    if (tid == 0)
        kf_qmax_s = 0;
#endif
    kf_cp_async_wait<2 * (KF_STAGES - 1)>();                 /* Q has landed */
    __syncthreads();
#if KF_K16
    {   /* |q| as bf16 bits compares as an unsigned integer; Inf and NaN (>= 0x7f80) are left out */
        unsigned m = 0;
        for (int idx = tid; idx < KF_TM * KF_CH; idx += KF_THREADS) {
            kf_u32 w[4];
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                         : "r"(sQa + kf_swz(idx / KF_CH, idx % KF_CH) * 2));
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const unsigned lo = w[j] & 0x7fffu, hi = (w[j] >> 16) & 0x7fffu;
                m = max(m, lo < 0x7f80u ? lo : 0u);
                m = max(m, hi < 0x7f80u ? hi : 0u);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0)
            atomicMax(&kf_qmax_s, m);
    }
    __syncthreads();
    /* largest |q| < 2^(E+1), E its exponent (subnormals and 0 as -126): e = 14 - E puts it in [2^14, 2^15) */
    const int qe = min(126, 14 - max(-126, (int)(kf_qmax_s >> 7) - 127));
    const float qsc = __uint_as_float((kf_u32)(qe + 127) << 23), qinv = __uint_as_float((kf_u32)(127 - qe) << 23);
#endif
#if KF_KV8
    /* FP8 K fragments come from the fp8 stage by ldmatrix on byte pairs (below), which puts d 4t, 4t+1 in a lane's
     * k slots 2t, 2t+1 and d 4t+2, 4t+3 in slots 2t+8, 2t+9 (t = lane % 4) of each 16-column step. Q's columns take
     * the same order once here: in every 16 columns, 32-bit pair p moves to where slot pair p is read, pairs
     * (0 1 2 3 | 4 5 6 7) <- (0 2 4 6 | 1 3 5 7). The products are the same; only their order inside the MMA changes. */
    for (int idx = tid; idx < KF_TM * KF_DK; idx += KF_THREADS) {
        const int r = idx / KF_DK, kk = idx % KF_DK;
        const kf_u32 lo = sQa + kf_swz(r, 2 * kk) * 2, hi = sQa + kf_swz(r, 2 * kk + 1) * 2;
        kf_u32 a0, a1, a2, a3, b0, b1, b2, b3;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(lo));
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3) : "r"(hi));
#if KF_K16   /* bf16 pairs -> fp16 pairs of q * 2^e (round to nearest; exact where q * 2^e is an fp16 normal) */
#define KF_Q16(x) kf_pack2_h(__uint_as_float((x) << 16) * qsc, __uint_as_float((x) & 0xffff0000u) * qsc)
        a0 = KF_Q16(a0), a1 = KF_Q16(a1), a2 = KF_Q16(a2), a3 = KF_Q16(a3);
        b0 = KF_Q16(b0), b1 = KF_Q16(b1), b2 = KF_Q16(b2), b3 = KF_Q16(b3);
#undef KF_Q16
#endif
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(lo), "r"(a0), "r"(a2), "r"(b0), "r"(b2) : "memory");
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(hi), "r"(a1), "r"(a3), "r"(b1), "r"(b3) : "memory");
    }
    __syncthreads();
#endif
#if KF_QREG
    kf_u32 qf[KF_MT][KF_DK][4];
#pragma unroll
    for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KF_DK; ++kk)
            kf_ldsm_x4(qf[mt][kk], sQa + ((q_row + mt * 16) * KF_D + (((2 * kk + q_chk) ^ sw) << 3)) * 2);
#endif

    float acc[KF_MT][KF_DT][4];
    float rmax[KF_MT][2], rsum[KF_MT][2];
#pragma unroll
    for (int mt = 0; mt < KF_MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < KF_DT; ++dt)
            acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;
        rmax[mt][0] = rmax[mt][1] = KF_NEG_INF;
        rsum[mt][0] = rsum[mt][1] = 0.f;
    }
#if KF_KV8
    const int sh8 = kvh; // KF_MUTANT_FP8HEAD
#if KF_K16
    const float kq = p.k_scale[sh8] * 256.f * qinv, vq = p.v_scale[sh8] * 256.f;   /* q = tile * 2^-e */ // KF_MUTANT_QSCALE
#else
    const float kq = p.k_scale[sh8] * 256.f, vq = p.v_scale[sh8] * 256.f;   /* e4m3 = tile value * 256 */
#endif
#else
    const float kq = 1.f;
#endif
    KF_SCORE_SCALES(p, kq);   /* sl2, snat (capm): common/attn_features.cuh */

    /* ---- key loop */
    for (int n = 0; n < nblk; ++n) {
#if KF_KV8
        const kf_u32 sK8 = sKVa + (n % KF_STAGES) * KF_STAGE_BYTES, sV8 = sK8 + KF_KV8_BYTES;
        /* K's fragments come straight from its fp8 stage (Q K^T below); V's too in decode (P V below), else V is
         * converted into one 16-bit tile after the stages, after the barrier that follows every warp's Q K^T. At stages 2, D 128, two CTAs a
         * multiprocessor keep twice the bytes in flight (a decode CTA's prefetch of one 32 KB block alone leaves
         * the memory system idle half the time). */
#if !KF_V8FRAG
        const kf_u32 sV = sKVa + KF_CVT_OFF;
#endif
        (void)k_row, (void)k_chk;
#else
        const kf_u32 sK = sKVa + (n % KF_STAGES) * KF_STAGE_BYTES, sV = sK + KF_KV_BYTES;
#endif
        const int j0 = kbeg + n * KF_BN;
#if KF_STAGES == 1
        {
            const kf_pagerow x = kf_kv_pages(bt, p.page_size, j0, kend, tid);
            kf_load_kv(sK, kg, p.k_sb, p.k_ss, bt, x, j0, kend, tid);
            kf_cp_async_commit();
            kf_load_kv(sV, vg, p.v_sb, p.v_ss, bt, x, j0, kend, tid);
            kf_cp_async_commit();
        }
        kf_cp_async_wait<1>();                               /* K of block n */
        __syncthreads();
#else
        /* block n + STAGES - 1's pages first: the lookup's round trip runs under the wait */
        const int jn = n + KF_STAGES - 1;
        const kf_pagerow xn = jn < nblk ? KF_PAGES(kbeg + jn * KF_BN) : kf_pagerow{0, 0};
        kf_cp_async_wait<2 * KF_STAGES - 3>();               /* K of block n */
        __syncthreads();                                    /* ... and every warp is done with block n-1 */
        {   /* issue block n + STAGES - 1 into the stage block n-1 used */
            const kf_u32 sKn = sKVa + (jn % KF_STAGES) * KF_STAGE_BYTES;
            if (jn < nblk)
                KF_LOAD_K(sKn, kbeg + jn * KF_BN, xn);
            kf_cp_async_commit();
            if (jn < nblk)
                KF_LOAD_V(sKn + KF_KV_STEP, kbeg + jn * KF_BN, xn);
            kf_cp_async_commit();
        }
#endif

        /* S = Q K^T over this warp's KW keys */
        float s[KF_MT][KF_NT][4];
#pragma unroll
        for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KF_NT; ++nt)
                s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#if KF_QREG
#pragma unroll
#else
#pragma unroll 4   /* D = 256: a full unroll hoists too many K fragments and spills */
#endif
        for (int kk = 0; kk < KF_DK; ++kk) {
#if KF_QREG
#define KF_QA(mt) qf[mt][kk]
#else
            kf_u32 qa[KF_MT][4];
#pragma unroll
            for (int mt = 0; mt < KF_MT; ++mt)
                kf_ldsm_x4(qa[mt], sQa + ((q_row + mt * 16) * KF_D + (((2 * kk + q_chk) ^ sw) << 3)) * 2);
#define KF_QA(mt) qa[mt]
#endif
#pragma unroll
            for (int nt2 = 0; nt2 < KF_NT / 2; ++nt2) {
                kf_u32 kb[4];
#if KF_KV8
                /* two n tiles of 8 keys x 16 fp8 columns (chunk kk of the swizzled stage), converted in registers:
                 * no 16-bit K tile, no barrier for it */
                kf_u32 w8[2];
                kf_ldsm_x2(w8, sK8 + kf_swz8(wn * KF_KW + nt2 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), kk));
#if KF_K16
                kf_e4m3x4_h(w8[0], kb[0], kb[1]);
                kf_e4m3x4_h(w8[1], kb[2], kb[3]);
#else
                kf_e4m3x4(w8[0], kb[0], kb[1]);
                kf_e4m3x4(w8[1], kb[2], kb[3]);
#endif
#else
                kf_ldsm_x4(kb, sK + ((k_row + nt2 * 16) * KF_D + (((2 * kk + k_chk) ^ sw) << 3)) * 2);
#endif
#pragma unroll
                for (int mt = 0; mt < KF_MT; ++mt) {
#if KF_K16
                    kf_mma16816_h(s[mt][2 * nt2], KF_QA(mt), kb[0], kb[1]);
                    kf_mma16816_h(s[mt][2 * nt2 + 1], KF_QA(mt), kb[2], kb[3]);
#else
                    kf_mma16816(s[mt][2 * nt2], KF_QA(mt), kb[0], kb[1]);
                    kf_mma16816(s[mt][2 * nt2 + 1], KF_QA(mt), kb[2], kb[3]);
#endif
                }
            }
#undef KF_QA
        }

#if KF_CAP && KF_CAP_BEFORE_MAX
#pragma unroll
        for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KF_NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    s[mt][nt][e] = kf_softcap(s[mt][nt][e], capm, p.softcap);
#endif
        /* mask: keys past the split / sequence end, and (causal) past each row's bound */
#if KF_WIN
        if (j0 + KF_BN > kmask || j0 < kwmask) {
#else
        if (j0 + KF_BN > kmask) {
#endif
#pragma unroll
            for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < KF_NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int j = j0 + wn * KF_KW + nt * 8 + 2 * (lane & 3) + (e & 1);
                        const int i = qi[mt][e >> 1];
#if KF_WIN
                        if (j >= kend || (KF_CAUSAL && j > i + coff) || j < i + coff - wwin)
#else
                        if (j >= kend || (KF_CAUSAL && j > i + coff))
#endif
                            s[mt][nt][e] = KF_NEG_INF;
                    }
        }

        /* online softmax (base 2): running max per row, rescale O and sum, P = 2^(s*sl2 - max*sl2) */
#pragma unroll
        for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float mx = rmax[mt][hf];
#pragma unroll
                for (int nt = 0; nt < KF_NT; ++nt)
                    mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
#if KF_CAP && !KF_CAP_BEFORE_MAX
                /* the planted bug: the max taken over the raw scaled scores, the cap applied after it */
                mx = (mx == KF_NEG_INF) ? mx : mx * p.scale * kq;
#pragma unroll
                for (int nt = 0; nt < KF_NT; ++nt)
                    for (int e = 2 * hf; e < 2 * hf + 2; ++e)
                        if (s[mt][nt][e] != KF_NEG_INF)
                            s[mt][nt][e] = kf_softcap(s[mt][nt][e], capm, p.softcap);
#endif
                const float mu = (mx == KF_NEG_INF) ? 0.f : mx * sl2;   /* no -inf - -inf */
                const float corr = kf_exp2(rmax[mt][hf] * sl2 - mu);
                rmax[mt][hf] = mx;
                float ps = 0.f;
#pragma unroll
                for (int nt = 0; nt < KF_NT; ++nt) {
                    s[mt][nt][2 * hf] = kf_exp2(s[mt][nt][2 * hf] * sl2 - mu);
                    s[mt][nt][2 * hf + 1] = kf_exp2(s[mt][nt][2 * hf + 1] * sl2 - mu);
                    ps += s[mt][nt][2 * hf] + s[mt][nt][2 * hf + 1];
                }
                rsum[mt][hf] = rsum[mt][hf] * corr + ps;          /* per-thread partial; quad-reduced at the end */
#pragma unroll
                for (int dt = 0; dt < KF_DT; ++dt) {
                    acc[mt][dt][2 * hf] *= corr;
                    acc[mt][dt][2 * hf + 1] *= corr;
                }
            }

        kf_cp_async_wait<2 * KF_STAGES - 2>();               /* V of block n */
        __syncthreads();
#if KF_KV8 && !KF_V8FRAG
        KF_CVT_ROWS(sV, sV8);
#endif

        /* O += P V: the S accumulators, packed to 16 bits, are the A fragments */
#pragma unroll
        for (int kk = 0; kk < KF_KW / 16; ++kk) {
            kf_u32 pa[KF_MT][4];
#if KF_KV8 && KF_V8FRAG
#define KF_PACK_P kf_pack2_h                                 /* P V on the fp16 MMA */
#else
#define KF_PACK_P kf_pack2
#endif
#pragma unroll
            for (int mt = 0; mt < KF_MT; ++mt) {
                pa[mt][0] = KF_PACK_P(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = KF_PACK_P(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = KF_PACK_P(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = KF_PACK_P(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#undef KF_PACK_P
#if KF_KV8 && KF_V8FRAG
            /* 16 keys x 32 fp8 columns a ldmatrix.x4.trans (matrices: keys 0-7 | 8-15 of chunk 2 dt2, then of chunk
             * 2 dt2 + 1); n tiles 2c / 2c + 1 hold chunk c's even / odd columns */
#pragma unroll
            for (int dt2 = 0; dt2 < KF_DT / 4; ++dt2) {
                kf_u32 w8[4], vb[8];
                kf_ldsm_x4_t(w8, sV8 + kf_swz8(v_row + kk * 16, 2 * dt2 + v_chk));
                kf_v8_frag(w8[0], w8[1], vb[0], vb[1], vb[2], vb[3]);
                kf_v8_frag(w8[2], w8[3], vb[4], vb[5], vb[6], vb[7]);
#pragma unroll
                for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
                    for (int q = 0; q < 4; ++q)
                        kf_mma16816_h(acc[mt][4 * dt2 + q], pa[mt], vb[2 * q], vb[2 * q + 1]);
            }
#else
#pragma unroll
            for (int dt2 = 0; dt2 < KF_DT / 2; ++dt2) {
                kf_u32 vb[4];
                kf_ldsm_x4_t(vb, sV + ((v_row + kk * 16) * KF_D + (((2 * dt2 + v_chk) ^ sw) << 3)) * 2);
#pragma unroll
                for (int mt = 0; mt < KF_MT; ++mt) {
                    kf_mma16816(acc[mt][2 * dt2], pa[mt], vb[0], vb[1]);
                    kf_mma16816(acc[mt][2 * dt2 + 1], pa[mt], vb[2], vb[3]);
                }
            }
#endif
        }
#if KF_STAGES == 1
        __syncthreads();                                    /* stage 0 may be refilled */
#endif
    }
    kf_cp_async_wait<0>();

#pragma unroll
    for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            rsum[mt][hf] += __shfl_xor_sync(0xffffffffu, rsum[mt][hf], 1);
            rsum[mt][hf] += __shfl_xor_sync(0xffffffffu, rsum[mt][hf], 2);
        }

#if KF_WN > 1
    /* ---- merge the WN key-slice states of each row: M = max m_w, L = sum l_w 2^(m_w-M), O = sum O_w 2^(m_w-M) */
    {
        float *buf = (float *)(kf_smem + KF_Q_BYTES);
        float *smax = buf + KF_TM * KF_OPAD, *ssum = smax + KF_WN * KF_TM;
        __syncthreads();
        if ((lane & 3) == 0) {
#pragma unroll
            for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = wm * KF_MW + mt * 16 + (lane >> 2) + hf * 8;
                    smax[wn * KF_TM + r] = rmax[mt][hf];
                    ssum[wn * KF_TM + r] = rsum[mt][hf];
                }
        }
        __syncthreads();
        float fac[KF_MT][2];
#pragma unroll
        for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = wm * KF_MW + mt * 16 + (lane >> 2) + hf * 8;
                float M = KF_NEG_INF;
#pragma unroll
                for (int w = 0; w < KF_WN; ++w)
                    M = fmaxf(M, smax[w * KF_TM + r]);
                const float Ms = (M == KF_NEG_INF) ? 0.f : M * sl2;
                float L = 0.f;
#pragma unroll
                for (int w = 0; w < KF_WN; ++w)
                    L += ssum[w * KF_TM + r] * kf_exp2(smax[w * KF_TM + r] * sl2 - Ms);
                fac[mt][hf] = kf_exp2(rmax[mt][hf] * sl2 - Ms);
                rmax[mt][hf] = M;
                rsum[mt][hf] = L;
            }
        /* fixed order (w = 0, 1, ...) so the result does not depend on scheduling */
#pragma unroll 1
        for (int w = 0; w < KF_WN; ++w) {
            if (wn == w) {
#pragma unroll
                for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) {
                        const int r = wm * KF_MW + mt * 16 + (lane >> 2) + hf * 8;
#pragma unroll
                        for (int dt = 0; dt < KF_DT; ++dt) {
                            float2 *d = (float2 *)(buf + r * KF_OPAD + dt * 8 + 2 * (lane & 3));
                            float2 v = make_float2(acc[mt][dt][2 * hf] * fac[mt][hf], acc[mt][dt][2 * hf + 1] * fac[mt][hf]);
                            if (w > 0) {
                                const float2 o = *d;
                                v.x += o.x;
                                v.y += o.y;
                            }
                            *d = v;
                        }
                    }
            }
            __syncthreads();
        }
        if (wn != 0)
            return;
#pragma unroll
        for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = wm * KF_MW + mt * 16 + (lane >> 2) + hf * 8;
#pragma unroll
                for (int dt = 0; dt < KF_DT; ++dt) {
                    const float2 v = *(const float2 *)(buf + r * KF_OPAD + dt * 8 + 2 * (lane & 3));
                    acc[mt][dt][2 * hf] = v.x;
                    acc[mt][dt][2 * hf + 1] = v.y;
                }
            }
    }
#endif

    /* ---- epilogue: O / sum -> o (or the split's fp32 partial), lse = max*scale + log(sum) */
#pragma unroll
    for (int mt = 0; mt < KF_MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            int i, hh;
            kf_row(row0, wm * KF_MW + mt * 16 + (lane >> 2) + hf * 8, h, i, hh);
            if (i >= n_q)
                continue;
            const float l = rsum[mt][hf];
#if KF_SINK || KF_KV8 || KF_CAP
            float lse;
            float inv = kf_attn_finish(p, rmax[mt][hf], l, snat, hh, nsplit, lse);   /* common/attn_features.cuh */
#if KF_KV8
            inv *= vq;
#endif
#else
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const float lse = l > 0.f ? rmax[mt][hf] * p.scale + logf(l) : KF_NEG_INF;
#endif
            if (nsplit == 1) {
                kf_u16 *o = (kf_u16 *)p.o + (p.cu_seqlens_q ? 0 : (long long)b * p.o_sb) + (long long)(r0 + i) * p.o_ss
                            + (long long)hh * p.o_sh + 2 * (lane & 3);
#if KF_KV8 && KF_V8FRAG
                /* n tiles 2c / 2c + 1: chunk c's even / odd columns; this lane's are 16c + 4t .. 16c + 4t + 3 */
#pragma unroll
                for (int c = 0; c < KF_DT / 2; ++c) {
                    kf_u32 *oc = (kf_u32 *)(o + c * 16 + 2 * (lane & 3));
                    oc[0] = kf_pack2(acc[mt][2 * c][2 * hf] * inv, acc[mt][2 * c + 1][2 * hf] * inv);
                    oc[1] = kf_pack2(acc[mt][2 * c][2 * hf + 1] * inv, acc[mt][2 * c + 1][2 * hf + 1] * inv);
                }
#else
#pragma unroll
                for (int dt = 0; dt < KF_DT; ++dt)
                    *(kf_u32 *)(o + dt * 8) = kf_pack2(acc[mt][dt][2 * hf] * inv, acc[mt][dt][2 * hf + 1] * inv);
#endif
                if (p.lse && (lane & 3) == 0)
                    p.lse[(p.cu_seqlens_q ? 0 : (long long)b * p.lse_sb) + (long long)hh * p.lse_sh + r0 + i] = lse;
            } else {
                const long long rid = ((p.cu_seqlens_q ? 0 : (long long)b * p.sq) + r0 + i) * (long long)p.hq + hh;
                const long long wrow = (long long)split * p.ws_rows * p.hq + rid;
                float *wo = p.ws_o + wrow * KF_D + 2 * (lane & 3);
#if KF_KV8 && KF_V8FRAG
#pragma unroll
                for (int c = 0; c < KF_DT / 2; ++c) {
                    float2 *wc = (float2 *)(wo + c * 16 + 2 * (lane & 3));
                    wc[0] = make_float2(acc[mt][2 * c][2 * hf] * inv, acc[mt][2 * c + 1][2 * hf] * inv);
                    wc[1] = make_float2(acc[mt][2 * c][2 * hf + 1] * inv, acc[mt][2 * c + 1][2 * hf + 1] * inv);
                }
#else
#pragma unroll
                for (int dt = 0; dt < KF_DT; ++dt)
                    *(float2 *)(wo + dt * 8) = make_float2(acc[mt][dt][2 * hf] * inv, acc[mt][dt][2 * hf + 1] * inv);
#endif
                if ((lane & 3) == 0)
                    p.ws_lse[wrow] = lse;
            }
        }
}

#endif
