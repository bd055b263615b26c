/* runtime/attn_launch.h: grid sizes and split-KV workspace of the attention families, from kf_attn_params alone (no Lua) */
#ifndef KF_RUNTIME_ATTN_LAUNCH_H
#define KF_RUNTIME_ATTN_LAUNCH_H

#include <stddef.h>
#include "../gen/kv.h"
#include "../templates/common/attn_params.h"

/*
 * vp: the variant's fixed values and params (attn_decode: dtype d g causal tm w bn stages sp;
 * attn_prefill: dtype d g causal bm w bn stages; attn_naive), with the family
 * name under "family". Block sizes and dynamic shared memory come from the template's kernels().
 *
 * Grid convention (x, y, z), kernels in launch order:
 *   attn_prefill  k0 kf_attn_prefill  (cdiv(sq, bm), hq, b)               sq = max rows per sequence when packed
 *                                     sched=persist: (min(cdiv(cdiv(sq, bm), 2) hq b, geo.ctas), 1, 1),
 *                                     refused past 2^30 units (the kernel's int tile index)
 *   attn_decode   k0 kf_attn_decode   (splits, hkv * cdiv(g * sq, tm), b) y = kv_head * tiles + tile
 *                 k1 kf_attn_combine  (cdiv(ws_rows * hq, crows), 1, 1)   only when splits > 1;
 *                                     crows = clamp(128 / (d / 4), 1, 8) (4 columns per thread)
 *   attn_combine  see runtime/combine_launch.h
 *   attn_naive    k0 kf_attn_naive    (sq, hq, b)
 * p->splits must equal the variant's sp for attn_decode (the kernel reads p->splits; one binary
 * serves every sp). Prefill ignores p->splits and writes o/lse directly.
 */

/* What the grids depend on, read from vp once (at plan time), so that a run does arithmetic only. */
typedef enum { RT_GEOM_NONE = 0, RT_GEOM_PREFILL, RT_GEOM_DECODE, RT_GEOM_NAIVE } rt_attn_geom_kind;
typedef struct rt_attn_geom {
    rt_attn_geom_kind kind;
    long long bm, tm, g, rows; /* prefill bm, g; decode tm, g, its combine kernel's rows per block */
    int tma, d, bn;            /* prefill impl=wgmma_tma: its launch also passes tensor maps (runtime/attn_tmap.h),
                                * encoded per call for head dim d and bn-key boxes; 0 elsewhere */
    int persist, ctas;         /* prefill sched=persist: a 1-D grid of min(tiles, ctas) CTAs looping over the tiles
                                * (ctas: the device's SMs, set by the plan or the tuner; 0: one CTA a tile) */
} rt_attn_geom;

/* Reads the variant's geometry; kind RT_GEOM_NONE when the family is unknown or a value is missing. */
rt_attn_geom rt_attn_geom_of(const gen_kvset *vp);

/* rt_attn_grid on a geometry read before: same results, no string lookups. */
int rt_attn_grid_geom(const rt_attn_geom *geo, const kf_attn_params *p, int kernel_index, unsigned grid[3]);

/* Fills grid[3] for kernel kernel_index of the variant. Returns 0, or -1 when the family is unknown,
 * the index has no kernel, a value needed is missing, or p is inconsistent (hq != g * hkv, splits < 1,
 * a grid dimension out of range). */
int rt_attn_grid(const gen_kvset *vp, const kf_attn_params *p, int kernel_index, unsigned grid[3]);

struct rt_launch;
/* The attention families' entry of the family table's launch function (runtime/family.h): kernels a
 * call of p launches (attn_decode: its combine kernel only when p->splits > 1; one kernel otherwise)
 * and the split-KV workspace: ws_o (splits * ws_rows * hq * d fp32) followed by ws_lse (splits *
 * ws_rows * hq fp32), 0 when none is needed (splits == 1, prefill, naive); SIZE_MAX when the
 * size does not fit (the caller refuses the shape). 0, or -1 when vp is not of an attention family. */
int rt_attn_launch(const gen_kvset *vp, const kf_attn_params *p, struct rt_launch *out);

/* Points p->ws_o and p->ws_lse into ws by the layout above (ws_lse at splits * ws_rows * hq * d * 4
 * bytes, a multiple of 16), d the variant's "d" (attn_combine: "dv"): the layout of attn_decode's
 * workspace and of attn_combine's partials. ws NULL: both NULL. */
void rt_attn_set_workspace(const gen_kvset *vp, kf_attn_params *p, void *ws);

#endif
