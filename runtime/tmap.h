/* runtime/tmap.h: one tiled tensor map of 16-bit or 8-bit elements (head dim, rows, heads, batch), checked and encoded on the host */
#ifndef KF_RT_TMAP_H
#define KF_RT_TMAP_H

#include "core/err.h"
#include "runtime/cuda.h"
#include "templates/common/attn_params.h"

/*
 * Encodes *m over base: a 4D map of `d` 16-bit columns x rows x heads x batch, strides ss, sh, sb in elements,
 * box 64 columns x box_rows x 1 x 1, 128-byte swizzle, out-of-bounds boxes zero-filled (one box is one 64-column
 * panel of the layout the Hopper kernels read). A dimension of size 1 takes the dense stride (it is never
 * stepped). name: the tensor as the caller's API names it, for messages. cu NULL: the checks only, no driver call.
 * Returns 0; KF_ERR_UNSUPPORTED with *e naming the tensor when a map cannot describe it (a base not 16-byte aligned,
 * a stride negative, not a multiple of 16 bytes or past 2^40, a dimension outside 1..2^32); KF_ERR_CUDA when the
 * driver refuses the map. Thread-safe, no GPU work.
 */
int rt_tmap_encode(const rt_cu *cu, kf_tmap *m, const char *name, const void *base, int d, long long rows, long long heads,
                   long long batch, long long ss, long long sh, long long sb, int box_rows, core_err *e);

/* The same for elements of esize bytes (1: UINT8, e4m3 caches; 2: as rt_tmap_encode), strides in elements, box
 * 128 / esize columns (128 bytes) x box_rows x 1 x 1; messages start with impl (e.g. "impl wg8"). */
int rt_tmap_encode_es(const rt_cu *cu, kf_tmap *m, const char *impl, const char *name, const void *base, int esize, int d,
                      long long rows, long long heads, long long batch, long long ss, long long sh, long long sb,
                      int box_rows, core_err *e);

/* The driver for rt_tmap_encode: NULL with *st and *e set when there is none (KF_ERR_CUDA) or it lacks
 * cuTensorMapEncodeTiled (KF_ERR_UNSUPPORTED, the message naming the impl `fallback` to use instead). */
const rt_cu *rt_tmap_driver(const char *fallback, int *st, core_err *e);

#endif
