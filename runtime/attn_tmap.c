/* runtime/attn_tmap.c: the tensor maps of attn_prefill impl=wgmma_tma, encoded on the host for each call */
#include "runtime/attn_tmap.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"
#include "runtime/tmap.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TMAP_PAGES (1ll << 31)   /* every int32 page index */

int rt_attn_tma_pages_ok(int page_size, int bn)
{
    const int pb = page_size < bn ? page_size : bn;
    return page_size > 0 && bn > 0 && pb % 8 == 0 && (bn % page_size == 0 || page_size % bn == 0);
}

int rt_attn_tmaps(const rt_attn_geom *geo, const kf_attn_params *p, long long kv_rows, kf_attn_tmaps *tm, core_err *e)
{
    memset(tm, 0, sizeof *tm);
    if (!geo->tma || (geo->d != 64 && geo->d != 128 && geo->d != 256) || geo->bn < 1 || geo->bn > 256 ||
        geo->bm < 1 || geo->bm > 256) {
        return core_err_set(e, KF_ERR_UNSUPPORTED, "impl wgmma_tma: no tensor-map geometry (head dim %d, bm %lld, bn %d)",
                            geo->d, geo->bm, geo->bn);
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
        if (pass == 1 && !(cu = rt_tmap_driver("wgmma_pp", &st, e)))
            return st;
        st = rt_tmap_encode(cu, &tm->q, "q", p->q, geo->d, qrows, p->hq, pq ? 1 : p->b, p->q_ss, p->q_sh, pq ? 0 : p->q_sb,
                    (int)geo->bm, e);
        if (!st && paged) {   /* the pool's page count is not known here: any int32 page index is in the map */
            const int pb = ps < geo->bn ? ps : geo->bn;
            st = rt_tmap_encode(cu, &tm->k, "k", p->k, geo->d, ps, p->hkv, TMAP_PAGES, p->k_ss, p->k_sh, p->k_sb, pb, e);
            if (!st)
                st = rt_tmap_encode(cu, &tm->v, "v", p->v, geo->d, ps, p->hkv, TMAP_PAGES, p->v_ss, p->v_sh, p->v_sb, pb, e);
            continue;
        }
        if (!st)
            st = rt_tmap_encode(cu, &tm->k, "k", p->k, geo->d, krows, p->hkv, pk ? 1 : p->b, p->k_ss, p->k_sh,
                        pk ? 0 : p->k_sb, geo->bn, e);
        if (!st)
            st = rt_tmap_encode(cu, &tm->v, "v", p->v, geo->d, krows, p->hkv, pk ? 1 : p->b, p->v_ss, p->v_sh,
                        pk ? 0 : p->v_sb, geo->bn, e);
    }
    return st;
}
