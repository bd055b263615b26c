/* kda/prefill_sm90.cuh: KDA prefill's serial state pass on Hopper (sm_90a): S^T a wgmma accumulator, slots streamed by a producer */
#ifndef KF_KDA_PREFILL_SM90_CUH
#define KF_KDA_PREFILL_SM90_CUH

/*
 * impl "wgmma" of kda_prefill (templates/kda_prefill.lua): the split path (fused 0) with the state transposed
 * (tr 1). Rendered after the preparation part of kda/prefill.cuh (its slot layout KF_PF_OFF_*, kf_pf_vbase,
 * kf_pf_segws, kf_kda_prep); this file replaces that fragment's kf_kda_state, kf_kda_segop and kf_kda_segcomb with
 * kernels of the same names, grids and meaning (see the state pass comment there: MODE 0 writes o and ht, MODE 1
 * the segment operators; here the transitions M are stored in bf16, the B operand of the combine on wgmma).
 * Needs common/wgmma.cuh, KF_PF_WG_NST (ring stages), KF_PF_WG_SMEM (the dynamic shared memory the template
 * reserves) and KF_PF_WG_CNST (the combine's stages). Run by the GPU suite (test_kda_gpu, test_kda_mutants)
 * since session 9; the combine since session 17.
 *
 * Block: a producer warpgroup (threads 0-127) and VS / 64 consumer warpgroups (KF_PF_W 8: unused, one value);
 * consumer j owns the value columns v0 + 64 j .. + 63 and holds S^T [64][K] (rows: those value columns, columns:
 * keys) in fp32 as the accumulator of wgmma m64nKk16, in registers across every chunk of its segment (K / 2 floats
 * a thread).
 * Per chunk (all four products with A from registers, FlashAttention-3's accumulator-to-fragment
 * conversion: the m64nNk16 accumulator of 8-column blocks 2k and 2k + 1 is the A fragment of k16 step k):
 *   P1  X = S^T W^T          [64][C]  (A = bf16(S^T), B = W [C][K], K-major)      V'^T = U^T - X
 *   P2  O^T = S^T Qg^T + V'^T A^T     (B = Qg [C][K] and A [C][C], K-major)       -> o (MODE 0)
 *   P3  S^T <- S^T diag(gl) + V'^T KdT^T  (A = bf16(V'^T), B = KdT [K][C], K-major)
 * Every B operand is a slot matrix stored [N][K-dim] row-major, so K-major: the producer copies it with
 * cp.async into 128-byte-swizzled panels of 64 K-dim elements (common/wgmma.cuh; KdT and A, whose K-dim is
 * C <= 64, use one panel with columns C..63 unused). The slot's plain row-major layout fits no wgmma
 * descriptor (without swizzle a core matrix's 8 rows must lie 16 bytes apart; the swizzled modes permute the
 * 16-byte chunks of a row), cp.async.bulk copies bytes in order, and a tensor map would need host set-up per
 * workspace: hence cp.async with the swizzle in the destination address, as in parts/decode_sm90_ks.cuh.
 *
 * Pipeline: KF_PF_WG_NST stages (2..8, as many as fit), each one chunk slot: W and Qg (K / 64 panels of C
 * rows), KdT (a panel of K rows), A (a panel of C rows), U [C][VS + 8] (this block's value columns, plain,
 * read by the consumers in the accumulator layout), gl [K] fp32. Full barrier of a stage: 128 producer
 * arrivals (cp.async.mbarrier.arrive.noinc: when the thread's copies land); empty barrier: one arrival per
 * consumer thread after the stage's last read (the chunk's last wgmma wait). Use u of a stage waits full
 * parity u & 1; the producer waits empty parity (u - 1) & 1 before use u >= 1. The consumers fence the async
 * proxy after each full wait (wgmma reads what cp.async wrote).
 *
 * Order of a chunk: P1 and P2's S^T Qg^T are issued together (two commit groups), the wait for P1 alone lets
 * V'^T form while the second runs; then the decay, P3 and P2's V'^T A^T (two groups), one wait. The chain
 * from one chunk's S^T to the next is pack -> P1 -> V' -> pack -> P3.
 *
 * Registers per consumer thread: S^T K/2, its bf16 fragments K/4, X / V'^T C/2, O^T C/2, V' fragments C/4
 * (K 128, C 64: 176). Two consumer warpgroups (VS 128, 384 threads) move registers with setmaxnreg (producer
 * 40, consumers 232); one (VS 64, 256 threads) has 255 a thread without it.
 *
 * Mutation hooks: KF_MUTANT_NO_DECAY (kf_pw_decay), KF_MUTANT_CHUNK_BOUNDARY (the producer's slot index),
 * KF_MUTANT_SEG_BOUNDARY (the segment's start state); KF_KDA_DECAY_FIRST, the preparation's and the state
 * index's markers are shared with the mma path.
 */
#if !KF_PF_TR || KF_PF_FUSED || !KF_PF_MMA || (KF_PF_VS != 64 && KF_PF_VS != 128) || KF_PF_W != 8 || KF_PF_C % 16 != 0 \
    || KF_PF_C > 64 || (KF_PF_K != 64 && KF_PF_K != 128) || !defined(KF_PF_WG_NST) || !defined(KF_PF_WG_SMEM)
#error "kforge kda prefill sm90: invalid configuration (see the header of kda/prefill_sm90.cuh)"
#endif

#define KF_PW_NWG (KF_PF_VS / 64)                        /* consumer warpgroups */
#define KF_PW_THREADS (128 + 128 * KF_PW_NWG)
#define KF_PW_NK (KF_PF_K / 16)                          /* k16 steps over the keys */
#define KF_PW_NC (KF_PF_C / 16)                          /* k16 steps over a chunk */
#define KF_PW_UP (KF_PF_VS + 8)                          /* U row stride: the consumers' reads avoid bank conflicts */
#define KF_PW_NT (128 * KF_PW_NWG)                       /* consumer threads */
/* The segment workspace's states as images of the consumers' registers (segments, KF_PF_SEG > 1): the K x VS block of
 * value columns v0.. of a [K][V] region (c_s, ss) is K VS fp32 at (v0 / VS) K VS, holding consumer thread ct's column
 * block c of S^T (4 floats, the accumulator layout below) as float4 c NT + ct. Every kernel that writes or reads a
 * state there has the same consumer threads, so each thread moves its own 16-byte pieces and a warp 512 contiguous
 * bytes; the combine copies a block's image into shared memory and back with one bulk copy each, and its consumers'
 * reads there (a warp's 32 float4 in a row) meet no bank conflict. The transition M_s is stored as the combine's
 * shared-memory image too (bf16, the 128-byte swizzle of common/wgmma.cuh, K / 64 panels of K rows). */
__device__ __forceinline__ float4 *kf_pw_img(float *region, int v0) { return (float4 *)(region + (long long)(v0 / KF_PF_VS) * KF_PF_K * KF_PF_VS); }
__device__ __forceinline__ float4 kf_pw_piece(const float (&st)[KF_PF_K / 2], int c)
{
    return make_float4(st[4 * c], st[4 * c + 1], st[4 * c + 2], st[4 * c + 3]);
}
__device__ __forceinline__ void kf_pw_img_store(float4 *img, const float (&st)[KF_PF_K / 2], int ct)
{
#pragma unroll
    for (int c = 0; c < KF_PF_K / 8; ++c)
        img[c * KF_PW_NT + ct] = kf_pw_piece(st, c);
}
/* one stage, bytes from its (1024-aligned) start; templates/kda_prefill.lua mirrors the sizes */
#define KF_PW_W 0                                        /* W [C][K]: K / 64 panels of C rows */
#define KF_PW_Q (KF_PW_W + 2 * KF_PF_C * KF_PF_K)        /* Qg [C][K] */
#define KF_PW_KD (KF_PW_Q + 2 * KF_PF_C * KF_PF_K)       /* KdT [K][C]: one panel of K rows */
#define KF_PW_A (KF_PW_KD + 128 * KF_PF_K)               /* A [C][C]: one panel of C rows */
#define KF_PW_U (KF_PW_A + 128 * KF_PF_C)                /* U [C][UP] */
#define KF_PW_GL (KF_PW_U + 2 * KF_PF_C * KF_PW_UP)      /* gl [K] fp32 */
#define KF_PW_STAGE ((KF_PW_GL + 4 * KF_PF_K + 1023) / 1024 * 1024)
#define KF_PW_BAR (KF_PF_WG_NST * KF_PW_STAGE)           /* full [NST], then empty [NST] mbarriers */
static_assert(1023 + KF_PW_BAR + 16 * KF_PF_WG_NST <= KF_PF_WG_SMEM, "the template reserves too little shared memory");

/* d (+)= A (64x16, registers: the m16n8k16 A fragment per warp) * B (16xN via descriptor, K-major), N = 16, 32, 64,
 * 128 by the accumulator's size; sd 0 overwrites d */
#define KF_PW_R8 "%0, %1, %2, %3, %4, %5, %6, %7"
__device__ __forceinline__ void kf_pw_rs(float (&d)[8], const kf_u32 (&a)[4], unsigned long long db, int sd)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32." KF_WG_T "." KF_WG_T " {" KF_PW_R8 "}, "
                 "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                 : KF_WG_D8(0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(sd));
}

__device__ __forceinline__ void kf_pw_rs(float (&d)[16], const kf_u32 (&a)[4], unsigned long long db, int sd)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R16 "}, "
                 "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : KF_WG_D16 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(sd));
}

__device__ __forceinline__ void kf_pw_rs(float (&d)[32], const kf_u32 (&a)[4], unsigned long long db, int sd)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R32 "}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : KF_WG_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(sd));
}

__device__ __forceinline__ void kf_pw_rs(float (&d)[64], const kf_u32 (&a)[4], unsigned long long db, int sd)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." KF_WG_T "." KF_WG_T " {" KF_WG_R64 "}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : KF_WG_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(sd));
}

/* The producer's copy of the chunk slot at `slot` into the stage at st (thread t of 128): W, Qg, KdT and A
 * into swizzled panels, this block's VS columns of U from v0 (use_u; the identity columns have U = 0), gl. */
__device__ __forceinline__ void kf_pw_fetch(kf_u32 st, const char *slot, int v0, bool use_u, int t)
{
#pragma unroll 2
    for (int e = t; e < KF_PF_C * KF_PF_K / 8; e += 128) {
        const int r = e / (KF_PF_K / 8), c = e % (KF_PF_K / 8);
        const kf_u32 o = kf_wg_swz(KF_PF_C, r, c);
        kf_cp_async16(st + KF_PW_W + o, slot + KF_PF_OFF_W + 2 * (r * KF_PF_K + 8 * c), true);
        kf_cp_async16(st + KF_PW_Q + o, slot + KF_PF_OFF_Q + 2 * (r * KF_PF_K + 8 * c), true);
    }
#pragma unroll 2
    for (int e = t; e < KF_PF_K * KF_PF_C / 8; e += 128) {
        const int r = e / (KF_PF_C / 8), c = e % (KF_PF_C / 8);
        kf_cp_async16(st + KF_PW_KD + kf_wg_swz(KF_PF_K, r, c), slot + KF_PF_OFF_KD + 2 * (r * KF_PF_C + 8 * c), true);
    }
    for (int e = t; e < KF_PF_C * KF_PF_C / 8; e += 128) {
        const int r = e / (KF_PF_C / 8), c = e % (KF_PF_C / 8);
        kf_cp_async16(st + KF_PW_A + kf_wg_swz(KF_PF_C, r, c), slot + KF_PF_OFF_A + 2 * (r * KF_PF_C + 8 * c), true);
    }
    for (int e = t; use_u && e < KF_PF_C * KF_PF_VS / 8; e += 128) {
        const int r = e / (KF_PF_VS / 8), c = e % (KF_PF_VS / 8);
        kf_cp_async16(st + KF_PW_U + 2 * (r * KF_PW_UP + 8 * c), slot + KF_PF_OFF_U + 2 * (r * KF_PF_V + v0 + 8 * c),
                      true);
    }
    for (int e = t; e < KF_PF_K / 4; e += 128)
        kf_cp_async16(st + KF_PW_GL + 16 * e, slot + KF_PF_OFF_GL + 16 * e, true);
}

/* S^T <- S^T diag(gl): accumulator column 8c + 2 (lane % 4) + (r % 2) is key kk */
__device__ __forceinline__ void kf_pw_decay(float (&st)[KF_PF_K / 2], const float *gl, int c4)
{
#pragma unroll
    for (int c = 0; c < KF_PF_K / 8; ++c) {
        const float2 q = *(const float2 *)(gl + 8 * c + 2 * c4);
        const float dec[4] = { q.x, q.y, q.x, q.y };
#pragma unroll
        for (int r = 0; r < 4; ++r)
            st[4 * c + r] *= dec[r];  /* KF_MUTANT_NO_DECAY */
    }
}

/* O^T (accumulator: rows value columns, columns tokens) to o: lanes g and g ^ 1 of a quad column swap one value
 * each (shuffle over lane ^ 4), so that each stores one bf16 pair of adjacent value columns: even g the pair
 * (vc, vc + 1) of token i, odd g the pair (vc - 1, vc) of token i + 1. orow: o at token 0 of the chunk and
 * value column vc of half 0 (half 1: + 8); cc: the chunk's tokens. */
__device__ __forceinline__ void kf_pw_store_o(const float (&o)[KF_PF_C / 2], kf_u16 *orow, long long o_st, int g,
                                              int c4, int cc)
{
    const bool odd = g & 1;
#pragma unroll
    for (int c = 0; c < KF_PF_C / 8; ++c)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const float a = o[4 * c + 2 * hf], b = o[4 * c + 2 * hf + 1];   /* tokens i, i + 1 */
            const float x = __shfl_xor_sync(0xffffffffu, odd ? a : b, 4);
            const int i = 8 * c + 2 * c4 + (odd ? 1 : 0);
            if (i < cc)
                *(kf_u32 *)(orow + i * o_st + 8 * hf - (odd ? 1 : 0)) = odd ? kf_pack2(x, b) : kf_pack2(a, x);
        }
}

/* A ring of N stages' mbarriers from bar_f: full [N] (F arrivals: the producer warpgroup's 128, or one that expects a
 * bulk copy's bytes), then empty [N] (one arrival a consumer thread); initialised by thread 0, then a block barrier */
template <int N, int F = 128>
__device__ __forceinline__ void kf_pw_init_ring(kf_u32 bar_f)
{
    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < N; ++s) {
            kf_mbar_init(bar_f + 8 * s, F);
            kf_mbar_init(bar_f + 8 * (N + s), 128 * KF_PW_NWG);
        }
    }
    __syncthreads();
}

/* A consumer thread's S^T elements of the state of (n, hv) in h0 or ht (st[4 c + e]: key 8 c + 2 c4 + (e % 2), value
 * column vv + 8 (e / 2)), by a row pointer stepped 8 rows a column block c: adds, not a 64-bit product an element
 * (bench/NOTES.md session 29). The load gives zeros without h0. */
__device__ __forceinline__ void kf_pf_h0_load(float (&st)[KF_PF_K / 2], const kf_kda_params &p, int n, int hv, int c4,
                                              int vv)
{
    const kf_kda_soff so = kf_kda_h0_soff(p, n, hv);
    const float *rp = p.h0 ? p.h0 + so.base + (2 * c4) * so.rs + vv * so.cs : nullptr;
    const long long r8 = 8 * so.rs, c8 = 8 * so.cs;
#pragma unroll
    for (int c = 0; c < KF_PF_K / 8; ++c, rp += r8)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            st[4 * c + e] = rp ? rp[(e & 1) * so.rs + (e >> 1) * c8] : 0.f;
}
__device__ __forceinline__ void kf_pf_ht_store(const float (&st)[KF_PF_K / 2], const kf_kda_params &p, int n, int hv,
                                               int c4, int vv)
{
    const kf_kda_soff so = kf_kda_ht_soff(p, n, hv);
    float *hp = p.ht + so.base + (2 * c4) * so.rs + vv * so.cs;
    const long long r8 = 8 * so.rs, c8 = 8 * so.cs;
#pragma unroll
    for (int c = 0; c < KF_PF_K / 8; ++c, hp += r8)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            hp[(e & 1) * so.rs + (e >> 1) * c8] = st[4 * c + e];
}

/* The serial pass over the chunks of segment sg of sequence n, value head hv, VS value columns from v0 (MODE 0,
 * kf_kda_state), or MODE 1 (kf_kda_segop): no output; ident 0 the segment's offset from a zero state, ident 1 its
 * transition from the identity columns v0.. with U = 0. The contract of kda/prefill.cuh's kf_pf_state_body. */
template <int MODE>
__device__ __forceinline__ void kf_pw_state_body(const kf_kda_params &p, unsigned char *smem, int v0, bool ident,
                                                 int hv, int n, int sg)
{
    const int tid = threadIdx.x;
    long long bos, len;
    /* the segment's chunks as in kf_pf_state_body (impl mma renders kda/prefill.cuh unchanged: no shared helper) */
    kf_kda_seq(p, n, bos, len);
    const long long nch = (len + KF_PF_C - 1) / KF_PF_C;
    const long long cps = (nch + KF_PF_SEG - 1) / KF_PF_SEG;              /* chunks per segment */
    const long long c_begin = sg * cps < nch ? sg * cps : nch;
    const long long c_end = c_begin + cps < nch ? c_begin + cps : nch;
    const long long vb = kf_pf_vbase(p, n);
    const bool use_u = !(MODE == 1 && ident);

    const kf_u32 sraw = kf_smem_u32(smem);
    const kf_u32 sbase = (sraw + 1023u) & ~1023u;           /* the swizzle is a function of the address bits */
    unsigned char *const gbase = smem + (sbase - sraw);
    const kf_u32 bar_f = sbase + KF_PW_BAR, bar_e = bar_f + 8 * KF_PF_WG_NST;
    kf_pw_init_ring<KF_PF_WG_NST>(bar_f);

    if (tid < 128) {
        /* ---------------- producer warpgroup: the segment's slots, a stage each, in order */
#if KF_PW_NWG > 1
        kf_setmaxnreg_dec<40>();
#endif
#pragma unroll 1
        for (long long ch = c_begin; ch < c_end; ++ch) {
            const int j = (int)(ch - c_begin), s = j % KF_PF_WG_NST, u = j / KF_PF_WG_NST;
            if (u > 0)
                kf_mbar_wait(bar_e + 8 * s, (u - 1) & 1);     /* every consumer is done with use u - 1 */
            const long long vc = vb + ch;  /* KF_MUTANT_CHUNK_BOUNDARY */
            kf_pw_fetch(sbase + s * KF_PW_STAGE, (const char *)p.ws + (vc * p.hv_heads + hv) * (long long)KF_PF_SLOT,
                        v0, use_u, tid);
            kf_mbar_arrive_cp_async(bar_f + 8 * s);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }

    /* ---------------- consumer warpgroups: 64 value columns each */
#if KF_PW_NWG > 1
    kf_setmaxnreg_inc<232>();
#endif
    const int ct = tid - 128, wg = ct >> 7, wl = (ct >> 5) & 3, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int vl = 64 * wg + 16 * wl + g;                  /* block value column of accumulator half 0 (half 1: + 8) */
    const int last = nch > 0 ? (int)((nch - 1) / cps) : 0; /* segment of the last chunk */
#if KF_PF_SEG > 1
    const int sr = sg;  /* KF_MUTANT_SEG_BOUNDARY */
    const float4 *s_in = kf_pw_img(kf_pf_segws(p, n, hv, sr) + KF_PF_SEG_SS, v0);   /* its image (above) */
#endif

    /* S^T: element e of column block c is value column v0 + vl + 8 (e / 2), key 8c + 2 (lane % 4) + (e % 2) */
    float st[KF_PF_K / 2];
#if KF_PF_SEG > 1
#pragma unroll
    for (int c = 0; c < KF_PF_K / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int kk = 8 * c + 2 * c4 + (e & 1), vv = v0 + vl + 8 * (e >> 1);
            st[4 * c + e] = MODE == 1 ? (ident && kk == vv ? 1.f : 0.f) : (&s_in[c * KF_PW_NT + ct].x)[e];
        }
#else
    kf_pf_h0_load(st, p, n, hv, c4, v0 + vl);                /* MODE 0: without segments there is no segment operator */
#endif

    float x[KF_PF_C / 2], o[KF_PF_C / 2];                  /* X then V'^T; O^T ([64][C] accumulators) */
#pragma unroll
    for (int i = 0; i < KF_PF_C / 2; ++i)
        x[i] = o[i] = 0.f;
    kf_u16 *const obase = (kf_u16 *)p.o + (p.cu_seqlens ? 0 : (long long)n * p.o_sb) + (long long)hv * p.o_sh + v0 + vl;
    (void)obase;

#pragma unroll 1
    for (long long ch = c_begin; ch < c_end; ++ch) {
        const int j = (int)(ch - c_begin), s = j % KF_PF_WG_NST, ph = (j / KF_PF_WG_NST) & 1;
        kf_u32 stg = sbase + s * KF_PW_STAGE;
        const unsigned char *gst = gbase + s * KF_PW_STAGE;
        kf_u32 sa[KF_PW_NK][4], va[KF_PW_NC][4];
        kf_wg_pack_p<KF_PW_NK>(sa, st);                     /* bf16(S^T): the A fragments of P1 and P2 */
        kf_mbar_wait(bar_f + 8 * s, ph);
        kf_fence_proxy_async();
        /* the previous chunk's o, stored only now: the fence (MEMBAR.ALL.CTA in SASS) waits for every memory
         * operation the thread has in flight, so stores issued before it would put a global round trip into every
         * chunk of the chain; P2 below overwrites o, and a store reads its registers when it issues */
        if (MODE == 0 && j > 0)
            kf_pw_store_o(o, obase + (bos + (ch - 1) * KF_PF_C) * p.o_st, p.o_st, g, c4, KF_PF_C);
        /* descriptors of the stage's panels; k16 step k adds its byte offset / 16 to the address field (the stage
         * is opaque to the compiler, so the descriptors are formed here, not hoisted out of the loop) */
        asm volatile("" : "+r"(stg));
        const unsigned long long dw = kf_gmma_desc(stg + KF_PW_W, 16, 1024), dq = kf_gmma_desc(stg + KF_PW_Q, 16, 1024);
        const unsigned long long dkd = kf_gmma_desc(stg + KF_PW_KD, 16, 1024);
        const unsigned long long da = kf_gmma_desc(stg + KF_PW_A, 16, 1024);

        /* P1: X = S^T W^T; P2 (first half): O^T = S^T Qg^T */
        kf_wgmma_fence();
#pragma unroll
        for (int k = 0; k < KF_PW_NK; ++k)
            kf_pw_rs(x, sa[k], dw + (((k >> 2) * KF_PF_C * 128 + (k & 3) * 32) >> 4), k > 0);
        kf_wgmma_commit();
        if (MODE == 0) {
#pragma unroll
            for (int k = 0; k < KF_PW_NK; ++k)
                kf_pw_rs(o, sa[k], dq + (((k >> 2) * KF_PF_C * 128 + (k & 3) * 32) >> 4), k > 0);
            kf_wgmma_commit();
            kf_wgmma_wait<1>();
        } else {
            kf_wgmma_wait<0>();
        }
        kf_wg_fence_regs(x);

        /* V'^T = U^T - X (U [C][UP]: token i of column block c, value column vl (+ 8)) */
        const kf_u16 *U = (const kf_u16 *)(gst + KF_PW_U);
#pragma unroll
        for (int c = 0; c < KF_PF_C / 8; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 8 * c + 2 * c4 + (e & 1), r = vl + 8 * (e >> 1);
                x[4 * c + e] = (use_u ? kf_to_float(U[i * KF_PW_UP + r]) : 0.f) - x[4 * c + e];
            }
        kf_wg_pack_p<KF_PW_NC>(va, x);
        const float *gl = (const float *)(gst + KF_PW_GL);
        if (KF_KDA_DECAY_FIRST)
            kf_pw_decay(st, gl, c4);

        /* P3: S^T += V'^T KdT^T (the chain to the next chunk first); P2 (second half): O^T += V'^T A^T */
        kf_wgmma_fence();
#pragma unroll
        for (int k = 0; k < KF_PW_NC; ++k)
            kf_pw_rs(st, va[k], dkd + ((k * 32) >> 4), 1);
        kf_wgmma_commit();
        if (MODE == 0) {
#pragma unroll
            for (int k = 0; k < KF_PW_NC; ++k)
                kf_pw_rs(o, va[k], da + ((k * 32) >> 4), 1);
            kf_wgmma_commit();
        }
        kf_wgmma_wait<0>();
        kf_wg_fence_regs(st);
        kf_wg_fence_regs(o);
        kf_wg_fence_frags(sa);
        kf_wg_fence_frags(va);
        if (!KF_KDA_DECAY_FIRST)
            kf_pw_decay(st, gl, c4);
        kf_mbar_arrive(bar_e + 8 * s);                      /* the stage may be refilled */
    }
    if (MODE == 0 && c_end > c_begin)                       /* the last chunk's o (a chunk before it is whole) */
        kf_pw_store_o(o, obase + (bos + (c_end - 1) * KF_PF_C) * p.o_st, p.o_st, g, c4,
                      (int)(len - (c_end - 1) * KF_PF_C < KF_PF_C ? len - (c_end - 1) * KF_PF_C : KF_PF_C));

    (void)last;
#if KF_PF_SEG > 1
    if (MODE == 1) {
        float *so = kf_pf_segws(p, n, hv, sg);
        if (!ident) {                                      /* c_s: this block's image */
            kf_pw_img_store(kf_pw_img(so + KF_PF_SEG_CS, v0), st, ct);
            return;
        }
        /* M bf16 [K][K] (row key, column vv) in the combine's swizzled panels: the B operand of kf_kda_segcomb below */
        unsigned char *const mi = (unsigned char *)(so + KF_PF_SEG_MS);
#pragma unroll
        for (int c = 0; c < KF_PF_K / 8; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int kk = 8 * c + 2 * c4 + (e & 1), vv = v0 + vl + 8 * (e >> 1);
                *(kf_u16 *)(mi + kf_wg_swz(KF_PF_K, kk, vv >> 3) + 2 * (vv & 7)) = kf_kda_bf16(st[4 * c + e]);  /* KF_MUTANT_SEG_MT */
            }
        return;
    }
#endif
    if (MODE == 0 && p.ht && (KF_PF_SEG == 1 || sg == last)) {
        kf_pf_ht_store(st, p, n, hv, c4, v0 + vl);
    }
}

/* grid (V / VS, hv_heads, nseq * seg): block (x, hv, n * seg + sg) */
extern "C" __global__ void __launch_bounds__(KF_PW_THREADS, 1)
kf_kda_state(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __attribute__((aligned(1024))) unsigned char pw_smem[];
    kf_pw_state_body<0>(p, pw_smem, blockIdx.x * KF_PF_VS, false, blockIdx.y, blockIdx.z / KF_PF_SEG,
                        blockIdx.z % KF_PF_SEG);
}

#if KF_PF_SEG > 1
/* grid (V / VS + K / VS, hv_heads, nseq * seg): the offsets (x < V / VS) and transitions of kda/prefill.cuh's
 * kf_kda_segop; the last segment's operator is never used. */
extern "C" __global__ void __launch_bounds__(KF_PW_THREADS, 1)
kf_kda_segop(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __attribute__((aligned(1024))) unsigned char pw_smem[];
    const int sg = blockIdx.z % KF_PF_SEG;
    if (sg == KF_PF_SEG - 1)
        return;
    const bool ident = blockIdx.x >= KF_PF_V / KF_PF_VS;
    kf_pw_state_body<1>(p, pw_smem, (ident ? blockIdx.x - KF_PF_V / KF_PF_VS : blockIdx.x) * KF_PF_VS, ident,
                        blockIdx.y, blockIdx.z / KF_PF_SEG, sg);
}

/* The segment combine on wgmma (replaces kda/prefill.cuh's, whose fp32 products on CUDA cores read two shared
 * operands a multiply-add: ~41 us a segment, more than a whole 1024-token call). The start states in order,
 * S_0 = h0, S_{s+1} = M_s S_s + c_s, held transposed as the state pass holds them: consumer warpgroup j of the
 * block owns value columns v0 + 64 j .. + 63 and S^T [64][K] as a wgmma accumulator, and a step is
 * S^T <- c_s^T + bf16(S^T) M_s^T: m64nKk16 with A from registers (the P1 product's conversion) and B = M_s, which
 * kf_kda_segop above writes as bf16 [K][K] (K-major: keys j along a row) in this kernel's shared-memory image.
 * bf16 operands as in every chunk's S^T W^T of the state pass; fp32 accumulation. Each S_s goes to the ss slot of
 * segment s (the consumers' register image, kf_pw_img) for kf_kda_state.
 * Pipeline: KF_PF_WG_CNST stages (2..8, as many as fit), a stage M_s's image and this block's image of c_s, each
 * fetched by one bulk copy (one producer thread, the stage's full barrier expecting the bytes). Step s's consumers
 * wait for the stage, swap S_s into the stage where they read c_s (each thread its own 16-byte pieces, so no
 * barrier), fence it for the async proxy, run the step's wgmma and arrive on the stage's empty barrier. The producer,
 * once that barrier completes, stores S_s from the stage to its ss slot with one bulk store and, the store's read
 * done, refills the stage for step s + CNST; after the last step it drains the stages that no refill follows. So
 * the consumers issue no global store in the loop (fence.proxy.async is MEMBAR.ALL.CTA in SASS and would wait for
 * it), only S_{SEG-1}'s after their last step.
 * (Sessions 17-29: 128 producer threads fetched a stage with 32 cp.async each, with M_s row-major and c_s [K][V] in
 * global memory swizzled and padded on the way; ~4 800 cycles a step at 1K seg 8, the stage arriving at ~14 bytes
 * a cycle, bench/NOTES.md session 29.)
 * grid (V / VS, hv_heads, nseq), 128 + 128 VS / 64 threads, 1024 + CNST (KF_PW_CB + 16) bytes of shared memory
 * (templates/kda_prefill.lua mirrors both). */
#define KF_PW_MB (2 * KF_PF_K * KF_PF_K)                 /* M_s: bf16 [K][K], swizzled panels */
#define KF_PW_SB (4 * KF_PF_K * KF_PF_VS)                /* a block's state image: c_s, then S_s */
#define KF_PW_CB ((KF_PW_MB + KF_PW_SB + 1023) / 1024 * 1024)   /* one stage */
#if !defined(KF_PF_WG_CNST) || KF_PF_WG_CNST < 2 || KF_PF_WG_CNST > 8
#error "kforge kda prefill sm90: KF_PF_WG_CNST (the combine's stages) must be 2..8"
#endif

extern "C" __global__ void __launch_bounds__(KF_PW_THREADS, 1)
kf_kda_segcomb(const kf_kda_params p)
{
    KF_PDL_ENTRY();   /* before any global access: common/types.cuh */
    extern __shared__ __attribute__((aligned(1024))) unsigned char pw_smem[];
    const kf_u32 sraw = kf_smem_u32(pw_smem), sbase = (sraw + 1023u) & ~1023u;
    const unsigned char *const gbase = pw_smem + (sbase - sraw);
    const int v0 = blockIdx.x * KF_PF_VS, hv = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
    const kf_u32 bar_f = sbase + KF_PF_WG_CNST * KF_PW_CB, bar_e = bar_f + 8 * KF_PF_WG_CNST;
    kf_pw_init_ring<KF_PF_WG_CNST, 1>(bar_f);

    if (tid < 128) {
        /* ---------------- producer: M_s and c_s of steps 0 .. SEG - 2, a stage each, in order; before a stage's use
         * u >= 1 (step sg) and after the last step, S_{sg - CNST} from the stage to its ss slot */
#if KF_PW_NWG > 1
        kf_setmaxnreg_dec<40>();
#endif
        if (tid != 0)
            return;
#pragma unroll 1
        for (int sg = 0; sg + 1 < KF_PF_SEG + KF_PF_WG_CNST; ++sg) {
            const int s = sg % KF_PF_WG_CNST, u = sg / KF_PF_WG_CNST;
            const kf_u32 st = sbase + s * KF_PW_CB;
            if (u > 0) {
                kf_mbar_wait(bar_e + 8 * s, (u - 1) & 1);     /* every consumer is done with use u - 1 */
                kf_bulk_store(kf_pw_img(kf_pf_segws(p, n, hv, sg - KF_PF_WG_CNST) + KF_PF_SEG_SS, v0), st + KF_PW_MB,
                              KF_PW_SB);
                kf_bulk_commit();
            }
            if (sg + 1 < KF_PF_SEG) {
                float *const seg = kf_pf_segws(p, n, hv, sg);
                if (u > 0)
                    kf_bulk_wait_read<0>();                    /* the store has read S_{sg - CNST} out of the stage */
                kf_mbar_expect_tx(bar_f + 8 * s, KF_PW_MB + KF_PW_SB);
                kf_bulk_load(st, seg + KF_PF_SEG_MS, KF_PW_MB, bar_f + 8 * s);
                kf_bulk_load(st + KF_PW_MB, kf_pw_img(seg + KF_PF_SEG_CS, v0), KF_PW_SB, bar_f + 8 * s);
            }
        }
        kf_bulk_wait<0>();                                     /* the start states written before the kernel ends */
        return;
    }

    /* ---------------- consumer warpgroups: 64 value columns each */
#if KF_PW_NWG > 1
    kf_setmaxnreg_inc<232>();
#endif
    const int ct = tid - 128, wg = ct >> 7, wl = (ct >> 5) & 3, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int vl = 64 * wg + 16 * wl + g;                  /* value column of accumulator half 0 (half 1: + 8) */
    /* S_0 = h0 (to its ss slot through stage 0, as every S_sg but the last) */
    float st[KF_PF_K / 2];                                 /* element e of column block c: key 8c + 2 c4 + (e % 2) */
    kf_pf_h0_load(st, p, n, hv, c4, v0 + vl);

#pragma unroll 1
    for (int sg = 0; sg + 1 < KF_PF_SEG; ++sg) {
        const int s = sg % KF_PF_WG_CNST, ph = (sg / KF_PF_WG_CNST) & 1;
        kf_u32 sa[KF_PW_NK][4];
        kf_wg_pack_p<KF_PW_NK>(sa, st);
        kf_mbar_wait(bar_f + 8 * s, ph);                   /* step sg's stage landed (bulk copies: no proxy fence) */
        /* st <- c_s, and S_sg in its place for the producer's bulk store (the thread's own pieces) */
        float4 *const cs = (float4 *)(gbase + s * KF_PW_CB + KF_PW_MB);
#pragma unroll
        for (int c = 0; c < KF_PF_K / 8; ++c) {
            const float4 a = cs[c * KF_PW_NT + ct];  /* KF_MUTANT_SEG_FIXUP */
            cs[c * KF_PW_NT + ct] = kf_pw_piece(st, c);
            st[4 * c] = a.x, st[4 * c + 1] = a.y, st[4 * c + 2] = a.z, st[4 * c + 3] = a.w;
        }
        kf_fence_proxy_async();                            /* S_sg's stores seen by the bulk store */
        kf_u32 sm = sbase + s * KF_PW_CB;
        asm volatile("" : "+r"(sm));
        const unsigned long long dm = kf_gmma_desc(sm, 16, 1024);
        kf_wgmma_fence();
#pragma unroll
        for (int k = 0; k < KF_PW_NK; ++k)
            kf_pw_rs(st, sa[k], dm + (((k >> 2) * KF_PF_K * 128 + (k & 3) * 32) >> 4), 1);
        kf_wgmma_commit();
        kf_wgmma_wait<0>();
        kf_wg_fence_regs(st);
        kf_wg_fence_frags(sa);
        kf_mbar_arrive(bar_e + 8 * s);    /* stage s read (c_s and the wgmma's M_s), S_sg written: store it, refill */
    }
    /* the last state: no fence follows, so the consumers store it themselves */
    kf_pw_img_store(kf_pw_img(kf_pf_segws(p, n, hv, KF_PF_SEG - 1) + KF_PF_SEG_SS, v0), st, ct);
}
#endif

#endif
