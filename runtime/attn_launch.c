/* runtime/attn_launch.c: grid sizes and split-KV workspace of the attention families (see attn_launch.h) */
#include "attn_launch.h"
#include "grid.h"
#include "shape.h"

#include <stdint.h>

#include <string.h>

rt_attn_geom rt_attn_geom_of(const gen_kvset *vp)
{
    rt_attn_geom geo = {RT_GEOM_NONE, 0, 0, 0, 0};
    const char *fam = vp ? gen_kv_str(vp, "family") : NULL;
    if (!fam)
        return geo;
    if (strcmp(fam, "attn_prefill") == 0) {
        geo.bm = gen_kv_int(vp, "bm", 0), geo.g = gen_kv_int(vp, "g", 0);
        if (geo.bm >= 1 && geo.g >= 1)
            geo.kind = RT_GEOM_PREFILL;
    } else if (strcmp(fam, "attn_decode") == 0) {
        geo.tm = gen_kv_int(vp, "tm", 0), geo.g = gen_kv_int(vp, "g", 0);
        geo.rows = rt_combine_rows(gen_kv_int(vp, "d", 0));
        if (geo.tm >= 1 && geo.g >= 1)
            geo.kind = RT_GEOM_DECODE;
    } else if (strcmp(fam, "attn_combine") == 0) {
        geo.rows = gen_kv_int(vp, "rows", 0);
        if (geo.rows >= 1)
            geo.kind = RT_GEOM_COMBINE;
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
        return rt_set_grid(grid, rt_cdiv(p->sq, geo->bm), p->hq, p->b);
    case RT_GEOM_DECODE:
        if ((long long)p->hkv * geo->g != p->hq || p->splits < 1)
            return -1;
        if (kernel_index == 0)
            return rt_set_grid(grid, p->splits, (long long)p->hkv * rt_cdiv(geo->g * p->sq, geo->tm), p->b);
        if (kernel_index == 1 && p->splits > 1 && geo->rows >= 1 && p->ws_rows >= 1)
            return rt_set_grid(grid, rt_cdiv((long long)p->ws_rows * p->hq, geo->rows), 1, 1);
        return -1;
    case RT_GEOM_COMBINE:
        if (kernel_index != 0 || p->ws_rows < 1 || p->splits < 1)
            return -1;
        return rt_set_grid(grid, rt_cdiv((long long)p->ws_rows * p->hq, geo->rows), 1, 1);
    default:
        return -1;
    }
}

int rt_attn_grid(const gen_kvset *vp, const kf_attn_params *p, int kernel_index, unsigned grid[3])
{
    rt_attn_geom geo = rt_attn_geom_of(vp);
    return rt_attn_grid_geom(&geo, p, kernel_index, grid);
}

size_t rt_attn_workspace_bytes(const gen_kvset *vp, const kf_attn_params *p)
{
    const char *fam;
    long long d, rows;
    if (!vp || !p)
        return 0;
    fam = gen_kv_str(vp, "family");
    if (!fam || strcmp(fam, "attn_decode") != 0 || p->splits <= 1)
        return 0;
    d = gen_kv_int(vp, "d", 0);
    if (d < 1 || p->ws_rows < 1 || p->hq < 1)
        return 0;
    long long bytes;
    if (rt_mul_ll(p->splits, p->ws_rows, &rows) || rt_mul_ll(rows, p->hq, &rows) || rt_mul_ll(rows, d + 1, &bytes) ||
        rt_mul_ll(bytes, 4, &bytes) || (unsigned long long)bytes > SIZE_MAX / 2)
        return SIZE_MAX;
    return (size_t)bytes;
}
