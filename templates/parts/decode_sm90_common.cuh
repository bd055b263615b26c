/* parts/decode_sm90_common.cuh: what the two Hopper absorbed-MLA decode kernels share: the CTA's rows and key range, barriers, the copy of Q, the epilogue */
#ifndef KF_PARTS_DECODE_SM90_COMMON_CUH
#define KF_PARTS_DECODE_SM90_COMMON_CUH

/*
 * The pieces parts/decode_sm90.cuh (impl "wgmma") and parts/decode_sm90_ks.cuh (impls "wgmma_ks", "wgmma_ksl")
 * share; templates/attn_parts_decode.lua renders this fragment right before either. Needs the template's defines
 * (KF_G, KF_CAUSAL, KF_DV, KF_FOR_KPARTS), common/types.cuh, common/mma.cuh (cp.async), common/wgmma.cuh and
 * common/parts_params.h.
 *
 * Both kernels: one layer, Q columns and tile columns in the same order, a CTA of 3 warpgroups on 64 packed rows
 * pr = row0 .. row0+63 (pr = i * G + g: query row i, head h + g) of one kv head and the key range of its split,
 * Q and key tiles in 128-byte-swizzled panels (common/wgmma.cuh) from a 1024-byte-aligned shared-memory base.
 * Split 1 writes o and lse, splits > 1 the fp32 partials that kf_attn_combine merges.
 *
 * Each kernel's cubin is byte-identical to the one it had before these pieces moved here (tests/same_cubins.sh),
 * and that decides their form: the start and the epilogue are statement macros, and the producer's copies of
 * cache rows stay in the kernels (kf_pd_load_cache, kf_ks_load_cache), because each kernel compiles to other code
 * from any one form of them. The marked lines (KF_MUTANT_*) are in the kernels.
 */

/* Q column c and tile column c are the same key column (one layer: parts in order, side by side) */
#define KF_PD_SAME_COLUMNS(P, QOFF8, DIM, KOFF8, LS8) static_assert((QOFF8) == (KOFF8), "Q and tile columns differ");
KF_FOR_KPARTS(KF_PD_SAME_COLUMNS)
#undef KF_PD_SAME_COLUMNS

/* The start of both kernels, a statement macro (it declares the kernel's names and returns from the kernel): the
 * CTA's coordinates (tid, b, kvh, h: the group's first query head, split, nsplit, n_q, n_kv, row0), a return when
 * its 64 (or TM) rows lie past the packed rows, the key range of the split in blocks of BN keys (kbeg .. kend; no row sees
 * a key at or past kstop, every row sees every key below kmask; nblk blocks from kbeg to kstop; coff: causal
 * j <= i + coff), and the shared memory: kf_smem, sbase (1024-byte aligned: the swizzle pattern is a function of
 * the address bits) and gbase (the same byte through a generic pointer). p: the kernel's kf_parts_params. */
#define KF_PD_CTA(BN) KF_PD_CTA_ROWS(BN, 64)
/* The same for a tile of TM packed rows (parts/decode_wg8.cuh: 16) */
#define KF_PD_CTA_ROWS(BN, TM)                                                                                      \
    extern __shared__ __attribute__((aligned(1024))) unsigned char kf_smem[];                                       \
    KF_PDL_WAIT(); /* before any global access; dependents placed as the blocks exit: common/types.cuh */           \
    const int tid = threadIdx.x;                                                                                    \
    const int b = blockIdx.z;                                                                                       \
                                                                                                                    \
    const int ntiles = (KF_G * p.sq + (TM) - 1) / (TM);                                                             \
    const int tile = blockIdx.y % ntiles;                                                                           \
    const int kvh = blockIdx.y / ntiles;                                                                            \
    const int h = kvh * KF_G;                                                                                       \
    const int split = blockIdx.x, nsplit = p.splits;                                                                \
    const int n_q = p.sq;                                                                                           \
    const int n_kv = p.kv_len ? p.kv_len[b] : p.skv;                                                                \
    const int row0 = tile * (TM);                                                                                   \
    if (row0 >= KF_G * n_q)                                                                                         \
        return;                                                                                                     \
    const int imin = row0 / KF_G, imax = (min(row0 + (TM), KF_G * n_q) - 1) / KF_G;                                 \
    const int coff = n_kv - n_q;                                                                                    \
    const int bps = ((n_kv + (BN) - 1) / (BN) + nsplit - 1) / nsplit;                                               \
    const int kbeg = split * bps * (BN), kend = min(n_kv, kbeg + bps * (BN));                                       \
    const int kstop = KF_CAUSAL ? min(kend, imax + coff + 1) : kend;                                                \
    const int kmask = KF_CAUSAL ? min(kend, imin + coff + 1) : kend;                                                \
    const int nblk = kstop > kbeg ? (kstop - kbeg + (BN) - 1) / (BN) : 0;                                           \
                                                                                                                    \
    const kf_u32 sraw = kf_smem_u32(kf_smem);                                                                       \
    const kf_u32 sbase = (sraw + 1023u) & ~1023u;                                                                   \
    unsigned char *const gbase = kf_smem + (sbase - sraw);

/* Thread tid 0 initialises the mbarriers: bar_q (Q, 128 producer arrivals), N full barriers from bar_f (128
 * producer arrivals each) and N empty ones from bar_e (E consumer arrivals each), 8 bytes apart; then the CTA syncs. */
template <int N, int E>
__device__ __forceinline__ void kf_pd_init_bars(int tid, kf_u32 bar_q, kf_u32 bar_f, kf_u32 bar_e)
{
    if (tid == 0) {
        kf_mbar_init(bar_q, 128);
#pragma unroll
        for (int s = 0; s < N; ++s) {
            kf_mbar_init(bar_f + 8 * s, 128);
            kf_mbar_init(bar_e + 8 * s, E);
        }
    }
    __syncthreads();
}

/* tile row r -> query row i and query head hh (h: first head of the kv head's group) */
__device__ __forceinline__ void kf_pd_row(int row0, int r, int h, int &i, int &hh)
{
    const int pr = row0 + r;
    i = pr / KF_G;
    hh = h + pr % KF_G;
}

/* The producer's copy of Q: the 64 rows from row0 of every key part (rows past n_q zero-filled) into the panels at
 * sQ (64 rows a panel), each thread's arrival at bar_q fired when its copies land; t: thread of the producer. */
__device__ __forceinline__ void kf_pd_load_q(kf_u32 sQ, kf_u32 bar_q, const kf_parts_params &p, int row0, int h, int b,
                                             int n_q, int t)
{
#define KF_PD_LOAD_Q(P, QOFF8, DIM, KOFF8, LS8)                                                                     \
    {                                                                                                               \
        const kf_parts_tensor qt = p.q[0][P];                                                                       \
        for (int idx = t; idx < 64 * (DIM / 8); idx += 128) {                                                       \
            const int r = idx / (DIM / 8), c = idx % (DIM / 8);                                                     \
            int i, hh;                                                                                              \
            kf_pd_row(row0, r, h, i, hh);                                                                           \
            const bool ok = i < n_q;                                                                                \
            const kf_u16 *src = (const kf_u16 *)qt.p + (ok ? (long long)b * qt.sb + (long long)i * qt.ss            \
                                                             + (long long)hh * qt.sh + c * 8 : 0);                  \
            kf_cp_async16(sQ + kf_wg_swz(64, r, QOFF8 + c), src, ok);                                               \
        }                                                                                                           \
    }
    KF_FOR_KPARTS(KF_PD_LOAD_Q)
#undef KF_PD_LOAD_Q
    kf_mbar_arrive_cp_async(bar_q);
}

/* A value pair to the output (bf16 / fp16) or to a split's fp32 partial */
__device__ __forceinline__ void kf_pd_put2(kf_u16 *d, float a, float b) { *(kf_u32 *)d = kf_pack2(a, b); }
__device__ __forceinline__ void kf_pd_put2(float *d, float a, float b) { *(float2 *)d = make_float2(a, b); }

/* O's row of accumulator half hf times inv to dst: one accumulator o[N] (its pairs 8 columns apart, the layout of
 * common/wgmma.cuh), or NT side by side (o[t] the columns from t * 2N) */
template <class T, int N>
__device__ __forceinline__ void kf_pd_store_row(T *dst, const float (&o)[N], int hf, float inv)
{
#pragma unroll
    for (int k = 0; k < N / 4; ++k)
        kf_pd_put2(dst + k * 8, o[4 * k + 2 * hf] * inv, o[4 * k + 2 * hf + 1] * inv);
}
template <class T, int NT, int N>
__device__ __forceinline__ void kf_pd_store_row(T *dst, const float (&o)[NT][N], int hf, float inv)
{
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int c = 0; c < N / 4; ++c)
            kf_pd_put2(dst + t * (2 * N) + c * 8, o[t][4 * c + 2 * hf] * inv, o[t][4 * c + 2 * hf + 1] * inv);
}

/* The epilogue of consumer C (value columns C * DV/2 .. +DV/2), a statement macro (as a function, or with the row
 * written one way for both kernels, the cubins change): per accumulator half hf = 0, 1, tile row ROW (an expression
 * in hf; row sums l rsum0 / rsum1 over the quad and both consumers, maxima m rmax0 / rmax1) -> O / l into o (split
 * 1, and lse = m * scale + log(l) from consumer 0) or the split's fp32 partial. The kernel's names it uses: p, o
 * (kf_pd_store_row), b, split, nsplit, n_q, row0, h, hh, lane. */
#define KF_PD_EPILOGUE(ROW, C)                                                                                      \
    {                                                                                                               \
        const int col0 = (C) * (KF_DV / 2) + 2 * (lane & 3);                                                        \
        _Pragma("unroll") for (int hf = 0; hf < 2; ++hf) {                                                          \
            int i;                                                                                                  \
            kf_pd_row(row0, ROW, h, i, hh);                                                                         \
            if (i >= n_q)                                                                                           \
                continue;                                                                                           \
            const float l = hf ? rsum1 : rsum0, m = hf ? rmax1 : rmax0;                                             \
            const float inv = l > 0.f ? 1.f / l : 0.f;                                                              \
            const float lse = l > 0.f ? m * p.scale + logf(l) : KF_NEG_INF;                                         \
            if (nsplit == 1) {                                                                                      \
                const kf_parts_tensor ot = p.o[0];                                                                  \
                kf_u16 *og = (kf_u16 *)ot.p + (long long)b * ot.sb + (long long)i * ot.ss + (long long)hh * ot.sh   \
                             + col0;                                                                                \
                kf_pd_store_row(og, o, hf, inv);                                                                    \
                if (p.lse[0] && (C) == 0 && (lane & 3) == 0)                                                        \
                    p.lse[0][(long long)b * p.lse_sb + (long long)hh * p.lse_sh + i] = lse;                         \
            } else {                                                                                                \
                const long long rid = ((long long)b * p.sq + i) * (long long)p.hq + hh;                             \
                const long long wrow = (long long)split * p.ws_rows * p.hq + rid;                                   \
                float *wo = p.ws_o[0] + wrow * KF_DV + col0;                                                        \
                kf_pd_store_row(wo, o, hf, inv);                                                                    \
                if ((C) == 0 && (lane & 3) == 0)                                                                    \
                    p.ws_lse[0][wrow] = lse;                                                                        \
            }                                                                                                       \
        }                                                                                                           \
    }

#endif
