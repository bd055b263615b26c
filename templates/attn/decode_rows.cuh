/* attn/decode_rows.cuh: a GQA decode CTA's packed query rows and key range (attn/decode_direct.cuh, attn/decode_wg8.cuh) */
#ifndef KF_ATTN_DECODE_ROWS_CUH
#define KF_ATTN_DECODE_ROWS_CUH

/*
 * Needs common/types.cuh, common/attn_features.cuh, KF_D, KF_G, KF_TM (packed rows a CTA), KF_BN (keys a step: the split granularity), KF_CAUSAL, KF_WIN and
 * common/attn_params.h. Packed row pr = i G + g (query row i, head h + g), as attn/fwd.cuh's decode; grid (splits,
 * hkv * cdiv(G sq, TM), b). The split's keys are kbeg .. kend - 1 (with a window, counted from the first key any of
 * the tile's rows sees); kstop: past the tile's last causal key; steps reaching past kmask need the end / causal
 * mask, steps starting before kwmask (window) the window's. The lines marked KF_MUTANT_ are attn/fwd.cuh's (the
 * suite plants the same bugs).
 */
struct kf_dec_rows {
    int h, kvh, r0, n_q, k0, n_kv, row0, imin, imax, coff, kbeg, kend, kstop, kmask, wwin, kwmask;
};

/* This CTA's rows and keys; false when its tile lies wholly past the sequence's rows (nothing to do). */
__device__ __forceinline__ bool kf_dec_rows_of(const kf_attn_params &p, kf_dec_rows &x)
{
    const int b = blockIdx.z;
    const int ntiles = (KF_G * p.sq + KF_TM - 1) / KF_TM;
    const int tile = blockIdx.y % ntiles;
    const int h = (blockIdx.y / ntiles) * KF_G;            /* first query head of the group */
    const int split = blockIdx.x, nsplit = p.splits;
    const int kvh = h / KF_G; // KF_MUTANT_KVHEAD

    const int r0 = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
    const int n_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - r0 : p.sq;
    const int k0 = p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0;
    const int n_kv = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - k0 : (p.kv_len ? p.kv_len[b] : p.skv);
    const int row0 = tile * KF_TM;
    if (row0 >= KF_G * n_q)
        return false;                                     /* tile wholly past this sequence's rows */
    const int imin = row0 / KF_G, imax = (min(row0 + KF_TM, KF_G * n_q) - 1) / KF_G;
    const int coff = n_kv - n_q; // KF_MUTANT_CAUSAL
#if KF_WIN
    const int wwin = p.window_left; // KF_MUTANT_WINDOW
    const int wlo = max(0, imin + coff - wwin);        /* keys before wlo are outside every row's window */
    const int kwmask = imax + coff - wwin;              /* steps starting before it need the window's mask */
    const int bps = ((n_kv - wlo + KF_BN - 1) / KF_BN + nsplit - 1) / nsplit;     /* steps per split */
    const int kbeg = wlo + split * bps * KF_BN, kend = min(n_kv, kbeg + bps * KF_BN); // KF_MUTANT_SPLIT
#else
    const int wwin = 0, kwmask = 0;
    const int bps = ((n_kv + KF_BN - 1) / KF_BN + nsplit - 1) / nsplit;     /* steps per split */
    const int kbeg = split * bps * KF_BN, kend = min(n_kv, kbeg + bps * KF_BN); // KF_MUTANT_SPLIT
#endif
    const int kstop = KF_CAUSAL ? min(kend, imax + coff + 1) : kend;
    const int kmask = KF_CAUSAL ? min(kend, imin + coff + 1) : kend;
    x = kf_dec_rows{h, kvh, r0, n_q, k0, n_kv, row0, imin, imax, coff, kbeg, kend, kstop, kmask, wwin, kwmask};
    return true;
}

/* A compile-time flag as a type, for the generic lambdas that instantiate a loop twice (paged K/V or not, a whole
 * step or the last) */
template <bool B> struct kf_dec_flag {
    static constexpr bool value = B;
};

/* Whether a step of keys j0 .. j0 + n - 1 needs the mask below at all */
__device__ __forceinline__ bool kf_dec_needs_mask(const kf_dec_rows &x, int j0, int n)
{
#if KF_WIN
    return j0 + n > x.kmask || j0 < x.kwmask;
#else
    return j0 + n > x.kmask;
#endif
}

/* Whether key j is hidden from query row i: at or past the split's end, past the row's causal bound, before its
 * window */
__device__ __forceinline__ bool kf_dec_hidden(const kf_dec_rows &x, int j, int i)
{
#if KF_WIN
    return j >= x.kend || (KF_CAUSAL && j > i + x.coff) || j < i + x.coff - x.wwin;
#else
    return j >= x.kend || (KF_CAUSAL && j > i + x.coff);
#endif
}

/* Output columns c .. c + 3 (c a multiple of 4) of query row r (within sequence b) and head hh, times inv: to o (one
 * 8-byte store: o's rows are 16-byte aligned) and, at c 0, lse when the CTA is the only split; else to this split's
 * fp32 partial and its lse for kf_attn_combine. */
__device__ __forceinline__ void kf_dec_put4(const kf_attn_params &p, int b, int r, int hh, int c, float v0, float v1,
                                            float v2, float v3, float inv, float lse, int split, int nsplit)
{
    if (nsplit == 1) {
        kf_u32 *oc = (kf_u32 *)((kf_u16 *)p.o + (p.cu_seqlens_q ? 0 : (long long)b * p.o_sb) + (long long)r * p.o_ss
                                + (long long)hh * p.o_sh + c);
        *(uint2 *)oc = make_uint2(kf_pack2(v0 * inv, v1 * inv), kf_pack2(v2 * inv, v3 * inv));
        if (p.lse && c == 0)
            p.lse[(p.cu_seqlens_q ? 0 : (long long)b * p.lse_sb) + (long long)hh * p.lse_sh + r] = lse;
    } else {
        const long long rid = ((p.cu_seqlens_q ? 0 : (long long)b * p.sq) + r) * (long long)p.hq + hh;
        const long long wrow = (long long)split * p.ws_rows * p.hq + rid;
        *(float4 *)(p.ws_o + wrow * KF_D + c) = make_float4(v0 * inv, v1 * inv, v2 * inv, v3 * inv);
        if (c == 0)
            p.ws_lse[wrow] = lse;
    }
}

#endif
