/* runtime/select_kda.c: KDA selection: one pure function of (description, device, tuned table), and the plan's resolved params */
#include "runtime/family.h"
#include "runtime/kda_launch.h"
#include "runtime/select.h"
#include "runtime/shape.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>


static kf_status check_flag(const char *field, int v, core_err *e)
{
    if (v == 0 || v == 1)
        return KF_OK;
    return core_err_set(e, KF_ERR_ARG, "desc.%s must be 0 or 1, got %d", field, v);
}

/* Strides >= 0; rows 16-byte aligned: a multiple of `mult` elements (0: no alignment rule). */
static kf_status check_strides(const char *name, const long long s[3], int mult, core_err *e)
{
    for (int i = 0; i < 3; i++) {
        if (s[i] < 0) {
            return core_err_set(e, KF_ERR_ARG, "desc.%s_strides[%d] must be >= 0, got %lld", name, i, s[i]);
        }
        if (mult && s[i] % mult) {
            return core_err_set(e, KF_ERR_UNSUPPORTED,
                                "desc.%s_strides[%d] = %lld breaks 16-byte row alignment (must be a multiple of %d elements)",
                                name, i, s[i], mult);
        }
    }
    return KF_OK;
}

static int tokens_per_seq(const kf_kda_desc *d)
{
    long long t = ((long long)d->max_tokens + d->max_seqs - 1) / d->max_seqs;
    return t < 1 ? 1 : (int)t;
}

void rt_kda_desc_shape(const void *desc, gen_kvset *s)
{
    const kf_kda_desc *d = desc;
    gen_kv_clear(s);
    gen_kv_set_str(s, "family", rt_family_name(d->mode == KF_KDA_DECODE ? RT_FAM_KDA_DECODE : RT_FAM_KDA_PREFILL));
    gen_kv_set_int(s, "n", d->max_seqs);
    gen_kv_set_int(s, "t", d->max_seqs > 0 ? tokens_per_seq(d) : 1);
    gen_kv_set_int(s, "h", d->h);
    gen_kv_set_int(s, "hv", d->hv);
    gen_kv_set_int(s, "dk", d->dk);
    gen_kv_set_int(s, "dv", d->dv);
}

/* The span of a tensor's declared strides over the maxima fits in 63 bits (0 strides: contiguous). */
static kf_status check_span(const char *name, const long long s[3], long long seqs, long long tokens, long long heads,
                            long long row, core_err *e)
{
    const long long ext[4] = {seqs, tokens, heads, row};
    const long long str[4] = {s[0], s[1] ? s[1] : heads * row, s[2] ? s[2] : row, 1};
    if (rt_span(4, ext, str) < 0)
        return core_err_set(e, KF_ERR_ARG,
                            "desc.%s_strides = {%lld, %lld, %lld} over [%lld, %lld, %lld, %lld] span more "
                            "than 2^63 elements", name, s[0], s[1], s[2], seqs, tokens, heads, row);
    return KF_OK;
}

/* The description's own fields (enums, flags, strides, device), and its shape {n, t, h, hv, dk, dv}
 * through rt_shape_check: the checks kforge gen / compile make of a --shape. Sets shape. */
static kf_status check_desc(const kf_kda_desc *d, const rt_devinfo *dev, gen_kvset *shape, core_err *e)
{
    kf_status st;
    if (!d)
        return core_err_set(e, KF_ERR_ARG, "desc is NULL");
    if (d->mode != KF_KDA_PREFILL && d->mode != KF_KDA_DECODE)
        return core_err_set(e, KF_ERR_ARG, "desc.mode must be KF_KDA_PREFILL or KF_KDA_DECODE, got %d", d->mode);
    if (d->max_tokens < 0)
        return core_err_set(e, KF_ERR_ARG, "desc.max_tokens must be >= 0, got %d", d->max_tokens);
    rt_family_for_desc(RT_API_KDA, d, shape);
    if ((st = rt_shape_check(NULL, shape, NULL, RT_NAMES_DESC, e)))
        return st;
    if (d->gate != KF_KDA_GATE_LOG && d->gate != KF_KDA_GATE_SIGMOID)
        return core_err_set(e, KF_ERR_ARG, "desc.gate must be KF_KDA_GATE_LOG or KF_KDA_GATE_SIGMOID, got %d", d->gate);
    if (d->gate == KF_KDA_GATE_SIGMOID && !(d->lower_bound >= -5.0f && d->lower_bound < 0.0f))
        return core_err_set(e, KF_ERR_ARG, "desc.lower_bound = %g is outside [-5, 0) (the sigmoid gate's lower bound)",
                            (double)d->lower_bound);
    if ((st = check_flag("l2norm", d->l2norm, e)) || (st = check_flag("beta_sigmoid", d->beta_sigmoid, e)) ||
        (st = check_flag("has_initial_state", d->has_initial_state, e)) ||
        (st = check_flag("wants_final_state", d->wants_final_state, e)))
        return st;
    if (d->state_layout != KF_KDA_STATE_KV && d->state_layout != KF_KDA_STATE_VK)
        return core_err_set(e, KF_ERR_ARG, "desc.state_layout must be KF_KDA_STATE_KV or KF_KDA_STATE_VK, got %d",
                            d->state_layout);
    if (!(d->scale >= 0.0f) || isinf(d->scale))
        return core_err_set(e, KF_ERR_ARG,
                            "desc.scale must be finite and >= 0 (0: 1/sqrt(dk)), got %g", (double)d->scale);
    /* bf16 rows: multiples of 8 elements; fp32 g and state rows: multiples of 4; beta is a scalar per row */
    if ((st = check_strides("q", d->q_strides, 8, e)) || (st = check_strides("k", d->k_strides, 8, e)) ||
        (st = check_strides("v", d->v_strides, 8, e)) || (st = check_strides("o", d->o_strides, 8, e)) ||
        (st = check_strides("g", d->g_strides, 4, e)) || (st = check_strides("beta", d->beta_strides, 0, e)) ||
        (st = check_strides("state", d->state_strides, 4, e)))
        return st;
    const int vk = d->state_layout == KF_KDA_STATE_VK;
    const long long S = d->max_seqs, T = d->max_tokens, rows = vk ? d->dv : d->dk, cols = vk ? d->dk : d->dv;
    if ((st = check_span("q", d->q_strides, S, T, d->h, d->dk, e)) ||
        (st = check_span("k", d->k_strides, S, T, d->h, d->dk, e)) ||
        (st = check_span("v", d->v_strides, S, T, d->hv, d->dv, e)) ||
        (st = check_span("o", d->o_strides, S, T, d->hv, d->dv, e)) ||
        (st = check_span("g", d->g_strides, S, T, d->hv, d->dk, e)) ||
        (st = check_span("beta", d->beta_strides, S, T, d->hv, 1, e)) ||
        (st = check_span("state", d->state_strides, S, d->hv, rows, cols, e)))
        return st;
    if (dev->cc_major < 8)
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "%s (compute capability %d.%d) is not supported: kforge needs sm_80 or newer",
                            dev->name, dev->cc_major, dev->cc_minor);
    return KF_OK;
}

static long long or_default(long long v, long long dflt) { return v ? v : dflt; }

void rt_kda_base_params(const kf_kda_desc *d, void *params_out)
{
    kf_kda_params *p = params_out;
    memset(p, 0, sizeof *p);
    const long long h = d->h, hv = d->hv, dk = d->dk, dv = d->dv;
    p->q_sb = d->q_strides[0], p->q_st = or_default(d->q_strides[1], h * dk), p->q_sh = or_default(d->q_strides[2], dk);
    p->k_sb = d->k_strides[0], p->k_st = or_default(d->k_strides[1], h * dk), p->k_sh = or_default(d->k_strides[2], dk);
    p->v_sb = d->v_strides[0], p->v_st = or_default(d->v_strides[1], hv * dv), p->v_sh = or_default(d->v_strides[2], dv);
    p->o_sb = d->o_strides[0], p->o_st = or_default(d->o_strides[1], hv * dv), p->o_sh = or_default(d->o_strides[2], dv);
    p->g_sb = d->g_strides[0], p->g_st = or_default(d->g_strides[1], hv * dk), p->g_sh = or_default(d->g_strides[2], dk);
    p->b_sb = d->beta_strides[0], p->b_st = or_default(d->beta_strides[1], hv), p->b_sh = or_default(d->beta_strides[2], 1);
    const int vk = d->state_layout == KF_KDA_STATE_VK;
    p->h0_sn = p->ht_sn = or_default(d->state_strides[0], hv * dk * dv);
    p->h0_sh = p->ht_sh = or_default(d->state_strides[1], dk * dv);
    p->h0_sr = p->ht_sr = or_default(d->state_strides[2], vk ? dk : dv);
    p->h0_vfirst = p->ht_vfirst = vk;
    p->dt_sh = dk;
    p->nseq = d->max_seqs;
    p->t = d->max_seqs > 0 ? tokens_per_seq(d) : 0;
    p->total = d->max_tokens;
    p->h_heads = d->h;
    p->hv_heads = d->hv;
    p->dk = d->dk;
    p->dv = d->dv;
    p->gate = d->gate == KF_KDA_GATE_SIGMOID;
    p->l2norm = d->l2norm;
    p->beta_sigmoid = d->beta_sigmoid;
    p->scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)d->dk);
    p->lower_bound = d->lower_bound;
}

/* The variant against the plan's maxima: what rt_kda_check and the grids say of the largest call
 * (pointers stand in, 16-byte aligned). */
static kf_status check_variant(const kf_kda_desc *d, const rt_choice *ch, core_err *e)
{
    kf_kda_params p;
    rt_kda_base_params(d, &p);
    static _Alignas(16) float stand_in[4];  /* never read or written: only its address */
    p.q = p.k = p.v = p.o = stand_in;
    p.g = p.beta = stand_in;
    p.cu_seqlens = stand_in;  /* packed: any total */
    if (p.gate)
        p.a_log = stand_in;
    p.h0 = d->has_initial_state ? stand_in : NULL;
    p.ht = d->wants_final_state ? stand_in : NULL;
    p.ws = (void *)(uintptr_t)stand_in;
    const char *family = gen_kv_str(&ch->vp, "family");
    if (rt_kda_check(&ch->vp, &p, e))
        return core_err_set(e, KF_ERR_UNSUPPORTED, "%s variant refuses the description: %s", family ? family : "KDA",
                            e->msg);
    int nk = rt_kda_kernel_count(&ch->vp);
    for (int i = 0; i < nk; i++) {
        unsigned grid[3];
        if (rt_kda_grid(&ch->vp, &p, i, grid))
            return core_err_set(e, KF_ERR_UNSUPPORTED,
                                "no launch grid for kernel %d of %s at desc.max_seqs = %d, desc.max_tokens = %d",
                                i, family ? family : "KDA", d->max_seqs, d->max_tokens);
    }
    return nk < 1 ? core_err_set(e, KF_ERR_UNSUPPORTED, "'%s' is not a KDA family", family ? family : "?") : KF_OK;
}

kf_status rt_kda_select(const kf_kda_desc *d, const rt_devinfo *dev, const rt_table *t,
                        rt_default_fn dflt, void *arg, rt_choice *out, core_err *e)
{
    memset(out, 0, sizeof *out);
    kf_status st = check_desc(d, dev, &out->shape, e);
    if (st)
        return st;
    const rt_family *f = rt_family_of(&out->shape);
    st = rt_select_variant(dev, t, f->class_keys, f->dist_keys, dflt, arg, out, e);
    if (st)
        return st;
    st = check_variant(d, out, e);
    if (st)
        return st;
    kf_kda_params p;
    rt_launch l;
    rt_kda_base_params(d, &p);
    if (f->launch(&out->vp, &p, &l))
        return core_err_set(e, KF_ERR_UNSUPPORTED, "'%s' is not a KDA family", f->name);
    out->workspace = l.ws_bytes;
    if (out->workspace == SIZE_MAX)
        return core_err_set(e, KF_ERR_ARG, "the workspace of desc.max_tokens %d, desc.max_seqs %d, desc.hv %d does not "
                            "fit in memory", d->max_tokens, d->max_seqs, d->hv);
    return KF_OK;
}
