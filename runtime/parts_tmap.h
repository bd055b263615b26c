/* runtime/parts_tmap.h: the tensor maps of attn_parts_decode impl=wgmma_tma and wg8 and its kernel's arguments, on the host for each call */
#ifndef KF_RT_PARTS_TMAP_H
#define KF_RT_PARTS_TMAP_H

#include "core/err.h"
#include "gen/kv.h"
#include "templates/common/attn_params.h"   /* before parts_params.h: kf_tmap */
#include "templates/common/parts_params.h"

/* 1 when the variant's split-score kernel takes tensor maps as its second argument (impl wgmma_tma, wg8), else 0. */
int rt_parts_tma(const gen_kvset *vp);

/*
 * Encodes tm for the call p of such a variant: one map a key cache c[i] (i below the key parts of vp's "parts"; one
 * layer, value aliased), 16-bit elements (part dim, rows, kv heads, batch) over its pointer and strides, box 64 x 64
 * x 1 x 1, 128-byte swizzle (templates/common/parts_params.h). Paged (vp's page_size > 0): rows are a page's and the
 * batch is any int32 page index, with the page stride. The kernel loads by map only whole 64-key blocks below a
 * sequence's length (parts/decode_sm90_ks.cuh), so the maps' bounds need only be the tensors' true ends.
 * impl wg8 (the FP8 latent cache): one map of bytes over c[0] covering the whole e4m3 row and tm->kv8 = 1 when the
 * key parts are one tensor (each part's columns right after the last's, the same strides) that a map describes and
 * the driver has maps; otherwise tm->kv8 = 0 and no map (the kernel's cp.async path; not an error).
 * Returns 0; KF_ERR_UNSUPPORTED with *e naming the tensor (k[0][part]) when a map cannot describe it, or when the
 * driver lacks cuTensorMapEncodeTiled (impl wgmma_tma); KF_ERR_CUDA when the driver refuses a map. Thread-safe, no GPU work: legal
 * inside stream capture (the maps travel by value in the kernel node).
 */
int rt_parts_tmaps(const gen_kvset *vp, const kf_parts_params *p, kf_parts_tmaps *tm, core_err *e);

/* The arguments of the variant's decode kernel (kernel 0) for p: args {p}, or {p, tm} with tm encoded
 * (rt_parts_tmaps) when rt_parts_tma. 0, or rt_parts_tmaps's status with *e set. */
int rt_parts_args(const gen_kvset *vp, const kf_parts_params *p, kf_parts_tmaps *tm, void *args[2], core_err *e);

#endif
