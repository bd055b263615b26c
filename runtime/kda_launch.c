/* runtime/kda_launch.c: grids, workspace and argument checks of the KDA families (see kda_launch.h) */
#include "kda_launch.h"
#include "family.h"
#include "grid.h"
#include "shape.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

static int family_is(const gen_kvset *vp, rt_family_id id) { return rt_family_is(vp, id); }

int rt_kda_kernel_count(const gen_kvset *vp)
{
    if (!vp)
        return -1;
    if (family_is(vp, RT_FAM_KDA_NAIVE) || family_is(vp, RT_FAM_KDA_DECODE))
        return 1;
    if (family_is(vp, RT_FAM_KDA_PREFILL))
        return gen_kv_int(vp, "fused", 0) ? 1 : gen_kv_int(vp, "seg", 1) > 1 ? 4 : 2;
    return -1;
}

int rt_kda_grid(const gen_kvset *vp, const kf_kda_params *p, int kernel_index, unsigned grid[3])
{
    if (!vp || !p || !grid || p->nseq < 1 || p->hv_heads < 1)
        return -1;
    if (family_is(vp, RT_FAM_KDA_NAIVE))
        return kernel_index == 0 ? rt_set_grid(grid, p->hv_heads, p->nseq, 1) : -1;
    if (family_is(vp, RT_FAM_KDA_DECODE)) {
        long long vsplit = gen_kv_int(vp, "vsplit", 0), ipc = gen_kv_int(vp, "ipc", 1);
        if (kernel_index != 0 || vsplit < 1 || ipc < 1)
            return -1;
        if (ipc == 1)
            return rt_set_grid(grid, vsplit, p->hv_heads, p->nseq);
        long long items = vsplit * p->hv_heads * p->nseq;   /* a strided loop over the items */
        return rt_set_grid(grid, rt_cdiv(items, ipc), 1, 1);
    }
    if (family_is(vp, RT_FAM_KDA_PREFILL)) {
        long long c = gen_kv_int(vp, "chunk", 0), vs = gen_kv_int(vp, "vs", 0), dv = gen_kv_int(vp, "dv", 0);
        long long fused = gen_kv_int(vp, "fused", -1), seg = gen_kv_int(vp, "seg", 1), dk = gen_kv_int(vp, "dk", 0);
        if (c < 1 || vs < 1 || dv < vs || dv % vs || fused < 0 || seg < 1 || p->total < 0)
            return -1;
        if (!fused && kernel_index == 0)
            return rt_set_grid(grid, (long long)p->total / c + p->nseq, p->hv_heads, 1);
        if (!fused && seg > 1) {     /* segments: operators, their composition, the segments' passes */
            if (dk < vs || dk % vs)
                return -1;
            if (kernel_index == 1)
                return rt_set_grid(grid, dv / vs + dk / vs, p->hv_heads, (long long)p->nseq * seg);
            if (kernel_index == 2)
                return rt_set_grid(grid, dv / vs, p->hv_heads, p->nseq);
            if (kernel_index == 3)
                return rt_set_grid(grid, dv / vs, p->hv_heads, (long long)p->nseq * seg);
            return -1;
        }
        if (kernel_index == (fused ? 0 : 1))
            return rt_set_grid(grid, dv / vs, p->hv_heads, p->nseq);
        return -1;
    }
    return -1;
}

size_t rt_kda_workspace_bytes(const gen_kvset *vp, const kf_kda_params *p)
{
    if (!vp || !p || !family_is(vp, RT_FAM_KDA_PREFILL) || gen_kv_int(vp, "fused", 1) != 0)
        return 0;
    long long c = gen_kv_int(vp, "chunk", 0), dk = gen_kv_int(vp, "dk", 0), dv = gen_kv_int(vp, "dv", 0);
    if (c < 1 || dk < 1 || dv < 1 || p->nseq < 1 || p->hv_heads < 1 || p->total < 0)
        return 0;
    if (c > 4096 || dk > 4096 || dv > 4096)
        return SIZE_MAX;
    long long slot = 2 * (3 * c * dk + c * c + c * dv) + 4 * dk, bytes, seg_bytes;
    if (rt_mul_ll((long long)p->total / c + p->nseq, p->hv_heads, &bytes) || rt_mul_ll(bytes, slot, &bytes))
        return SIZE_MAX;
    long long seg = gen_kv_int(vp, "seg", 1);
    if (seg > 1) {  /* per (sequence, value head, segment): c, start state [dk][dv], transition [dk][dk] fp32 */
        if (rt_mul_ll((long long)p->nseq * p->hv_heads, seg, &seg_bytes) ||
            rt_mul_ll(seg_bytes, (2 * dk * dv + dk * dk) * 4, &seg_bytes) || rt_add_ll(bytes, 255, &bytes) ||
            rt_add_ll(bytes / 256 * 256, seg_bytes, &bytes))
            return SIZE_MAX;
    }
    if ((unsigned long long)bytes > SIZE_MAX / 2)
        return SIZE_MAX;
    return (size_t)bytes;
}

/* KF_ERR_ARG: the params are the caller's (the plan's call, the tuner's harness); returns -1. */
static int fail(core_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(core_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_err_vset(e, KF_ERR_ARG, fmt, ap);
    va_end(ap);
    return -1;
}

int rt_kda_check(const gen_kvset *vp, const kf_kda_params *p, core_err *e)
{
    if (!vp || !p)
        return fail(e, "no variant or no params");
    int fam = rt_kda_kernel_count(vp);
    if (fam < 0)
        return fail(e, "family '%s' is not a KDA family", gen_kv_str(vp, "family") ? gen_kv_str(vp, "family") : "?");
    const long long dk = gen_kv_int(vp, "dk", 0), dv = gen_kv_int(vp, "dv", 0);
    if (p->dk != dk)
        return fail(e, "dk is %d: the variant is built for dk %lld", p->dk, dk);
    if (p->dv != dv)
        return fail(e, "dv is %d: the variant is built for dv %lld", p->dv, dv);
    if (p->nseq < 1 || p->nseq > 65535)
        return fail(e, "nseq is %d: must be in [1, 65535]", p->nseq);
    if (family_is(vp, RT_FAM_KDA_PREFILL) && !gen_kv_int(vp, "fused", 1) && (long long)p->nseq * gen_kv_int(vp, "seg", 1) > 65535)
        return fail(e, "nseq is %d: with seg %lld, nseq * seg must be <= 65535", p->nseq, gen_kv_int(vp, "seg", 1));
    if (p->h_heads < 1 || p->hv_heads < 1 || p->hv_heads % p->h_heads)
        return fail(e, "hv_heads is %d, h_heads %d: hv_heads must be a positive multiple of h_heads",
                    p->hv_heads, p->h_heads);
    if (!p->cu_seqlens) {
        if (p->t < 0)
            return fail(e, "t is %d: must be >= 0 when padded", p->t);
        if ((long long)p->total != (long long)p->nseq * p->t)
            return fail(e, "total is %d: padded inputs need total = nseq * t = %lld", p->total,
                        (long long)p->nseq * p->t);
    } else if (p->total < 0) {
        return fail(e, "total is %d: must be the packed token count cu_seqlens[nseq]", p->total);
    }
    if (!p->q || !p->k || !p->v || !p->g || !p->beta || !p->o)
        return fail(e, "%s is NULL", !p->q ? "q" : !p->k ? "k" : !p->v ? "v" : !p->g ? "g" : !p->beta ? "beta" : "o");
    if (p->gate != 0 && p->gate != 1)
        return fail(e, "gate is %d: must be 0 (log space) or 1 (lower-bound form)", p->gate);
    if (p->gate == 1) {
        if (!(p->lower_bound >= -5.0f && p->lower_bound < 0.0f))
            return fail(e, "lower_bound is %g: must be in [-5, 0)", (double)p->lower_bound);
        if (!p->a_log)
            return fail(e, "a_log is NULL: needed by the lower-bound gate form");
    }
    if (!(p->scale == p->scale))
        return fail(e, "scale is NaN");
    /* prefill writes o as bf16 pairs */
    if (family_is(vp, RT_FAM_KDA_PREFILL)) {
        if ((p->o_st | p->o_sh | p->o_sb) & 1)
            return fail(e, "o strides are (%lld, %lld, %lld): must be even (bf16 pairs are stored)",
                        p->o_sb, p->o_st, p->o_sh);
        if ((uintptr_t)p->o & 3)
            return fail(e, "o is not 4-byte aligned");
        if (!gen_kv_int(vp, "fused", 1) && rt_kda_workspace_bytes(vp, p) > 0 && (!p->ws || ((uintptr_t)p->ws & 15)))
            return fail(e, "ws is %s: the split prefill needs %zu bytes, 16-byte aligned",
                        p->ws ? "misaligned" : "NULL", rt_kda_workspace_bytes(vp, p));
    }
    /* decode reads and writes state rows as 16-byte vectors (the prefill's token recurrence, kda/recur.cuh, one
     * float at a time: any stride) */
    if (family_is(vp, RT_FAM_KDA_DECODE)) {
        if (p->h0 && (((p->h0_sn | p->h0_sh | p->h0_sr) & 3) || ((uintptr_t)p->h0 & 15)))
            return fail(e, "h0 strides are (%lld, %lld, %lld): decode needs multiples of 4 and a 16-byte aligned h0",
                        p->h0_sn, p->h0_sh, p->h0_sr);
        if (p->ht && (((p->ht_sn | p->ht_sh | p->ht_sr) & 3) || ((uintptr_t)p->ht & 15)))
            return fail(e, "ht strides are (%lld, %lld, %lld): decode needs multiples of 4 and a 16-byte aligned ht",
                        p->ht_sn, p->ht_sh, p->ht_sr);
    }
    return 0;
}

int rt_kda_launch(const gen_kvset *vp, const kf_kda_params *p, rt_launch *out)
{
    out->n = out->kernels = rt_kda_kernel_count(vp);
    out->ws_bytes = out->n < 1 ? 0 : rt_kda_workspace_bytes(vp, p);
    return out->n < 1 ? -1 : 0;
}
