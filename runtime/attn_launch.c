/* runtime/attn_launch.c: grid sizes and split-KV workspace of the attention families (see attn_launch.h) */
#include "attn_launch.h"
#include "family.h"
#include "grid.h"
#include "shape.h"

#include <stdint.h>

#include <string.h>

rt_attn_geom rt_attn_geom_of(const gen_kvset *vp)
{
    rt_attn_geom geo = {RT_GEOM_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const rt_family *fam = rt_family_of(vp);
    if (!fam)
        return geo;
    switch (fam->id) {
    case RT_FAM_ATTN_PREFILL:
        geo.bm = gen_kv_int(vp, "bm", 0), geo.g = gen_kv_int(vp, "g", 0);
        if (geo.bm >= 1 && geo.g >= 1)
            geo.kind = RT_GEOM_PREFILL;
        {   /* the one impl whose launch takes a second argument (its tensor maps) */
            const char *impl = gen_kv_str(vp, "impl");
            geo.tma = impl && strcmp(impl, "wgmma_tma") == 0;
            geo.d = (int)gen_kv_int(vp, "d", 0), geo.bn = (int)gen_kv_int(vp, "bn", 0);
            const char *sched = gen_kv_str(vp, "sched");
            geo.persist = sched && strcmp(sched, "persist") == 0;
        }
        break;
    case RT_FAM_ATTN_DECODE:
        geo.tm = gen_kv_int(vp, "tm", 0), geo.g = gen_kv_int(vp, "g", 0);
        geo.rows = rt_combine_rows(gen_kv_int(vp, "d", 0));
        if (geo.tm >= 1 && geo.g >= 1)
            geo.kind = RT_GEOM_DECODE;
        break;
    case RT_FAM_ATTN_NAIVE:
        geo.kind = RT_GEOM_NAIVE;
        break;
    default:
        break;
    }
    return geo;
}

int rt_attn_grid_geom(const rt_attn_geom *geo, const kf_attn_params *p, int kernel_index, unsigned grid[3])
{
    if (!geo || !p || !grid || p->b < 1 || p->sq < 1 || p->hq < 1 || p->hkv < 1)
        return -1;
    switch (geo->kind) {
    case RT_GEOM_PREFILL:
        if (kernel_index != 0 || (long long)p->hkv * geo->g != p->hq)
            return -1;
        if (geo->persist) {   /* units of two tiles (query blocks m and last - m of one head), one CTA an SM at most,
                               * each looping over its units (attn/fwd_sm90.cuh) */
            const long long units = rt_cdiv(rt_cdiv(p->sq, geo->bm), 2) * p->hq * p->b;
            if (2 * units > 2147483647LL)
                return -1;    /* the kernel's tile index is an int */
            return rt_set_grid(grid, geo->ctas > 0 && units > geo->ctas ? geo->ctas : units, 1, 1);
        }
        return rt_set_grid(grid, rt_cdiv(p->sq, geo->bm), p->hq, p->b);
    case RT_GEOM_DECODE:
        if ((long long)p->hkv * geo->g != p->hq || p->splits < 1)
            return -1;
        if (kernel_index == 0)
            return rt_set_grid(grid, p->splits, (long long)p->hkv * rt_cdiv(geo->g * p->sq, geo->tm), p->b);
        if (kernel_index == 1 && p->splits > 1 && geo->rows >= 1 && p->ws_rows >= 1)
            return rt_set_grid(grid, rt_cdiv((long long)p->ws_rows * p->hq, geo->rows), 1, 1);
        return -1;
    case RT_GEOM_NAIVE:
        return kernel_index == 0 ? rt_set_grid(grid, p->sq, p->hq, p->b) : -1;
    default:
        return -1;
    }
}

int rt_attn_grid(const gen_kvset *vp, const kf_attn_params *p, int kernel_index, unsigned grid[3])
{
    rt_attn_geom geo = rt_attn_geom_of(vp);
    return rt_attn_grid_geom(&geo, p, kernel_index, grid);
}

/* The value width of the workspace rows: "d" (attn_decode), "dv" (attn_combine's partials: see
 * runtime/combine_launch.h). */
static long long ws_width(const gen_kvset *vp) { return gen_kv_int(vp, "d", gen_kv_int(vp, "dv", 0)); }

int rt_attn_launch(const gen_kvset *vp, const kf_attn_params *p, rt_launch *out)
{
    out->n = out->kernels = 0, out->ws_bytes = 0;
    const rt_family *f = rt_family_of(vp);
    if (!p || !f)
        return -1;
    switch (f->id) {   /* the grids check the geometry */
    case RT_FAM_ATTN_PREFILL: case RT_FAM_ATTN_DECODE: case RT_FAM_ATTN_NAIVE:
        break;
    default:
        return -1;
    }
    int split = f->id == RT_FAM_ATTN_DECODE && p->splits > 1;
    out->n = out->kernels = split ? 2 : 1;   /* the combine kernel runs only for split calls */
    if (!split)
        return 0;
    long long d = ws_width(vp), rows, bytes;
    if (d < 1 || p->ws_rows < 1 || p->hq < 1)
        return 0;
    if (rt_mul_ll(p->splits, p->ws_rows, &rows) || rt_mul_ll(rows, p->hq, &rows) || rt_mul_ll(rows, d + 1, &bytes) ||
        rt_mul_ll(bytes, 4, &bytes) || (unsigned long long)bytes > SIZE_MAX / 2)
        out->ws_bytes = SIZE_MAX;
    else
        out->ws_bytes = (size_t)bytes;
    return 0;
}

void rt_attn_set_workspace(const gen_kvset *vp, kf_attn_params *p, void *ws)
{
    size_t ro = (size_t)p->splits * (size_t)p->ws_rows * (size_t)p->hq * (size_t)ws_width(vp) * sizeof(float);
    p->ws_o = ws ? (float *)ws : NULL;
    p->ws_lse = ws ? (float *)((char *)ws + ro) : NULL;
}
