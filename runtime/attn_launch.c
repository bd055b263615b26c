/* runtime/attn_launch.c: grid sizes and split-KV workspace of the attention families (see attn_launch.h) */
#include "attn_launch.h"

#include <string.h>

static long long cdiv_ll(long long a, long long b) { return (a + b - 1) / b; }

/* Rows per block of the combine kernel a decode variant launches; mirrors combine_rows() in attn_decode.lua. */
static long long decode_combine_rows(long long d)
{
    long long tpr = d / 4, r;
    if (tpr < 1)
        return -1;
    r = 128 / tpr;
    if (r < 1)
        r = 1;
    if (r > 8)
        r = 8;
    return r;
}

static int set_grid(unsigned grid[3], long long x, long long y, long long z)
{
    if (x < 1 || y < 1 || z < 1 || x > 2147483647LL || y > 65535 || z > 65535)
        return -1;
    grid[0] = (unsigned)x;
    grid[1] = (unsigned)y;
    grid[2] = (unsigned)z;
    return 0;
}

int rt_attn_grid(const gen_kvset *vp, const kf_attn_params *p, int kernel_index, unsigned grid[3])
{
    const char *fam;
    if (!vp || !p || !grid)
        return -1;
    fam = gen_kv_str(vp, "family");
    if (!fam || p->b < 1 || p->sq < 1 || p->hq < 1 || p->hkv < 1)
        return -1;

    if (strcmp(fam, "attn_prefill") == 0) {
        long long bm = gen_kv_int(vp, "bm", 0), g = gen_kv_int(vp, "g", 0);
        if (kernel_index != 0 || bm < 1 || g < 1 || (long long)p->hkv * g != p->hq)
            return -1;
        return set_grid(grid, cdiv_ll(p->sq, bm), p->hq, p->b);
    }
    if (strcmp(fam, "attn_decode") == 0) {
        long long tm = gen_kv_int(vp, "tm", 0), g = gen_kv_int(vp, "g", 0), d = gen_kv_int(vp, "d", 0);
        if (tm < 1 || g < 1 || (long long)p->hkv * g != p->hq || p->splits < 1)
            return -1;
        if (kernel_index == 0)
            return set_grid(grid, p->splits, (long long)p->hkv * cdiv_ll(g * p->sq, tm), p->b);
        if (kernel_index == 1 && p->splits > 1) {
            long long rows = decode_combine_rows(d);
            if (rows < 1 || p->ws_rows < 1)
                return -1;
            return set_grid(grid, cdiv_ll((long long)p->ws_rows * p->hq, rows), 1, 1);
        }
        return -1;
    }
    if (strcmp(fam, "attn_combine") == 0) {
        long long rows = gen_kv_int(vp, "rows", 0);
        if (kernel_index != 0 || rows < 1 || p->ws_rows < 1 || p->splits < 1)
            return -1;
        return set_grid(grid, cdiv_ll((long long)p->ws_rows * p->hq, rows), 1, 1);
    }
    return -1;
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
    rows = (long long)p->splits * p->ws_rows * p->hq;
    return (size_t)(rows * d * 4 + rows * 4);
}
