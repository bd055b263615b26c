/* runtime/parts_launch.h: grids, workspace and the combine hand-off of the split-score decode family (attn_parts_decode), from its params alone */
#ifndef KF_RUNTIME_PARTS_LAUNCH_H
#define KF_RUNTIME_PARTS_LAUNCH_H

#include <stddef.h>
#include "../gen/kv.h"
#include "../templates/common/attn_params.h"
#include "../templates/common/parts_params.h"

/*
 * vp: the variant's fixed values and params with "family" = "attn_parts_decode":
 *   dtype g parts value dv layers ps causal tm wn bn stages sp.
 * Kernels in module order: k0 kf_parts_decode, grid (splits, hkv * cdiv(g * sq, tm), b);
 * k1 kf_attn_combine (split variants only), launched once per layer with the kf_attn_params
 * rt_parts_combine_params gives, grid (cdiv(ws_rows * hq, rows), 1, 1).
 */

/* Launches of a run: 1 + (sp > 1 ? layers : 0); -1 on a bad vp. */
int rt_parts_launch_count(const gen_kvset *vp);
/* Grid of kernel 0 (decode) or 1 (combine). 0, or -1 when a value is missing or out of range. */
int rt_parts_grid(const gen_kvset *vp, const kf_parts_params *p, int kernel_index, unsigned grid[3]);
/* Workspace bytes of a split variant for p: layers * splits * ws_rows * hq * (dv + 1) * 4; 0 when sp == 1;
 * SIZE_MAX when the size does not fit (the caller refuses the shape). */
size_t rt_parts_workspace_bytes(const gen_kvset *vp, const kf_parts_params *p);
struct rt_launch;
/* The family table's launch function of attn_parts_decode: rt_parts_launch_count and
 * rt_parts_workspace_bytes of p. 0, or -1 on a bad vp. */
int rt_parts_launch(const gen_kvset *vp, const kf_parts_params *p, struct rt_launch *out);
/* Points p->ws_o[l], p->ws_lse[l] into ws (rt_parts_workspace_bytes of it; NULL when none). */
void rt_parts_set_workspace(const gen_kvset *vp, kf_parts_params *p, void *ws);
/* The combine kernel's params for layer l of p: o, lse and the split partials of that layer. */
void rt_parts_combine_params(const kf_parts_params *p, int layer, kf_attn_params *out);

#endif
