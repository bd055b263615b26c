/* runtime/attn_tmap.h: the tensor maps of attn_prefill impl=wgmma_tma, encoded on the host for each call */
#ifndef KF_RT_ATTN_TMAP_H
#define KF_RT_ATTN_TMAP_H

#include <stddef.h>

#include "core/err.h"
#include "runtime/attn_launch.h"
#include "templates/common/attn_params.h"

/*
 * Encodes tm (q, k, v) for the call p of a variant with geometry geo (geo->tma set): 4D maps (head dim, rows,
 * heads, batch) of 16-bit elements over p's pointers and strides, box 64 x geo->bm (q) or 64 x geo->bn (k, v) x 1 x 1,
 * 128-byte swizzle (templates/common/attn_params.h). Packed q (cu_seqlens_q) is one batch of p->ws_rows rows;
 * packed k/v (cu_seqlens_k) one of kv_rows rows (the caller knows the total, the params do not carry it; -1:
 * unknown, refused when packed).
 * The kernel loads by map only whole key blocks inside a sequence's keys (a block past its key length goes
 * through cp.async with zero fill), so the maps' row bounds need only be the tensors' true ends.
 * Paged K/V (p->block_table set): k and v are page pools, each map (head dim, row in page, head, page) with the
 * page stride k_sb as its batch stride and 2^31 pages (the pool's size is not in the params; the block table
 * holds the indices), boxes of min(bn, page_size) rows (rt_attn_tma_pages_ok).
 * Returns 0; KF_ERR_UNSUPPORTED with *e naming the tensor when a map cannot describe it (a page size that
 * rt_attn_tma_pages_ok refuses, a base not 16-byte aligned, a stride not a multiple of 16 bytes or past 2^40, packed K/V with kv_rows -1, no
 * cuTensorMapEncodeTiled in the driver); KF_ERR_CUDA when the driver refuses the map. Thread-safe, no GPU work:
 * legal inside stream capture (the maps travel by value in the kernel node).
 */
/* 1 when a page map serves pages of page_size keys under key blocks of bn: boxes of min(bn, page_size) rows
 * must be a multiple of 8 (one swizzle atom) and bn and page_size multiples of one another (a box never crosses
 * a page). Powers of two from 8 on all pass. */
int rt_attn_tma_pages_ok(int page_size, int bn);
int rt_attn_tmaps(const rt_attn_geom *geo, const kf_attn_params *p, long long kv_rows, kf_attn_tmaps *tm, core_err *e);

#endif
