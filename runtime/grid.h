/* runtime/grid.h: launch grid helpers shared by the families' launch code (attn, KDA, split-score) */
#ifndef KF_RUNTIME_GRID_H
#define KF_RUNTIME_GRID_H

/* ceil(a / b) for b > 0. */
static inline long long rt_cdiv(long long a, long long b) { return (a + b - 1) / b; }

/* grid = (x, y, z); -1 (grid untouched) when a dimension is < 1 or past the driver's limits
 * (x < 2^31, y and z <= 65535). */
static inline int rt_set_grid(unsigned grid[3], long long x, long long y, long long z)
{
    if (x < 1 || y < 1 || z < 1 || x > 2147483647LL || y > 65535 || z > 65535)
        return -1;
    grid[0] = (unsigned)x;
    grid[1] = (unsigned)y;
    grid[2] = (unsigned)z;
    return 0;
}

/* Rows per block of the combine kernel (kf_attn_combine) for value width dv: clamp(128 / (dv / 4), 1, 8),
 * -1 when dv < 4; mirrors combine_rows() in templates/lib/attn.lua. */
static inline long long rt_combine_rows(long long dv)
{
    long long tpr = dv / 4, r;
    if (tpr < 1)
        return -1;
    r = 128 / tpr;
    return r < 1 ? 1 : (r > 8 ? 8 : r);
}

#endif
