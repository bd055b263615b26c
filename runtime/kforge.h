/* kforge.h: the public C API of kforge: plan an attention or KDA call once, launch it many times */
#ifndef KFORGE_H
#define KFORGE_H

/*
 * Use:
 *   kf_ctx *ctx;  kf_config cfg = KF_CONFIG_INIT;  cfg.db_path = "kforge.db";
 *   if (kf_open(&ctx, &cfg) != KF_OK) { puts(kf_errmsg(ctx)); kf_close(ctx); }
 *   kf_attn_desc d = KF_ATTN_DESC_INIT;  d.kind = KF_ATTN_DECODE; ... 
 *   kf_plan *p;  kf_attn_plan(ctx, &d, &p);          (may compile: do it at start-up)
 *   kf_attn_run(p, &tensors, stream);                (checks arguments, enqueues; graph-safe)
 *   kf_plan_free(p);  kf_close(ctx);
 *
 * No CUDA header is needed: device pointers are void * and streams are void *
 * (a CUstream / cudaStream_t; NULL is the legacy default stream).
 *
 * Sizes: every size, count and stride span derived from a description or a call (element
 * counts of the tensors for the maxima, the span of declared strides, rows of the split
 * workspace, the workspace bytes) is computed with overflow checks; one that does not fit
 * (63 bits, or an int where the kernels take one, e.g. max_batch * max_q) is KF_ERR_ARG
 * naming the fields. The shape checks are those of `kforge gen` / `kforge compile --shape`.
 *
 * Thread safety: a kf_ctx may be used by many threads at once (plans are built
 * under the context's lock; two threads missing the same variant compile it
 * once). A kf_plan may be run from many threads at once when each run passes
 * its own workspace (or the plan needs none); kf_errmsg then reports the last
 * error of any thread.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KF_VERSION_MAJOR 0
#define KF_VERSION_MINOR 1
#define KF_VERSION_PATCH 0
#define KF_VERSION_NUMBER (KF_VERSION_MAJOR * 10000 + KF_VERSION_MINOR * 100 + KF_VERSION_PATCH)

typedef enum {
    KF_OK = 0,
    KF_ERR_ARG,          /* an argument is invalid; the message names it and its value */
    KF_ERR_UNSUPPORTED,  /* valid, but no kernel handles it (layout, dtype, dims) */
    KF_ERR_NOT_TUNED,    /* no bundle or database winner for this shape and JIT is off */
    KF_ERR_CUDA,         /* a driver call failed (or there is no driver/device); the message has its name and code */
    KF_ERR_NVRTC,        /* compilation failed; the message carries the log's first lines */
    KF_ERR_DB,           /* the database could not be read or written */
    KF_ERR_BUNDLE,       /* a bundle is malformed, altered, or for another GPU/arch/format */
    KF_ERR_NOMEM,        /* host memory ran out */
    /* append only: never renumber */
} kf_status;

typedef struct kf_ctx kf_ctx;
typedef struct kf_plan kf_plan;

typedef enum { KF_BF16 = 1, KF_FP16 = 2 } kf_dtype;
/* The element type of K and V (kf_attn_desc.kv_dtype): the dtype's, or FP8 e4m3 with fp32 scales. */
typedef enum { KF_KV_SAME = 0, KF_KV_E4M3 = 1 } kf_kv_dtype;
typedef enum { KF_JIT_ALLOW = 0, KF_JIT_FORBID = 1 } kf_jit;

/* Library version "0.1.0"; compare KF_VERSION_NUMBER with kf_version_number(). Static text. */
const char *kf_version(void);
int kf_version_number(void);
/* Static text for a status, never NULL ("unknown status" for values not listed). */
const char *kf_status_str(kf_status s);

typedef struct kf_config {
    int device;                    /* CUDA device ordinal; its primary context is used */
    const char *db_path;           /* database of binaries and winners; NULL: none */
    const char *const *bundles;    /* bundle files to serve from, n_bundles of them */
    int n_bundles;
    kf_jit jit;                    /* compile missing variants with NVRTC (full library only) */
    const char *template_dir;      /* NULL: embedded templates (full library only) */
} kf_config;
#define KF_CONFIG_INIT {0, NULL, NULL, 0, KF_JIT_ALLOW, NULL}

/* Opens a context on cfg->device. *out is always set (also on failure, so
 * kf_errmsg can say why); close it with kf_close. out NULL: KF_ERR_ARG, nothing
 * written. cfg NULL means KF_CONFIG_INIT. Strings in cfg are copied.
 * The caller's paths are checked before the device, so a machine without a GPU
 * still names a bad one: template_dir must be a directory (KF_ERR_ARG naming it),
 * each bundle is opened and verified (KF_ERR_BUNDLE), db_path is opened (created
 * when missing; KF_ERR_DB); then the driver and device (KF_ERR_CUDA), then each
 * bundle's arch and GPU against the device. */
kf_status kf_open(kf_ctx **out, const kf_config *cfg);
/* Closes the context. Plans made on it and not yet freed keep it alive: it is freed
 * by the last of their kf_plan_free, and until then they run (and report errors)
 * as before. After kf_close, ctx may be passed only to kf_errmsg, and only while
 * such plans are alive (it reports their errors). NULL is a no-op. */
void kf_close(kf_ctx *ctx);
/* The message of the last failed call on ctx (or a plan of ctx); "" if none.
 * Valid until the next call on ctx. ctx NULL gives "out of memory". */
const char *kf_errmsg(const kf_ctx *ctx);

typedef enum {
    KF_ATTN_PREFILL = 1,           /* any Sq; tiles of query rows of one head */
    KF_ATTN_DECODE = 2,            /* Sq 1..16; the G x Sq rows of a KV head packed in one tile, split-KV */
} kf_attn_kind;

/*
 * Problem description. Tensors (element strides; the last dimension contiguous):
 *   q [B, Sq, Hq, D] (or packed [total, Hq, D] with cu_seqlens_q when packed_q),
 *   k, v [B, Skv, Hkv, D] (Skv = the cache capacity when kv_len is given per sequence),
 *   o like q, lse [B, Hq, Sq] fp32 natural log (optional; packed: [Hq, total_q]).
 * Strides of 0 mean "contiguous for the maxima": q_strides = {Sq*Hq*D, Hq*D, D}.
 */
typedef struct kf_attn_desc {
    kf_attn_kind kind;
    kf_dtype dtype;
    int hq, hkv, d;                /* heads, head dim (64, 128 or 256); hq % hkv == 0 */
    int causal;                    /* bottom-right aligned when Sq < Skv */
    float scale;                   /* 0: 1/sqrt(d) */
    int max_batch, max_q, max_kv;  /* the plan serves any batch/lengths up to these */
    int packed_q;                  /* q and o packed [total, Hq, D] with cu_seqlens_q */
    long long q_strides[3], k_strides[3], v_strides[3], o_strides[3];  /* batch, seq, head */
    /* Paged K/V (decode and prefill): keys per page (> 0), or 0 for contiguous caches. Paged, k and v
     * are page pools and k_strides / v_strides give (page, row in page, head) strides (0: a
     * contiguous pool [pages, page_size, Hkv, D]); key j of sequence b is row j % page_size of
     * page tensors.block_table[b * tensors.bt_stride + j / page_size]. Prefill over pages (chunked
     * prefill, prefix caching): each sequence's tensors.kv_len[b] keys end with its query rows
     * (bottom-right causal: query i sits at key position i + kv_len[b] - n_q). On sm_90a a prefill
     * reads pages by tensor map when page_size and the key block (128; 64 at D 256) are multiples
     * of one another with at least 8 keys a box (any power of two from 8); other page sizes take a
     * slower cp.async path, and a plan of impl wgmma_tma with them is refused. */
    int page_size;
    /* ---- model features (appended; 0 is off, so a description that does not name them is the
     * plain attention). Each feature is a compile-time value of the kernel: a plan serves the
     * features of its description, any window_left / softcap value. */
    int window;                    /* 1: sliding window: the query at key position p sees keys p - window_left .. p;
                                      needs causal (KF_ERR_UNSUPPORTED otherwise); key blocks wholly before are skipped */
    int window_left;               /* >= 0 with window (0: each query sees its own key only) */
    float softcap;                 /* > 0: score <- softcap * tanh(score / softcap) before the softmax (Gemma-2); the
                                      lse is that of the capped scores. 0: none */
    int sinks;                     /* 1: tensors.sinks[h] (fp32, one per query head) joins each softmax denominator only
                                      (gpt-oss); a sequence with no key gives o = 0 and lse = sinks[h] */
    kf_kv_dtype kv_dtype;          /* KF_KV_E4M3: k and v are FP8 e4m3 (k_strides / v_strides in bytes, multiples of 16),
                                      value = tensors.k_scale[kv head] * e4m3 (v alike, per-head fp32 scales);
                                      decode, and prefill on the mma.sync path (on sm_90a too) */
} kf_attn_desc;
#define KF_ATTN_DESC_INIT {KF_ATTN_DECODE, KF_BF16, 0, 0, 0, 0, 0.0f, 0, 0, 0, 0, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, 0, \
                           0, 0, 0.0f, 0, KF_KV_SAME}

/* Device pointers of one call. */
typedef struct kf_attn_tensors {
    const void *q, *k, *v;
    void *o;
    float *lse;                    /* NULL: not written */
    const int32_t *cu_seqlens_q;   /* [batch + 1], required when packed_q, NULL otherwise */
    const int32_t *kv_len;         /* [batch] keys per sequence (<= max_kv), 4-byte aligned; NULL: all have kv_len_all */
    int batch;                     /* <= max_batch */
    int q_len;                     /* rows per sequence (max when packed), <= max_q */
    int kv_len_all;                /* keys of every sequence when kv_len is NULL, <= max_kv */
    int total_q;                   /* packed_q: rows of q (= cu_seqlens_q[batch]), <= max_batch * max_q; else 0 */
    void *workspace;               /* kf_plan_workspace() bytes, or NULL to use the plan's own */
    const int32_t *block_table;    /* [batch, bt_stride] page indices; required when desc.page_size > 0, else NULL */
    int bt_stride;                 /* row stride of block_table, >= ceil(max_kv / page_size); 0 when not paged */
    /* model features (appended): required when the plan has the feature, NULL otherwise; 4-byte aligned */
    const float *sinks;            /* [hq] fp32 sink logits (desc.sinks) */
    const float *k_scale, *v_scale;   /* [hkv] fp32 dequantisation scales (desc.kv_dtype KF_KV_E4M3) */
} kf_attn_tensors;
/* kf_attn_run, kf_kda_run and kf_parts_run refuse (KF_ERR_ARG, naming the field) a field of the tensors
 * that the plan does not read but the caller set, rather than ignore it. */

/* KF_OK when a kernel exists for d on this context's device, else the status and
 * message kf_attn_plan would give. Never compiles. A combination of features no kernel serves
 * (a window without causal, FP8 K/V with softcap on a wgmma-only head dim, ...) is
 * KF_ERR_UNSUPPORTED naming the features: there is no silent fallback. */
kf_status kf_attn_supported(kf_ctx *ctx, const kf_attn_desc *d);
/* Resolves the variant (bundle winner, then database winner for this GPU model,
 * then the template's default), loads its binary (cache, database, bundle, or an
 * NVRTC compile when JIT is allowed; with JIT, a database winner tuned on an older
 * template is compiled under the current one) and allocates the plan's workspace. */
kf_status kf_attn_plan(kf_ctx *ctx, const kf_attn_desc *d, kf_plan **out);
/* Checks the call against the plan and enqueues the kernels on stream. No
 * allocation, no synchronisation, no file or database access: capturable in a
 * CUDA graph. */
kf_status kf_attn_run(kf_plan *p, const kf_attn_tensors *t, void *stream);
/* Workspace bytes a run needs when it passes its own (0 when none). */
size_t kf_plan_workspace(const kf_plan *p);
/* The variant key the plan runs, and where its binary came from
 * ("bundle", "database", "jit", "cache"). Valid while the plan lives. */
const char *kf_plan_variant(const kf_plan *p);
const char *kf_plan_source(const kf_plan *p);
/* Frees the plan and its workspace (and its context, when kf_close was called and
 * this was the context's last plan). NULL is a no-op. */
void kf_plan_free(kf_plan *p);

/* ---- Kimi Delta Attention (KDA) ------------------------------------------------
 *
 * Per value head, a state S [dk, dv] fp32. Per token t (g_t in log space, g <= 0):
 *   S <- diag(exp g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale q_t)
 * q/k head of value head hv: hv / (hv / h). Plans are kf_plan: kf_plan_variant, kf_plan_source,
 * kf_plan_workspace and kf_plan_free work for them; kf_attn_run refuses a KDA plan and
 * kf_kda_run an attention plan.
 *
 * Tensors (element strides {sequence, token, head}; the last dimension contiguous):
 *   q, k [T, H, dk] bf16 packed with cu_seqlens (or [N, T, H, dk] padded: every sequence T tokens),
 *   v, o [T, HV, dv] bf16, g [T, HV, dk] fp32, beta [T, HV] fp32 (beta's head stride is free),
 *   states [N, HV, dk, dv] fp32 (KF_KDA_STATE_KV) or [N, HV, dv, dk] (KF_KDA_STATE_VK),
 *   element strides {sequence, value head, row}; initial and final state share the layout.
 * Strides of 0 mean contiguous: token H*dk (q, k), HV*dv (v, o), HV*dk (g), HV (beta); head the
 * row length (beta 1); sequence (padded only) T times the token stride of the call;
 * state {HV*dk*dv, dk*dv, dv (KV) or dk (VK)}. bf16 strides must be multiples of 8 elements and
 * fp32 state/g strides multiples of 4 (16-byte rows); q, k, v, o, g and the states 16-byte aligned.
 */
typedef enum {
    KF_KDA_PREFILL = 1,            /* chunked: any number of tokens per sequence */
    KF_KDA_DECODE = 2,             /* one token per sequence, the state read and written once
                                      (longer sequences are correct, token by token) */
} kf_kda_mode;

typedef enum {
    KF_KDA_GATE_LOG = 0,           /* g is the log-space gate (g <= 0) */
    KF_KDA_GATE_SIGMOID = 1,       /* g is raw: lower_bound * sigmoid(exp(a_log[hv]) * (g + dt_bias[hv, :])) */
} kf_kda_gate;

typedef enum {
    KF_KDA_STATE_KV = 0,           /* S [dk, dv] per (sequence, value head) */
    KF_KDA_STATE_VK = 1,           /* S^T [dv, dk] */
} kf_kda_state_layout;

typedef struct kf_kda_desc {
    kf_kda_mode mode;
    int max_seqs;                  /* sequences of a call, up to this (1..65535) */
    int max_tokens;                /* tokens of a call, all sequences together, up to this */
    int h, hv;                     /* q/k heads, value heads; hv % h == 0 */
    int dk, dv;                    /* 64 or 128, dk == dv */
    kf_kda_gate gate;
    float lower_bound;             /* KF_KDA_GATE_SIGMOID: in [-5, 0) (-5 in production) */
    int l2norm;                    /* q, k <- x / sqrt(sum x^2 + 1e-6) in the kernel (before scale) */
    int beta_sigmoid;              /* beta <- sigmoid(beta) in the kernel */
    kf_kda_state_layout state_layout;
    int has_initial_state;         /* 0: the initial state is zero */
    int wants_final_state;         /* 1: the final state is written */
    float scale;                   /* 0: 1/sqrt(dk) */
    long long q_strides[3], k_strides[3], v_strides[3], g_strides[3], beta_strides[3], o_strides[3];
    long long state_strides[3];    /* sequence, value head, row */
} kf_kda_desc;
#define KF_KDA_DESC_INIT {KF_KDA_PREFILL, 0, 0, 0, 0, 0, 0, KF_KDA_GATE_LOG, -5.0f, 0, 0, KF_KDA_STATE_KV, \
                          0, 0, 0.0f, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}}

/* Device pointers of one KDA call. */
typedef struct kf_kda_tensors {
    const void *q, *k, *v;         /* bf16 */
    const float *g, *beta;         /* fp32 */
    const float *a_log;            /* [HV] fp32; KF_KDA_GATE_SIGMOID only (else NULL) */
    const float *dt_bias;          /* [HV, dk] fp32 contiguous or NULL (no bias); KF_KDA_GATE_SIGMOID only */
    const float *initial_state;    /* required when has_initial_state, else NULL */
    float *final_state;            /* required when wants_final_state, else NULL; may be initial_state (in place) */
    void *o;                       /* bf16 */
    const int32_t *cu_seqlens;     /* [n + 1] token offsets (packed), or NULL */
    const int64_t *cu_seqlens64;   /* the same as int64; at most one of the two; both NULL: padded */
    int n;                         /* sequences, 0..max_seqs (0: nothing is launched) */
    int total;                     /* tokens: cu_seqlens[n] packed, n * T padded; <= max_tokens */
    void *workspace;               /* kf_plan_workspace() bytes, 16-byte aligned, or NULL to use the plan's own */
} kf_kda_tensors;

/* KF_OK when a kernel exists for d on this context's device, else the status and message
 * kf_kda_plan would give. Never compiles. */
kf_status kf_kda_supported(kf_ctx *ctx, const kf_kda_desc *d);
/* Resolves the variant (bundle winner, database winner, template default), loads its binary
 * (cache, database, bundle, or an NVRTC compile when JIT is allowed) and allocates the plan's
 * workspace for the maxima. Free the plan with kf_plan_free. */
kf_status kf_kda_plan(kf_ctx *ctx, const kf_kda_desc *d, kf_plan **out);
/* Checks the call against the plan (pointers, alignment, n and total within the maxima) and
 * enqueues the kernels on stream. No allocation, no synchronisation: capturable in a CUDA graph. */
kf_status kf_kda_run(kf_plan *p, const kf_kda_tensors *t, void *stream);

/* ---- Split-score decode (absorbed MLA; base + per-layer delta, joint layer-group scan) ----------
 *
 * Layer l, query row i, head h (kv head h / (hq / hkv), the same for every part):
 *   score_j = scale * sum_p q[l][p](i, h) . k_p(l)(j)          over the key parts p
 *   o[l](i, h) = softmax_j(score) [v_0 | v_1(l) | ...](j)        value parts concatenated
 * Key parts, in desc.parts, "<name><dim>" joined by "_" (each dim a multiple of 16, 1..4 parts):
 * "latent512_rope64" (absorbed MLA, hkv 1), "base128_delta32". Part 0 (and its value) is shared by
 * the desc.layers layers of a joint scan (read once for all); every other part has one cache per
 * layer. Values: KF_PARTS_VALUE_ALIAS: the first dv columns of key part 0's rows (MLA: the latent,
 * read once with the key); KF_PARTS_VALUE_SEPARATE: one value cache per key part, same dims
 * (dv = the sum of the dims).
 * Tensors (element strides {batch (page when paged), sequence (key in page), head}; the last
 * dimension contiguous, rows 16-byte aligned):
 *   q[l][p] [B, Sq, Hq, dim_p]; caches [B, max_kv, Hkv, dim] or, paged (desc.page_size > 0),
 *   [pages, page_size, Hkv, dim] addressed through block_table [B, bt_stride] (int32 page indices);
 *   o[l] [B, Sq, Hq, dv]; lse[l] [B, Hq, Sq] fp32 natural log (optional).
 * Strides 0 mean contiguous: q {Sq*Hq*dim, Hq*dim, dim} (Sq of the call), caches
 * {rows*Hkv*dim, Hkv*dim, dim} (rows: max_kv or page_size), o {Sq*Hq*dv, Hq*dv, dv}.
 * MLA with one 576-wide cache row: k[0][0] = {cache, {s, 576, 576}}, k[0][1] = {cache + 512 elements,
 * the same strides}; queries likewise.
 * FP8 latent cache (desc.kv_dtype KF_KV_E4M3; absorbed-MLA form only: KF_PARTS_VALUE_ALIAS, layers 1): the caches
 * hold e4m3 bytes (their strides in bytes, multiples of 16) and tensors.kv_scale one fp32 scale per token and kv
 * head, addressed as the caches ([B, max_kv, Hkv] or, paged, [pages, page_size, Hkv] through the same block table;
 * element strides {batch (page), token, head}, 0: contiguous; 4-byte aligned): the key and the value of token j are
 * kv_scale(j) * e4m3, every column of the row (latent and rope). q and o stay in desc.dtype. Served by the mma.sync
 * kernel (sm_80 and newer; on sm_90a too); the wgmma kernels have no FP8 path.
 */
typedef enum { KF_PARTS_VALUE_ALIAS = 0, KF_PARTS_VALUE_SEPARATE = 1 } kf_parts_value;

typedef struct kf_parts_desc {
    kf_dtype dtype;
    const char *parts;             /* "latent512_rope64"; copied by kf_parts_plan */
    kf_parts_value value;
    int dv;                        /* columns of o */
    int hq, hkv;                   /* hq % hkv == 0 */
    int layers;                    /* 1..4 */
    int page_size;                 /* 0: contiguous caches; else a power of two 16..1024 (64 for MLA) */
    int causal;                    /* bottom-right aligned when Sq > 1 */
    float scale;                   /* softmax scale, > 0 (given by the caller) */
    int max_batch, max_q, max_kv;  /* max_q 1..16 */
    kf_kv_dtype kv_dtype;          /* (appended) KF_KV_E4M3: the FP8 latent cache with per-token scales (above);
                                      KF_KV_SAME: caches in desc.dtype */
} kf_parts_desc;
#define KF_PARTS_DESC_INIT {KF_BF16, NULL, KF_PARTS_VALUE_ALIAS, 0, 0, 0, 1, 0, 0, 0.0f, 0, 0, 0, KF_KV_SAME}

typedef struct kf_parts_view {
    const void *ptr;
    long long strides[3];          /* batch (page), sequence, head; 0: contiguous */
} kf_parts_view;

typedef struct kf_parts_tensors {
    kf_parts_view q[4][4];         /* q[l][p]: layer l's queries of key part p */
    kf_parts_view k[4][4];         /* k[l][p]: key part p's cache of layer l (part 0 shared: k[0][0]) */
    kf_parts_view v[4][4];         /* SEPARATE: v[l][p] as k; ALIAS: unused */
    kf_parts_view o[4];            /* o[l] */
    float *lse[4];                 /* lse[l] or NULL */
    const int32_t *kv_len;         /* [batch] (<= max_kv) or NULL: kv_len_all each */
    int kv_len_all;
    const int32_t *block_table;    /* paged plans: [batch, bt_stride]; else NULL */
    int bt_stride;
    int batch, q_len;              /* <= max_batch, 1..max_q */
    void *workspace;               /* kf_plan_workspace() bytes, or NULL to use the plan's own */
    kf_parts_view kv_scale;        /* (appended) desc.kv_dtype KF_KV_E4M3: the per-token fp32 scales; else unset */
} kf_parts_tensors;

/* KF_OK when a kernel exists for d on this context's device, else the status and message
 * kf_parts_plan would give. Never compiles. */
kf_status kf_parts_supported(kf_ctx *ctx, const kf_parts_desc *d);
/* As kf_attn_plan, for the split-score family. Free the plan with kf_plan_free. */
kf_status kf_parts_plan(kf_ctx *ctx, const kf_parts_desc *d, kf_plan **out);
/* Checks the call against the plan and enqueues the kernels (graph-safe, as kf_attn_run). */
kf_status kf_parts_run(kf_plan *p, const kf_parts_tensors *t, void *stream);

#ifdef __cplusplus
}
#endif
#endif
