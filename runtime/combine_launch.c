/* runtime/combine_launch.c: grid and launch of the split-KV combine family (see combine_launch.h) */
#include "combine_launch.h"
#include "family.h"
#include "grid.h"

int rt_combine_launch(const gen_kvset *vp, const kf_attn_params *p, rt_launch *out)
{
    out->n = out->kernels = 0, out->ws_bytes = 0;
    if (!p || !rt_family_is(vp, RT_FAM_ATTN_COMBINE))
        return -1;
    out->n = out->kernels = 1;
    return 0;
}

int rt_combine_grid(const gen_kvset *vp, const kf_attn_params *p, int k, unsigned grid[3])
{
    long long rows = vp && rt_family_is(vp, RT_FAM_ATTN_COMBINE) ? gen_kv_int(vp, "rows", 0) : 0;
    if (k != 0 || !p || !grid || rows < 1 || p->ws_rows < 1 || p->splits < 1 || p->hq < 1)
        return -1;
    return rt_set_grid(grid, rt_cdiv((long long)p->ws_rows * p->hq, rows), 1, 1);
}
