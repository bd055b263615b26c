/* runtime/kda_launch.h: grids, workspace and argument checks of the KDA families, from kf_kda_params alone (no Lua) */
#ifndef KF_RUNTIME_KDA_LAUNCH_H
#define KF_RUNTIME_KDA_LAUNCH_H

#include <stddef.h>
#include "../core/err.h"
#include "../gen/kv.h"
#include "../templates/common/kda_params.h"

/*
 * vp: the variant's fixed values and params with the family name under "family":
 *   kda_naive   dk dv threads
 *   kda_decode  dk dv vsplit w
 *   kda_prefill dk dv chunk vs w tr fused mma
 * Block sizes and dynamic shared memory come from the template's kernels().
 *
 * Grid convention (x, y, z), kernels in launch order:
 *   kda_naive    k0 kf_kda_naive  (hv_heads, nseq, 1)
 *   kda_decode   k0 kf_kda_decode (vsplit, hv_heads, nseq)
 *   kda_prefill  fused 0: k0 kf_kda_prep  (total / chunk + nseq, hv_heads, 1)   virtual chunks
 *                         k1 kf_kda_state (dv / vs, hv_heads, nseq)
 *                fused 1: k0 kf_kda_state (dv / vs, hv_heads, nseq)
 */

/* Kernels the variant launches for p (2 for the split prefill, else 1); -1 on a bad vp. */
int rt_kda_kernel_count(const gen_kvset *vp);

/* Fills grid[3] for kernel kernel_index. Returns 0, or -1 when the family is unknown, the index has
 * no kernel, a value needed is missing, or a grid dimension is out of range. */
int rt_kda_grid(const gen_kvset *vp, const kf_kda_params *p, int kernel_index, unsigned grid[3]);

/* Workspace bytes the variant touches for p: the split prefill's chunk slots,
 * (total / chunk + nseq) * hv_heads * (2 (3 chunk dk + chunk^2 + chunk dv) + 4 dk); 0 for the fused
 * prefill, decode and naive (and on bad input); SIZE_MAX when the size does not fit (the caller refuses the
 * shape). p->ws must point at this many bytes, 16-byte aligned. */
size_t rt_kda_workspace_bytes(const gen_kvset *vp, const kf_kda_params *p);

struct rt_launch;
/* The family table's launch function of the KDA families: rt_kda_kernel_count and
 * rt_kda_workspace_bytes of p. 0, or -1 on a bad vp. */
int rt_kda_launch(const gen_kvset *vp, const kf_kda_params *p, struct rt_launch *out);

/* Whether the variant computes p correctly: dims equal the variant's, heads (hv % h == 0), sequence
 * counts, gate form (lower_bound in [-5, 0)), pointers, and the alignment the kernels rely on (o rows
 * 4-byte aligned; decode state rows 16-byte aligned). Returns 0, or -1 with KF_ERR_ARG and a message
 * naming the argument and its value in *e ("o_st is 7: o rows must be 4-byte aligned (even strides)"). */
int rt_kda_check(const gen_kvset *vp, const kf_kda_params *p, core_err *e);

#endif
