/* python/tests/stub_kforge.c: a stand-in libkforge for the binding's tests, built by the tests
 * with the system C compiler against runtime/kforge.h. It never touches a GPU: it reports what
 * it was passed through kf_errmsg, so the tests can check the ctypes structs end to end.
 *   kf_open: fails with KF_ERR_CUDA unless cfg->db_path is "stub-ok".
 *   kf_attn_supported / kf_attn_plan: KF_ERR_UNSUPPORTED with every desc field in the message,
 *     unless desc->hq == 7777 (then a plan is made).
 *   kf_attn_run: KF_ERR_ARG with every tensors field and the stream in the message.
 *   kf_kda_supported / kf_kda_plan: KF_ERR_UNSUPPORTED with every desc field in the message,
 *     unless desc->h is 7777 or 77 (then a plan is made); kf_kda_run: KF_ERR_ARG with every field.
 *   kf_parts_supported / kf_parts_plan / kf_parts_run: likewise for the split-score family (hq == 7777 plans).
 *   kfstub_layout: sizes and offsets of the public structs, as this compiler lays them out. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kforge.h"

struct kf_ctx { char msg[2048]; int device; };
struct kf_plan { kf_ctx *ctx; };
static char nomem[] = "out of memory";

const char *kf_version(void) { return "0.1.0"; }
int kf_version_number(void) { return KF_VERSION_NUMBER; }
const char *kf_status_str(kf_status s) {
    switch (s) {
    case KF_OK: return "ok";
    case KF_ERR_CUDA: return "CUDA error";
    default: return "unknown status";
    }
}

kf_status kf_open(kf_ctx **out, const kf_config *cfg) {
    kf_ctx *c = calloc(1, sizeof *c);
    *out = c;
    if (!c) return KF_ERR_NOMEM;
    kf_config d = KF_CONFIG_INIT;
    if (!cfg) cfg = &d;
    c->device = cfg->device;
    if (cfg->db_path && strcmp(cfg->db_path, "stub-ok") == 0) return KF_OK;
    int n = snprintf(c->msg, sizeof c->msg,
                     "no CUDA device: cuInit failed: CUDA_ERROR_NO_DEVICE (100) [device=%d db=%s n_bundles=%d jit=%d tdir=%s",
                     cfg->device, cfg->db_path ? cfg->db_path : "(null)", cfg->n_bundles, (int)cfg->jit,
                     cfg->template_dir ? cfg->template_dir : "(null)");
    for (int i = 0; i < cfg->n_bundles && n < (int)sizeof c->msg - 64; i++)
        n += snprintf(c->msg + n, sizeof c->msg - n, " bundle=%s", cfg->bundles[i]);
    snprintf(c->msg + n, sizeof c->msg - n, "]");
    return KF_ERR_CUDA;
}
void kf_close(kf_ctx *ctx) { free(ctx); }
const char *kf_errmsg(const kf_ctx *ctx) { return ctx ? ctx->msg : nomem; }

static void put_desc(kf_ctx *ctx, const char *what, const kf_attn_desc *d) {
    snprintf(ctx->msg, sizeof ctx->msg,
             "%s: kind=%d dtype=%d hq=%d hkv=%d d=%d causal=%d scale=%g max_batch=%d max_q=%d max_kv=%d packed_q=%d "
             "q=%lld,%lld,%lld k=%lld,%lld,%lld v=%lld,%lld,%lld o=%lld,%lld,%lld",
             what, (int)d->kind, (int)d->dtype, d->hq, d->hkv, d->d, d->causal, (double)d->scale, d->max_batch,
             d->max_q, d->max_kv, d->packed_q, d->q_strides[0], d->q_strides[1], d->q_strides[2], d->k_strides[0],
             d->k_strides[1], d->k_strides[2], d->v_strides[0], d->v_strides[1], d->v_strides[2], d->o_strides[0],
             d->o_strides[1], d->o_strides[2]);
    if (d->window || d->window_left || d->softcap != 0.0f || d->sinks || d->kv_dtype) {   /* the model features */
        size_t n = strlen(ctx->msg);
        snprintf(ctx->msg + n, sizeof ctx->msg - n, " window=%d window_left=%d softcap=%g sinks=%d kv_dtype=%d",
                 d->window, d->window_left, (double)d->softcap, d->sinks, (int)d->kv_dtype);
    }
}
kf_status kf_attn_supported(kf_ctx *ctx, const kf_attn_desc *d) {
    put_desc(ctx, "supported", d);
    return d->hq == 7777 ? KF_OK : KF_ERR_UNSUPPORTED;
}
kf_status kf_attn_plan(kf_ctx *ctx, const kf_attn_desc *d, kf_plan **out) {
    *out = NULL;
    put_desc(ctx, "plan", d);
    if (d->hq != 7777) return KF_ERR_UNSUPPORTED;
    kf_plan *p = calloc(1, sizeof *p);
    if (!p) return KF_ERR_NOMEM;
    p->ctx = ctx;
    *out = p;
    return KF_OK;
}
kf_status kf_attn_run(kf_plan *p, const kf_attn_tensors *t, void *stream) {
    snprintf(p->ctx->msg, sizeof p->ctx->msg,
             "run: q=%p k=%p v=%p o=%p lse=%p cu=%p kv_len=%p batch=%d q_len=%d kv_len_all=%d ws=%p stream=%p",
             t->q, t->k, t->v, t->o, (void *)t->lse, (const void *)t->cu_seqlens_q, (const void *)t->kv_len,
             t->batch, t->q_len, t->kv_len_all, t->workspace, stream);
    if (t->sinks || t->k_scale || t->v_scale) {
        size_t n = strlen(p->ctx->msg);
        snprintf(p->ctx->msg + n, sizeof p->ctx->msg - n, " sinks=%p k_scale=%p v_scale=%p", (const void *)t->sinks,
                 (const void *)t->k_scale, (const void *)t->v_scale);
    }
    return KF_ERR_ARG;
}
size_t kf_plan_workspace(const kf_plan *p) { return 4096; }
const char *kf_plan_variant(const kf_plan *p) { return "attn_decode.stub"; }
const char *kf_plan_source(const kf_plan *p) { return "cache"; }
void kf_plan_free(kf_plan *p) { free(p); }

static void put_kda_desc(kf_ctx *ctx, const char *what, const kf_kda_desc *d) {
    snprintf(ctx->msg, sizeof ctx->msg,
             "%s: mode=%d max_seqs=%d max_tokens=%d h=%d hv=%d dk=%d dv=%d gate=%d lower_bound=%g l2norm=%d "
             "beta_sigmoid=%d state_layout=%d h0=%d ht=%d scale=%g q=%lld,%lld,%lld k=%lld,%lld,%lld "
             "v=%lld,%lld,%lld g=%lld,%lld,%lld beta=%lld,%lld,%lld o=%lld,%lld,%lld state=%lld,%lld,%lld",
             what, (int)d->mode, d->max_seqs, d->max_tokens, d->h, d->hv, d->dk, d->dv, (int)d->gate,
             (double)d->lower_bound, d->l2norm, d->beta_sigmoid, (int)d->state_layout, d->has_initial_state,
             d->wants_final_state, (double)d->scale, d->q_strides[0], d->q_strides[1], d->q_strides[2],
             d->k_strides[0], d->k_strides[1], d->k_strides[2], d->v_strides[0], d->v_strides[1], d->v_strides[2],
             d->g_strides[0], d->g_strides[1], d->g_strides[2], d->beta_strides[0], d->beta_strides[1],
             d->beta_strides[2], d->o_strides[0], d->o_strides[1], d->o_strides[2], d->state_strides[0],
             d->state_strides[1], d->state_strides[2]);
}
kf_status kf_kda_supported(kf_ctx *ctx, const kf_kda_desc *d) {
    put_kda_desc(ctx, "supported", d);
    return d->h == 7777 || d->h == 77 ? KF_OK : KF_ERR_UNSUPPORTED;
}
kf_status kf_kda_plan(kf_ctx *ctx, const kf_kda_desc *d, kf_plan **out) {
    *out = NULL;
    put_kda_desc(ctx, "plan", d);
    if (d->h != 7777 && d->h != 77) return KF_ERR_UNSUPPORTED;
    kf_plan *p = calloc(1, sizeof *p);
    if (!p) return KF_ERR_NOMEM;
    p->ctx = ctx;
    *out = p;
    return KF_OK;
}
kf_status kf_kda_run(kf_plan *p, const kf_kda_tensors *t, void *stream) {
    snprintf(p->ctx->msg, sizeof p->ctx->msg,
             "run: q=%p k=%p v=%p g=%p beta=%p a_log=%p dt_bias=%p h0=%p ht=%p o=%p cu=%p cu64=%p n=%d total=%d "
             "ws=%p stream=%p",
             t->q, t->k, t->v, (const void *)t->g, (const void *)t->beta, (const void *)t->a_log,
             (const void *)t->dt_bias, (const void *)t->initial_state, (void *)t->final_state, t->o,
             (const void *)t->cu_seqlens, (const void *)t->cu_seqlens64, t->n, t->total, t->workspace, stream);
    return KF_ERR_ARG;
}

/* split-score: kf_parts_supported / kf_parts_plan: KF_ERR_UNSUPPORTED with every desc field, unless hq == 7777;
 * kf_parts_run: KF_ERR_ARG with every view that is set ("q[l][p]=ptr/s0,s1,s2"), lse, kv_len, paging, stream */
static void put_parts_desc(kf_ctx *ctx, const char *what, const kf_parts_desc *d) {
    snprintf(ctx->msg, sizeof ctx->msg,
             "%s: dtype=%d parts=%s value=%d dv=%d hq=%d hkv=%d layers=%d page_size=%d causal=%d scale=%g "
             "max_batch=%d max_q=%d max_kv=%d kv_dtype=%d",
             what, (int)d->dtype, d->parts ? d->parts : "(null)", (int)d->value, d->dv, d->hq, d->hkv, d->layers,
             d->page_size, d->causal, (double)d->scale, d->max_batch, d->max_q, d->max_kv, (int)d->kv_dtype);
}
kf_status kf_parts_supported(kf_ctx *ctx, const kf_parts_desc *d) {
    put_parts_desc(ctx, "supported", d);
    return d->hq == 7777 ? KF_OK : KF_ERR_UNSUPPORTED;
}
kf_status kf_parts_plan(kf_ctx *ctx, const kf_parts_desc *d, kf_plan **out) {
    *out = NULL;
    put_parts_desc(ctx, "plan", d);
    if (d->hq != 7777) return KF_ERR_UNSUPPORTED;
    kf_plan *p = calloc(1, sizeof *p);
    if (!p) return KF_ERR_NOMEM;
    p->ctx = ctx;
    *out = p;
    return KF_OK;
}
static int put_view(char *m, size_t n, const char *name, int l, int p, const kf_parts_view *v) {
    if (!v->ptr && !v->strides[0] && !v->strides[1] && !v->strides[2]) return 0;
    char nm[16];
    if (p < 0) snprintf(nm, sizeof nm, "%s[%d]", name, l);
    else snprintf(nm, sizeof nm, "%s[%d][%d]", name, l, p);
    return snprintf(m, n, " %s=%p/%lld,%lld,%lld", nm, v->ptr, v->strides[0], v->strides[1], v->strides[2]);
}
kf_status kf_parts_run(kf_plan *pl, const kf_parts_tensors *t, void *stream) {
    char *m = pl->ctx->msg;
    size_t n = sizeof pl->ctx->msg;
    int w = snprintf(m, n, "run:");
    for (int l = 0; l < 4; l++)
        for (int p = 0; p < 4; p++) {
            w += put_view(m + w, n - w, "q", l, p, &t->q[l][p]);
            w += put_view(m + w, n - w, "k", l, p, &t->k[l][p]);
            w += put_view(m + w, n - w, "v", l, p, &t->v[l][p]);
        }
    for (int l = 0; l < 4; l++) {
        w += put_view(m + w, n - w, "o", l, -1, &t->o[l]);
        if (t->lse[l]) w += snprintf(m + w, n - w, " lse[%d]=%p", l, (void *)t->lse[l]);
    }
    if (t->kv_scale.ptr)
        w += snprintf(m + w, n - w, " kv_scale=%p/%lld,%lld,%lld", t->kv_scale.ptr, t->kv_scale.strides[0],
                      t->kv_scale.strides[1], t->kv_scale.strides[2]);
    snprintf(m + w, n - w, " kv_len=%p kv_len_all=%d block_table=%p bt_stride=%d batch=%d q_len=%d ws=%p stream=%p",
             (const void *)t->kv_len, t->kv_len_all, (const void *)t->block_table, t->bt_stride, t->batch, t->q_len,
             t->workspace, stream);
    return KF_ERR_ARG;
}

#define OFF(T, f) (long)offsetof(T, f)
/* "name size off..." lines */
void kfstub_layout(char *buf, size_t n) {
    snprintf(buf, n,
             "kf_config %ld %ld %ld %ld %ld %ld %ld\n"
             "kf_attn_desc %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld\n"
             "kf_attn_tensors %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld\n",
             (long)sizeof(kf_config), OFF(kf_config, device), OFF(kf_config, db_path), OFF(kf_config, bundles),
             OFF(kf_config, n_bundles), OFF(kf_config, jit), OFF(kf_config, template_dir),
             (long)sizeof(kf_attn_desc), OFF(kf_attn_desc, kind), OFF(kf_attn_desc, dtype), OFF(kf_attn_desc, hq),
             OFF(kf_attn_desc, hkv), OFF(kf_attn_desc, d), OFF(kf_attn_desc, causal), OFF(kf_attn_desc, scale),
             OFF(kf_attn_desc, max_batch), OFF(kf_attn_desc, max_q), OFF(kf_attn_desc, max_kv),
             OFF(kf_attn_desc, packed_q), OFF(kf_attn_desc, q_strides), OFF(kf_attn_desc, k_strides),
             OFF(kf_attn_desc, v_strides), OFF(kf_attn_desc, o_strides), OFF(kf_attn_desc, page_size),
             OFF(kf_attn_desc, window), OFF(kf_attn_desc, window_left), OFF(kf_attn_desc, softcap),
             OFF(kf_attn_desc, sinks), OFF(kf_attn_desc, kv_dtype),
             (long)sizeof(kf_attn_tensors), OFF(kf_attn_tensors, q), OFF(kf_attn_tensors, k), OFF(kf_attn_tensors, v),
             OFF(kf_attn_tensors, o), OFF(kf_attn_tensors, lse), OFF(kf_attn_tensors, cu_seqlens_q),
             OFF(kf_attn_tensors, kv_len), OFF(kf_attn_tensors, batch), OFF(kf_attn_tensors, q_len),
             OFF(kf_attn_tensors, kv_len_all), OFF(kf_attn_tensors, total_q), OFF(kf_attn_tensors, workspace),
             OFF(kf_attn_tensors, block_table), OFF(kf_attn_tensors, bt_stride), OFF(kf_attn_tensors, sinks),
             OFF(kf_attn_tensors, k_scale), OFF(kf_attn_tensors, v_scale));
    size_t w = strlen(buf);
    snprintf(buf + w, n - w,
             "kf_kda_desc %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld\n"
             "kf_kda_tensors %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld\n",
             (long)sizeof(kf_kda_desc), OFF(kf_kda_desc, mode), OFF(kf_kda_desc, max_seqs),
             OFF(kf_kda_desc, max_tokens), OFF(kf_kda_desc, h), OFF(kf_kda_desc, hv), OFF(kf_kda_desc, dk),
             OFF(kf_kda_desc, dv), OFF(kf_kda_desc, gate), OFF(kf_kda_desc, lower_bound), OFF(kf_kda_desc, l2norm),
             OFF(kf_kda_desc, beta_sigmoid), OFF(kf_kda_desc, state_layout), OFF(kf_kda_desc, has_initial_state),
             OFF(kf_kda_desc, wants_final_state), OFF(kf_kda_desc, scale), OFF(kf_kda_desc, q_strides),
             OFF(kf_kda_desc, k_strides), OFF(kf_kda_desc, v_strides), OFF(kf_kda_desc, g_strides),
             OFF(kf_kda_desc, beta_strides), OFF(kf_kda_desc, o_strides), OFF(kf_kda_desc, state_strides),
             (long)sizeof(kf_kda_tensors), OFF(kf_kda_tensors, q), OFF(kf_kda_tensors, k), OFF(kf_kda_tensors, v),
             OFF(kf_kda_tensors, g), OFF(kf_kda_tensors, beta), OFF(kf_kda_tensors, a_log),
             OFF(kf_kda_tensors, dt_bias), OFF(kf_kda_tensors, initial_state), OFF(kf_kda_tensors, final_state),
             OFF(kf_kda_tensors, o), OFF(kf_kda_tensors, cu_seqlens), OFF(kf_kda_tensors, cu_seqlens64),
             OFF(kf_kda_tensors, n), OFF(kf_kda_tensors, total), OFF(kf_kda_tensors, workspace));
    w = strlen(buf);
    snprintf(buf + w, n - w,
             "kf_parts_desc %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld\n"
             "kf_parts_view %ld %ld %ld\n"
             "kf_parts_tensors %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld\n",
             (long)sizeof(kf_parts_desc), OFF(kf_parts_desc, dtype), OFF(kf_parts_desc, parts), OFF(kf_parts_desc, value),
             OFF(kf_parts_desc, dv), OFF(kf_parts_desc, hq), OFF(kf_parts_desc, hkv), OFF(kf_parts_desc, layers),
             OFF(kf_parts_desc, page_size), OFF(kf_parts_desc, causal), OFF(kf_parts_desc, scale),
             OFF(kf_parts_desc, max_batch), OFF(kf_parts_desc, max_q), OFF(kf_parts_desc, max_kv),
             OFF(kf_parts_desc, kv_dtype),
             (long)sizeof(kf_parts_view), OFF(kf_parts_view, ptr), OFF(kf_parts_view, strides),
             (long)sizeof(kf_parts_tensors), OFF(kf_parts_tensors, q), OFF(kf_parts_tensors, k), OFF(kf_parts_tensors, v),
             OFF(kf_parts_tensors, o), OFF(kf_parts_tensors, lse), OFF(kf_parts_tensors, kv_len),
             OFF(kf_parts_tensors, kv_len_all), OFF(kf_parts_tensors, block_table), OFF(kf_parts_tensors, bt_stride),
             OFF(kf_parts_tensors, batch), OFF(kf_parts_tensors, q_len), OFF(kf_parts_tensors, workspace),
             OFF(kf_parts_tensors, kv_scale));
}

/* KF_PARTS_DESC_INIT as this compiler reads it */
void kfstub_parts_desc_init(kf_parts_desc *d) {
    kf_parts_desc x = KF_PARTS_DESC_INIT;
    *d = x;
}

/* KF_KDA_DESC_INIT as this compiler reads it */
void kfstub_kda_desc_init(kf_kda_desc *d) {
    kf_kda_desc x = KF_KDA_DESC_INIT;
    *d = x;
}
