/* runtime/attn_tmap.c: the tensor maps of attn_prefill impl=wgmma_tma, encoded on the host for each call */
#include "runtime/attn_tmap.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TMAP_STRIDE_MAX (1ll << 40)
#define TMAP_PAGES (1ll << 31)   /* every int32 page index */

/* One map: rows x heads x batch rows of `d` 16-bit columns at base, strides in elements. cu NULL: the checks only. */
static int encode(const rt_cu *cu, kf_tmap *m, const char *name, const void *base, int d, long long rows, long long heads,
                  long long batch, long long ss, long long sh, long long sb, int box_rows, core_err *e)
{
    if ((uintptr_t)base & 15u) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "impl wgmma_tma: tensor %s = %p is not 16-byte aligned (a tensor map needs it)", name, base);
    }
    const long long dm[4] = {d, rows < 1 ? 1 : rows, heads, batch < 1 ? 1 : batch};
    long long st[3] = {ss, sh, sb};
    /* a dimension of size 1 is never stepped: its stride is whatever the layout says (0 for a packed batch);
     * give the map the dense one so that no unused stride is refused */
    for (int i = 0; i < 3; i++)
        if (dm[i + 1] == 1)
            st[i] = i == 0 ? d : st[i - 1] * dm[i];
    static const char *const sname[3] = {"sequence", "head", "batch"};
    unsigned long long strides[3];
    for (int i = 0; i < 3; i++) {
        long long bytes = st[i] * 2;
        if (st[i] < 0 || bytes % 16 || bytes >= TMAP_STRIDE_MAX) {
            return core_err_set(e, KF_ERR_UNSUPPORTED,
                                "impl wgmma_tma: tensor %s's %s stride %lld elements (%lld bytes) is not a multiple of "
                                "16 bytes below 2^40: a tensor map cannot describe it", name, sname[i], st[i], bytes);
        }
        strides[i] = (unsigned long long)bytes;
    }
    unsigned long long dims[4];
    for (int i = 0; i < 4; i++) {
        if (dm[i] < 1 || dm[i] > (1ll << 32)) {
            return core_err_set(e, KF_ERR_UNSUPPORTED,
                                "impl wgmma_tma: tensor %s's dimension %d is %lld, outside 1..2^32", name, i, dm[i]);
        }
        dims[i] = (unsigned long long)dm[i];
    }
    if (!cu)
        return 0;
    const unsigned box[4] = {64, (unsigned)box_rows, 1, 1}, es[4] = {1, 1, 1, 1};
    CUresult r = cu->TensorMapEncodeTiled(m, RT_CU_TMAP_UINT16, 4, (void *)base, dims, strides, box, es,
                                          RT_CU_TMAP_INTERLEAVE_NONE, RT_CU_TMAP_SWIZZLE_128B, RT_CU_TMAP_L2_128B,
                                          RT_CU_TMAP_OOB_ZERO);
    if (r) {
        char es[128];
        rt_cuda_errstr(r, es, sizeof es);
        return core_err_set(e, KF_ERR_CUDA,
                            "impl wgmma_tma: cuTensorMapEncodeTiled for tensor %s (dims %llu x %llu x %llu x %llu, "
                            "strides %llu %llu %llu bytes) failed: %s", name, dims[0], dims[1], dims[2], dims[3], strides[0],
                            strides[1], strides[2], es);
    }
    return 0;
}

int rt_attn_tma_pages_ok(int page_size, int bn)
{
    const int pb = page_size < bn ? page_size : bn;
    return page_size > 0 && bn > 0 && pb % 8 == 0 && (bn % page_size == 0 || page_size % bn == 0);
}

int rt_attn_tmaps(const rt_attn_geom *geo, const kf_attn_params *p, long long kv_rows, kf_attn_tmaps *tm, core_err *e)
{
    memset(tm, 0, sizeof *tm);
    if (!geo->tma || (geo->d != 64 && geo->d != 128 && geo->d != 256) || geo->bn < 1 || geo->bn > 256) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "impl wgmma_tma: no tensor-map geometry (head dim %d, bn %d)", geo->d, geo->bn);
    }
    /* paged: a map over each pool, (head dim, row in page, head, page), boxes of pb = min(bn, page size) rows that
     * never cross a page and land on whole 8-row swizzle atoms (attn/fwd_sm90.cuh, kf_sm90_tma_kv_paged) */
    const int paged = p->block_table != NULL, ps = p->page_size;
    if (paged && !rt_attn_tma_pages_ok(ps, geo->bn)) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "impl wgmma_tma: page_size %d: a page map needs page_size and the key block (%d) to be "
                            "multiples of one another, with a multiple of 8 rows per box: use impl wgmma_pp", ps, geo->bn);
    }
    if (p->cu_seqlens_k && kv_rows < 0) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "impl wgmma_tma: packed K/V (cu_seqlens_k) needs the total key rows for tensors k and v");
    }
    /* packed: one "batch" of every row */
    const int pq = p->cu_seqlens_q != NULL, pk = p->cu_seqlens_k != NULL;
    const long long qrows = pq ? p->ws_rows : p->sq, krows = pk ? kv_rows : p->skv;
    const rt_cu *cu = NULL;
    int st = 0;
    for (int pass = 0; pass < 2 && !st; pass++) {   /* the layout checks first: they need no driver */
        if (pass == 1) {
            if (!(cu = rt_cuda(e)))
                return KF_ERR_CUDA;
            if (!cu->TensorMapEncodeTiled) {
                return core_err_set(e, KF_ERR_UNSUPPORTED,
                                    "impl wgmma_tma: the CUDA driver lacks cuTensorMapEncodeTiled (driver 12.0 or "
                                    "later): use impl wgmma_pp");
            }
        }
        st = encode(cu, &tm->q, "q", p->q, geo->d, qrows, p->hq, pq ? 1 : p->b, p->q_ss, p->q_sh, pq ? 0 : p->q_sb,
                    128, e);
        if (!st && paged) {   /* the pool's page count is not known here: any int32 page index is in the map */
            const int pb = ps < geo->bn ? ps : geo->bn;
            st = encode(cu, &tm->k, "k", p->k, geo->d, ps, p->hkv, TMAP_PAGES, p->k_ss, p->k_sh, p->k_sb, pb, e);
            if (!st)
                st = encode(cu, &tm->v, "v", p->v, geo->d, ps, p->hkv, TMAP_PAGES, p->v_ss, p->v_sh, p->v_sb, pb, e);
            continue;
        }
        if (!st)
            st = encode(cu, &tm->k, "k", p->k, geo->d, krows, p->hkv, pk ? 1 : p->b, p->k_ss, p->k_sh,
                        pk ? 0 : p->k_sb, geo->bn, e);
        if (!st)
            st = encode(cu, &tm->v, "v", p->v, geo->d, krows, p->hkv, pk ? 1 : p->b, p->v_ss, p->v_sh,
                        pk ? 0 : p->v_sb, geo->bn, e);
    }
    return st;
}
