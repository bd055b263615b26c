/* runtime/parts_launch.c: grids, workspace and the combine hand-off of the split-score decode family (see parts_launch.h) */
#include "parts_launch.h"
#include "family.h"
#include "grid.h"
#include "shape.h"

#include <stdint.h>

#include <string.h>

static int is_parts(const gen_kvset *vp)
{
    return rt_family_is(vp, RT_FAM_PARTS_DECODE);
}

int rt_parts_launch_count(const gen_kvset *vp)
{
    if (!is_parts(vp))
        return -1;
    long long layers = gen_kv_int(vp, "layers", 0), sp = gen_kv_int(vp, "sp", 1);
    if (layers < 1 || layers > KF_PARTS_MAXL)
        return -1;
    return 1 + (sp > 1 ? (int)layers : 0);
}

int rt_parts_grid(const gen_kvset *vp, const kf_parts_params *p, int kernel_index, unsigned grid[3])
{
    if (!is_parts(vp) || !p || !grid || p->b < 1 || p->sq < 1 || p->hkv < 1 || p->splits < 1)
        return -1;
    long long tm = gen_kv_int(vp, "tm", 0), g = gen_kv_int(vp, "g", 0), dv = gen_kv_int(vp, "dv", 0);
    if (tm < 1 || g < 1 || (long long)p->hkv * g != p->hq)
        return -1;
    if (kernel_index == 0)
        return rt_set_grid(grid, p->splits, (long long)p->hkv * rt_cdiv(g * p->sq, tm), p->b);
    if (kernel_index == 1 && p->splits > 1) {
        long long rows = rt_combine_rows(dv);
        if (rows < 1 || p->ws_rows < 1)
            return -1;
        return rt_set_grid(grid, rt_cdiv((long long)p->ws_rows * p->hq, rows), 1, 1);
    }
    return -1;
}

size_t rt_parts_workspace_bytes(const gen_kvset *vp, const kf_parts_params *p)
{
    if (!is_parts(vp) || !p || p->splits <= 1)
        return 0;
    long long dv = gen_kv_int(vp, "dv", 0), layers = gen_kv_int(vp, "layers", 0);
    if (dv < 1 || layers < 1 || p->ws_rows < 1 || p->hq < 1)
        return 0;
    long long rows, bytes;
    if (rt_mul_ll(p->splits, p->ws_rows, &rows) || rt_mul_ll(rows, p->hq, &rows) || rt_mul_ll(rows, dv + 1, &bytes) ||
        rt_mul_ll(bytes, 4 * layers, &bytes) || (unsigned long long)bytes > SIZE_MAX / 2)
        return SIZE_MAX;
    return (size_t)bytes;
}

int rt_parts_launch(const gen_kvset *vp, const kf_parts_params *p, rt_launch *out)
{
    out->n = rt_parts_launch_count(vp);
    out->kernels = out->n < 1 ? 0 : p->splits > 1 ? 2 : 1;   /* the combine kernel only for split calls */
    out->ws_bytes = out->n < 1 ? 0 : rt_parts_workspace_bytes(vp, p);
    return out->n < 1 ? -1 : 0;
}

void rt_parts_set_workspace(const gen_kvset *vp, kf_parts_params *p, void *ws)
{
    long long dv = gen_kv_int(vp, "dv", 0), layers = gen_kv_int(vp, "layers", 0);
    long long rows = (long long)p->splits * p->ws_rows * p->hq;
    for (int l = 0; l < KF_PARTS_MAXL; l++) {
        int on = ws && p->splits > 1 && l < layers;
        /* layer l: its partials, then its lse values; every block a multiple of 16 bytes when rows is */
        p->ws_o[l] = on ? (float *)((char *)ws + (size_t)l * (size_t)(rows * dv * 4 + rows * 4)) : NULL;
        p->ws_lse[l] = on ? p->ws_o[l] + rows * dv : NULL;
    }
}

void rt_parts_combine_params(const kf_parts_params *p, int layer, kf_attn_params *out)
{
    memset(out, 0, sizeof *out);
    out->o = (void *)p->o[layer].p;
    out->o_sb = p->o[layer].sb, out->o_ss = p->o[layer].ss, out->o_sh = p->o[layer].sh;
    out->lse = p->lse[layer];
    out->lse_sb = p->lse_sb, out->lse_sh = p->lse_sh;
    out->ws_o = p->ws_o[layer];
    out->ws_lse = p->ws_lse[layer];
    out->b = p->b, out->sq = p->sq, out->skv = p->skv, out->hq = p->hq, out->hkv = p->hkv;
    out->splits = p->splits;
    out->ws_rows = p->ws_rows;
    out->scale = p->scale, out->scale_log2 = p->scale_log2;
}
