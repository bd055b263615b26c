/* runtime/combine_launch.h: grid and launch of the split-KV combine family (attn_combine), from kf_attn_params alone */
#ifndef KF_RUNTIME_COMBINE_LAUNCH_H
#define KF_RUNTIME_COMBINE_LAUNCH_H

#include "../gen/kv.h"
#include "../templates/common/attn_params.h"

/*
 * vp: attn_combine's fixed values and params (dtype dv rows vec) with "family". One kernel,
 * kf_attn_combine, grid (cdiv(ws_rows * hq, rows), 1, 1); it reads p->splits partials of ws_rows * hq
 * rows of dv floats at p->ws_o and their lse at p->ws_lse (the layout of rt_attn_set_workspace), and
 * writes o and lse. attn_decode's own combine (its kernel 1) is the same kernel.
 */

struct rt_launch;
/* The family table's launch function: one kernel, no workspace (the partials are inputs). */
int rt_combine_launch(const gen_kvset *vp, const kf_attn_params *p, struct rt_launch *out);
/* The grid of kernel k (0 only): 0, or -1 when rows is missing or p has no rows or splits. */
int rt_combine_grid(const gen_kvset *vp, const kf_attn_params *p, int k, unsigned grid[3]);

#endif
